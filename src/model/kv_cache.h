// Per-sequence caches, built for what comes next: batches of sequences at different
// positions, truncation (speculative decoding rolls back rejected drafts), prefixes
// shared between sequences (agent turns reuse the conversation so far), and layers
// whose cache is a fixed-size recurrent state instead of keys and values (Lightning
// attention in MiniMax-Text-01 / M1).
//
// Keys and values live in fixed-size blocks of `block_tokens` positions, taken from a
// KvBlockPool shared by all sequences. A block holds every KV layer's K and V for its
// positions, head-major: [kv_heads][block_tokens][head_dim], so that one head's rows are
// contiguous (attention streams them; token-major rows of one head would be a page
// apart at M2's sizes, defeating the hardware prefetcher and the TLB). Blocks are reference counted: Fork() shares them, and a shared block is
// copied before it is written (copy-on-write). Recurrent layers keep one state per
// sequence, copied on Fork; they cannot be truncated (a later issue adds checkpoints).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"

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
};

class KvBlockPool {
 public:
  // `max_blocks` bounds memory; 0 means grow as needed.
  explicit KvBlockPool(CacheLayout layout, int64_t max_blocks = 0);
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  const CacheLayout& layout() const { return layout_; }
  int64_t block_tokens() const { return layout_.block_tokens; }

  // A block with reference count 1, or an error when the pool is full.
  Result<int32_t> Allocate();
  void Retain(int32_t block);
  void Release(int32_t block);
  int32_t RefCount(int32_t block) const { return refs_[block]; }
  void CopyBlock(int32_t from, int32_t to);

  // K or V of `layer` in `block`: [kv_heads, block_tokens, head_dim] fp32.
  float* K(int32_t block, int64_t layer) { return blocks_[block].get() + layer_offset_[layer]; }
  float* V(int32_t block, int64_t layer) { return K(block, layer) + layer_half_[layer]; }

  int64_t blocks_in_use() const { return static_cast<int64_t>(blocks_.size() - free_.size()); }
  // Blocks ever allocated (freed ones are kept for reuse): the pool's memory.
  int64_t blocks_allocated() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_floats() const { return block_floats_; }

 private:
  CacheLayout layout_;
  int64_t max_blocks_;
  int64_t block_floats_ = 0;
  std::vector<int64_t> layer_offset_, layer_half_;
  std::vector<std::unique_ptr<float[]>> blocks_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;
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
  // Forgets positions >= new_length (new_length <= length). Fails on recurrent layers
  // unless new_length == length.
  Status Truncate(int64_t new_length);
  // A new sequence sharing this one's cached positions (no copy until written).
  SequenceCache Fork() const;

  // K / V of position `pos` (< length) and KV head `head`: [head_dim].
  float* K(int64_t layer, int64_t pos, int64_t head = 0);
  float* V(int64_t layer, int64_t pos, int64_t head = 0);
  // K / V of `layer` in the i-th block of this sequence: [kv_heads, block_tokens, head_dim].
  const float* KBlock(int64_t layer, size_t i) const { return pool_->K(blocks_[i], layer); }
  const float* VBlock(int64_t layer, size_t i) const { return pool_->V(blocks_[i], layer); }
  int64_t block_tokens() const { return pool_->block_tokens(); }
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
  // there that are shared with a fork are copied first (copy-on-write). Only fails when
  // the pool is full; the cache's contents are the same either way.
  Status Unshare(int64_t from, int64_t to);

  const CacheLayout& layout() const { return pool_->layout(); }
  const std::vector<int32_t>& block_table() const { return blocks_; }

 private:
  void ReleaseAll();
  KvBlockPool* pool_;
  int64_t length_ = 0;
  std::vector<int32_t> blocks_;
  std::vector<std::vector<float>> states_;  // per layer; empty for KV layers
  std::vector<int64_t> filled_;             // per layer, <= length_
};

}  // namespace m2
