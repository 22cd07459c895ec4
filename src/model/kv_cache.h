// Per-sequence caches, built for what comes next: batches of sequences at different
// positions, truncation (speculative decoding rolls back rejected drafts), prefixes
// shared between sequences (agent turns reuse the conversation so far), and layers
// whose cache is a fixed-size recurrent state instead of keys and values (Lightning
// attention in MiniMax-Text-01 / M1).
//
// Keys and values live in fixed-size blocks of `block_tokens` positions, taken from a
// KvBlockPool shared by all sequences. A block is an integer id; each KV layer has its
// own arena of planes, one per (K or V, KV head): [2][kv_heads][capacity][block_tokens]
// [head_dim]. Block b's rows of a head are the slice [b * block_stride(l), (b + 1) *
// block_stride(l)) of that head's plane, so a sequence whose blocks were taken in order
// has each head's keys (and values) in one run of memory, which attention streams.
// (Blocks used to hold every head's rows, head after head: a head's rows then came in 4 KiB
// runs 32 KiB apart, which the hardware prefetchers do not follow, and decode attention at
// context 8192 read its cache at half the speed: gemv_bench --attention, README.)
// Elements are fp32 or bf16 (CacheLayout::kv_dtype). A sequence's block table is a
// list of ids, valid for every layer at once, so a forward pass computes it once.
//
// Blocks are reference counted: Fork() shares them, and a shared block is copied before
// it is written (copy-on-write). Recurrent layers keep one state per sequence, copied on
// Fork; they cannot be truncated.
//
// Prefix cache: a full block can be registered under a hash of its token ids chained
// with its predecessor's hash (PrefixHash). A registered block is immutable (writing to
// it copies it first, as for a shared block) and, when its last reference goes, it is
// kept with its contents instead of freed: a later sequence whose tokens hash the same
// takes it back (LookupPrefix) instead of recomputing it. Such unreferenced cached blocks
// are evicted least recently used when Allocate needs room.
//
// Recurrent layers (Lightning) have no per-position entries to share: a cached prefix is
// only usable with their states at its end. The pool keeps such state checkpoints, each
// keyed by the hash of the block it follows (all recurrent layers' states after the
// tokens of that chain of blocks), up to max_checkpoints(), least recently used evicted;
// a sequence adopts a cached prefix up to its deepest block that has one. Without room
// for a checkpoint (max_checkpoints() == 0) prefix sharing is off for such a layout.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kernels/attention.h"

namespace m2 {

enum class LayerCacheKind : uint8_t { kKeyValue, kRecurrentState };

struct LayerCacheSpec {
  LayerCacheKind kind = LayerCacheKind::kKeyValue;
  int64_t kv_heads = 0, head_dim = 0;  // kKeyValue
  int64_t state_floats = 0;            // kRecurrentState
};

struct CacheLayout {
  int64_t block_tokens = 16;
  std::vector<LayerCacheSpec> layers;
  KvDtype kv_dtype = KvDtype::kF32;
};

// The hash of a block of token ids following a prefix whose hash is `parent` (0 for the
// first block).
uint64_t PrefixHash(uint64_t parent, std::span<const int32_t> tokens);

// What the other ranks of a model split over several processes need to keep pools of
// their own in step with rank 0's (model/parallel.h): they hold the same block ids, write
// them in the same forward passes, and copy what rank 0 copied (copy-on-write). Shared by
// the pools and the model, so either may go first.
struct PoolMirror {
  struct Copy {
    uint64_t pool;
    int32_t from, to;
  };
  std::mutex mu;
  std::vector<Copy> copies;      // since the model last took them
  std::vector<uint64_t> retired;  // pools destroyed since then
};

class KvBlockPool {
 public:
  // `max_blocks` bounds memory (the arenas are reserved for that many blocks at once, and
  // filled by the OS as they are first written); 0 means grow as needed.
  explicit KvBlockPool(CacheLayout layout, int64_t max_blocks = 0);
  ~KvBlockPool();
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  const CacheLayout& layout() const { return layout_; }
  int64_t block_tokens() const { return layout_.block_tokens; }
  KvDtype dtype() const { return layout_.kv_dtype; }
  int64_t max_blocks() const { return max_blocks_; }

  // A block with reference count 1 (a free one, else one never used yet while the pool
  // has room or may grow, else the least recently used cached one), or an error when
  // every block is referenced.
  Result<int32_t> Allocate();
  void Retain(int32_t block);
  void Release(int32_t block);
  int32_t RefCount(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
  void CopyBlock(int32_t from, int32_t to);
  // Blocks Allocate can hand out now without failing (free + evictable cached), or -1
  // when the pool grows without bound.
  int64_t available_blocks() const;

  // Layer `layer`'s arena: block b's K rows of head h at KBase + h * head_stride + b *
  // block_stride elements (block_tokens rows of head_dim), its V rows at VBase + the same.
  // Valid until the pool grows (Allocate, Reserve): a forward pass takes them after its
  // Extends.
  void* KBase(int64_t layer) { return arenas_[static_cast<size_t>(layer)]; }
  void* VBase(int64_t layer) {
    return static_cast<char*>(KBase(layer)) + capacity_ * half_bytes_[static_cast<size_t>(layer)];
  }
  int64_t block_stride(int64_t layer) const { return row_block_elems_[static_cast<size_t>(layer)]; }
  int64_t head_stride(int64_t layer) const { return capacity_ * row_block_elems_[static_cast<size_t>(layer)]; }
  // K or V of `layer` in `block`, KV head `head`: [block_tokens, head_dim] elements of dtype().
  void* KData(int32_t block, int64_t layer, int64_t head = 0);
  void* VData(int32_t block, int64_t layer, int64_t head = 0);
  // The same as fp32 pointers: only for a pool of fp32 (checked).
  float* K(int32_t block, int64_t layer, int64_t head = 0);
  float* V(int32_t block, int64_t layer, int64_t head = 0);

  int64_t blocks_in_use() const { return in_use_; }  // referenced by a sequence
  int64_t blocks_cached() const { return static_cast<int64_t>(lru_.size()); }  // unreferenced, kept for reuse
  // Blocks ever allocated (freed ones are kept for reuse): the pool's memory.
  int64_t blocks_allocated() const { return static_cast<int64_t>(refs_.size()); }
  int64_t block_floats() const { return block_elems_; }  // elements of one block over all layers
  int64_t block_bytes() const { return block_elems_ * KvDtypeBytes(layout_.kv_dtype); }

  // --- Mirroring (model/parallel.h).
  uint64_t id() const { return id_; }  // unique in this process
  // From now on CopyBlock and the destructor report to `m` (a split model's rank 0 sets it).
  void set_mirror(std::shared_ptr<PoolMirror> m) { mirror_ = std::move(m); }
  bool mirrored() const { return mirror_ != nullptr; }
  // Makes room for block ids [0, blocks) in the arenas (the other ranks of a split model
  // address blocks by the ids rank 0 chose, without allocating them).
  Status Reserve(int64_t blocks);

  // --- Prefix cache.
  bool has_recurrent() const { return has_recurrent_; }  // some layer keeps a recurrent state
  bool prefix_cache_supported() const { return !has_recurrent_ || max_checkpoints_ > 0; }
  // Registers a block every position of which holds the entries of `tokens` (block_tokens
  // ids) after a prefix hashing to `parent`; returns its hash. A block of the same
  // contents already registered wins (this one stays unregistered). No-op when
  // prefix_cache_supported() is false.
  uint64_t Register(int32_t block, uint64_t parent, std::span<const int32_t> tokens);
  bool IsRegistered(int32_t block) const { return hash_of_[static_cast<size_t>(block)] != 0; }
  // The registered block with this hash and these tokens, retained for the caller; -1 if
  // none.
  int32_t LookupPrefix(uint64_t hash, std::span<const int32_t> tokens);
  // Hits and lookups of LookupPrefix so far.
  int64_t prefix_hits() const { return hits_; }
  int64_t prefix_lookups() const { return lookups_; }
  // Drops every unreferenced cached block (they become free) and every state checkpoint.
  void ClearPrefixCache();

  // --- Recurrent-state checkpoints (layouts with recurrent layers).
  // Floats of one checkpoint: every recurrent layer's state, in layer order.
  int64_t checkpoint_floats() const { return checkpoint_floats_; }
  int64_t checkpoint_bytes() const { return checkpoint_floats_ * static_cast<int64_t>(sizeof(float)); }
  // How many checkpoints are kept at most (0: none, the default); lowering it evicts.
  void set_max_checkpoints(int64_t n);
  int64_t max_checkpoints() const { return max_checkpoints_; }
  int64_t checkpoints() const { return static_cast<int64_t>(checkpoints_.size()); }
  int64_t checkpoints_evicted() const { return checkpoints_evicted_; }
  bool HasCheckpoint(uint64_t hash) const { return checkpoints_.count(hash) != 0; }
  // Keeps `states` (checkpoint_floats() values) as the states after the block hashing to
  // `hash`, evicting the least recently used checkpoint when full; replaces an existing
  // one. No-op when max_checkpoints() is 0.
  void PutCheckpoint(uint64_t hash, std::vector<float> states);
  // The checkpoint for `hash` (now the most recently used), or null.
  const std::vector<float>* FindCheckpoint(uint64_t hash);

 private:
  Status Grow(int64_t blocks);
  // Bytes from KBase / VBase to block `block`'s rows of `head`.
  int64_t RowsOffsetBytes(int32_t block, int64_t layer, int64_t head) const;
  void Unregister(int32_t block);
  void EvictOldestCheckpoint();

  CacheLayout layout_;
  uint64_t id_;
  std::shared_ptr<PoolMirror> mirror_;
  int64_t max_blocks_;
  int64_t capacity_ = 0;  // blocks the arenas hold
  int64_t block_elems_ = 0;
  bool has_recurrent_ = false;
  std::vector<int64_t> half_elems_, half_bytes_;  // per layer: K (or V) of one block, every head
  std::vector<int64_t> row_block_elems_;          // per layer: one head's rows of one block
  std::vector<int64_t> kv_heads_;                 // per layer (0 for recurrent layers)
  std::vector<char*> arenas_;                     // per layer (null for recurrent layers)
  std::vector<size_t> arena_bytes_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;
  int64_t in_use_ = 0;
  // Prefix cache: hash -> block; per block its hash (0: not registered), its tokens and
  // its place in the LRU list of unreferenced cached blocks (front: oldest).
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<uint64_t> hash_of_;
  std::vector<std::vector<int32_t>> tokens_of_;
  std::list<int32_t> lru_;
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<uint8_t> in_lru_;
  int64_t hits_ = 0, lookups_ = 0;
  // State checkpoints: hash -> states and place in their LRU list (front: oldest).
  struct Checkpoint {
    std::vector<float> states;
    std::list<uint64_t>::iterator lru;
  };
  int64_t checkpoint_floats_ = 0;
  int64_t max_checkpoints_ = 0;
  int64_t checkpoints_evicted_ = 0;
  std::unordered_map<uint64_t, Checkpoint> checkpoints_;
  std::list<uint64_t> checkpoint_lru_;
};

class SequenceCache {
 public:
  explicit SequenceCache(KvBlockPool* pool);
  ~SequenceCache();
  SequenceCache(SequenceCache&& other) noexcept;
  SequenceCache& operator=(SequenceCache&& other) noexcept;
  SequenceCache(const SequenceCache&) = delete;
  SequenceCache& operator=(const SequenceCache&) = delete;

  int64_t length() const { return length_; }
  // Makes positions [length, new_length) writable and sets length = new_length.
  // All or nothing: when the pool is full, the cache is left as it was.
  Status Extend(int64_t new_length);
  // Blocks Extend(new_length) would take from the pool (new blocks plus a copy of a
  // shared or registered last block that it would write into).
  int64_t BlocksToExtend(int64_t new_length) const;
  // Forgets positions >= new_length (new_length <= length). Fails on recurrent layers
  // unless new_length == length.
  Status Truncate(int64_t new_length);
  // Gives back positions [old_length, length) that an Extend made and nothing has been
  // written to yet (Model::Forward undoing its Extends when the pool runs out), recurrent
  // layers or not: their states are untouched. PRECONDITION: old_length <= length.
  void UndoExtend(int64_t old_length);
  // Recurrent layers cannot be truncated; instead their states can be saved and restored
  // (speculative decoding on the Lightning models: saved before a verification pass, and
  // restored when a draft is rejected, the accepted tokens then run again).
  bool has_recurrent() const { return pool_->has_recurrent(); }
  // Copies every recurrent state and remembers the length they belong to (replacing an
  // earlier save). No-op without recurrent layers.
  void SaveStates();
  // Back to the saved states and length: positions from it on are forgotten (keys and
  // values too). An error when nothing is saved or the cache is now shorter than the save.
  Status RestoreSavedStates();
  // Every recurrent layer's state, in layer order (KvBlockPool::checkpoint_floats()
  // values), into *out / back from `states` (a checkpoint of the pool: the states at this
  // cache's length, which must be a block boundary the checkpoint belongs to).
  void CopyStatesTo(std::vector<float>* out) const;
  void LoadStates(std::span<const float> states);
  // A new sequence sharing this one's cached positions (no copy until written).
  SequenceCache Fork() const;
  // For an empty cache: takes `blocks` (already retained for it, e.g. by LookupPrefix)
  // as its first blocks, holding positions [0, length) for every trunk layer `layers`
  // (length <= blocks.size() * block_tokens).
  void AdoptPrefix(std::span<const int32_t> blocks, int64_t length, int64_t layers);

  // K / V of position `pos` (< length) and KV head `head`: [head_dim] elements of the
  // pool's dtype (KRaw / VRaw), or fp32 pointers for an fp32 pool (K / V, checked).
  void* KRaw(int64_t layer, int64_t pos, int64_t head = 0);
  void* VRaw(int64_t layer, int64_t pos, int64_t head = 0);
  float* K(int64_t layer, int64_t pos, int64_t head = 0);
  float* V(int64_t layer, int64_t pos, int64_t head = 0);
  // K / V rows of `layer`, KV head `head`, in the i-th block of this sequence (fp32 pools only).
  const float* KBlock(int64_t layer, size_t i, int64_t head = 0) const { return pool_->K(blocks_[i], layer, head); }
  const float* VBlock(int64_t layer, size_t i, int64_t head = 0) const { return pool_->V(blocks_[i], layer, head); }
  int64_t block_tokens() const { return pool_->block_tokens(); }
  KvBlockPool* pool() const { return pool_; }
  // The fixed-size state of a recurrent layer.
  float* State(int64_t layer) { return states_[layer].data(); }

  // Positions [0, filled(layer)) of a KV layer hold entries computed from this
  // sequence's current tokens. Model::Forward fills the trunk's layers up to length().
  // The layer of an MTP module lags behind the trunk (module k at position i reads token
  // i+k+1, see Model::ForwardMtp), so it is filled separately and written at positions
  // below length(). Truncate lowers it to at most the new length; Fork copies it.
  int64_t filled(int64_t layer) const { return filled_[static_cast<size_t>(layer)]; }
  // PRECONDITION: 0 <= n <= length().
  void set_filled(int64_t layer, int64_t n);
  // Makes positions [from, to) (0 <= from <= to <= length()) safe to write again: blocks
  // there that are shared with a fork or registered in the prefix cache are copied first
  // (copy-on-write). Only fails when the pool is full; the contents are the same either way.
  Status Unshare(int64_t from, int64_t to);

  const CacheLayout& layout() const { return pool_->layout(); }
  const std::vector<int32_t>& block_table() const { return blocks_; }

 private:
  void ReleaseAll();
  // Whether block i must be copied before it is written.
  bool MustCopy(size_t i) const;
  KvBlockPool* pool_;
  int64_t length_ = 0;
  std::vector<int32_t> blocks_;
  std::vector<std::vector<float>> states_;  // per layer; empty for KV layers
  std::vector<std::vector<float>> saved_states_;  // SaveStates: per layer; empty for KV layers
  int64_t saved_length_ = -1;                      // -1: nothing saved
  std::vector<int64_t> filled_;             // per layer, <= length_
};

}  // namespace m2
