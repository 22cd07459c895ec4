#include "model/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/check.h"

namespace m2 {

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

char* MapZeroed(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  M2_CHECK(p != MAP_FAILED, "cannot map {} bytes for the KV cache", bytes);
  // 2 MiB pages where THP allows (its "madvise" mode needs the hint; a hint only). When a
  // head's rows were 4 KiB runs 32 KiB apart (blocks holding every head), at long contexts
  // the TLB misses showed: context 8192 vs 128 on the FP8 slice (2 threads, Intel VM)
  // 1.144-1.163x against 1.157-1.170x, three alternating pairs. With a plane per head
  // (each head's rows one run) decode attention from memory is still 10-15% faster on 2 MiB
  // pages (gemv_bench --attention, Zen 4 VM: 5.1-5.7 against 6.0-6.8 ms for 128 MiB of K and V
  // with bf16 products). Memory is committed 2 MiB of a plane at a time as blocks are first
  // written (MAP_NORESERVE): a first block commits up to 2 MiB per plane (2 x KV heads planes
  // per layer), never more than the pool's arenas, i.e. its budget.
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  return static_cast<char*>(p);
}

}  // namespace

uint64_t PrefixHash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = Mix(parent ^ 0x6a09e667f3bcc908ULL);
  for (int32_t t : tokens) h = Mix(h + static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ULL);
  return h == 0 ? 1 : h;  // 0 means "not registered"
}

namespace {
std::atomic<uint64_t> next_pool_id{1};
}  // namespace

KvBlockPool::KvBlockPool(CacheLayout layout, int64_t max_blocks)
    : layout_(std::move(layout)), id_(next_pool_id.fetch_add(1)), max_blocks_(max_blocks) {
  M2_CHECK(layout_.block_tokens > 0);
  M2_CHECK(max_blocks_ >= 0);
  const int64_t eb = KvDtypeBytes(layout_.kv_dtype);
  for (const auto& l : layout_.layers) {
    const int64_t row = KvRowElems(layout_.kv_dtype, l.head_dim);  // elements of one cached row
    const int64_t half = l.kind == LayerCacheKind::kKeyValue ? layout_.block_tokens * l.kv_heads * row : 0;
    has_recurrent_ |= l.kind == LayerCacheKind::kRecurrentState;
    if (l.kind == LayerCacheKind::kRecurrentState) checkpoint_floats_ += l.state_floats;
    half_elems_.push_back(half);
    half_bytes_.push_back(half * eb);
    row_block_elems_.push_back(l.kind == LayerCacheKind::kKeyValue ? layout_.block_tokens * row : 0);
    kv_heads_.push_back(l.kind == LayerCacheKind::kKeyValue ? l.kv_heads : 0);
    block_elems_ += 2 * half;
  }
  arenas_.assign(layout_.layers.size(), nullptr);
  arena_bytes_.assign(layout_.layers.size(), 0);
  M2_CHECK(Grow(max_blocks_ > 0 ? max_blocks_ : 16).ok());
}

KvBlockPool::~KvBlockPool() {
  if (mirror_) {
    std::lock_guard<std::mutex> lock(mirror_->mu);
    mirror_->retired.push_back(id_);
  }
  for (size_t l = 0; l < arenas_.size(); ++l)
    if (arenas_[l] != nullptr) munmap(arenas_[l], arena_bytes_[l]);
}

Status KvBlockPool::Grow(int64_t blocks) {
  const int64_t eb = KvDtypeBytes(layout_.kv_dtype);
  for (size_t l = 0; l < arenas_.size(); ++l) {
    const size_t bytes = static_cast<size_t>(blocks * 2 * half_bytes_[l]);
    if (bytes == 0) continue;
    char* fresh = MapZeroed(bytes);
    if (arenas_[l] != nullptr) {  // each plane (K or V of a head) to its place in the larger arena
      const int64_t plane_old = capacity_ * row_block_elems_[l] * eb, plane_new = blocks * row_block_elems_[l] * eb;
      for (int64_t p = 0; p < 2 * kv_heads_[l]; ++p)
        std::memcpy(fresh + p * plane_new, arenas_[l] + p * plane_old, static_cast<size_t>(plane_old));
      munmap(arenas_[l], arena_bytes_[l]);
    }
    arenas_[l] = fresh;
    arena_bytes_[l] = bytes;
  }
  capacity_ = blocks;
  return Status::Ok();
}

Result<int32_t> KvBlockPool::Allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (max_blocks_ == 0 || blocks_allocated() < max_blocks_) {  // a block never used yet
    if (blocks_allocated() >= capacity_) M2_RETURN_IF_ERROR(Grow(2 * capacity_));
    b = static_cast<int32_t>(refs_.size());
    refs_.push_back(0);
    hash_of_.push_back(0);
    tokens_of_.emplace_back();
    lru_pos_.emplace_back();
    in_lru_.push_back(0);
  } else if (!lru_.empty()) {  // evict the least recently used cached prefix block
    b = lru_.front();
    lru_.pop_front();
    in_lru_[static_cast<size_t>(b)] = 0;
    Unregister(b);
  } else {
    return Error("the KV cache is full: all {} blocks of {} tokens are in use", max_blocks_, layout_.block_tokens);
  }
  refs_[static_cast<size_t>(b)] = 1;
  ++in_use_;
  return b;
}

void KvBlockPool::Retain(int32_t block) {
  const auto i = static_cast<size_t>(block);
  if (refs_[i] == 0) {  // a cached block taken back
    M2_CHECK(in_lru_[i], "retain of free block {}", block);
    lru_.erase(lru_pos_[i]);
    in_lru_[i] = 0;
    ++in_use_;
  }
  ++refs_[i];
}

void KvBlockPool::Release(int32_t block) {
  const auto i = static_cast<size_t>(block);
  M2_CHECK(refs_[i] > 0, "release of free block {}", block);
  if (--refs_[i] > 0) return;
  --in_use_;
  if (hash_of_[i] != 0) {
    lru_pos_[i] = lru_.insert(lru_.end(), block);
    in_lru_[i] = 1;
  } else {
    free_.push_back(block);
  }
}

int64_t KvBlockPool::available_blocks() const {
  if (max_blocks_ == 0) return -1;
  return static_cast<int64_t>(free_.size() + lru_.size()) + (max_blocks_ - blocks_allocated());
}

Status KvBlockPool::Reserve(int64_t blocks) {
  if (blocks <= capacity_) return Status::Ok();
  if (max_blocks_ > 0 && blocks > max_blocks_)
    return Error("KV pool: block {} asked for, but the pool holds {} blocks", blocks - 1, max_blocks_);
  return Grow(std::max(blocks, 2 * capacity_));
}

void KvBlockPool::CopyBlock(int32_t from, int32_t to) {
  if (mirror_) {
    std::lock_guard<std::mutex> lock(mirror_->mu);
    mirror_->copies.push_back({id_, from, to});
  }
  const int64_t eb = KvDtypeBytes(layout_.kv_dtype);
  for (size_t l = 0; l < arenas_.size(); ++l) {
    const int64_t bytes = row_block_elems_[l] * eb, plane = capacity_ * bytes;
    for (int64_t p = 0; p < 2 * kv_heads_[l]; ++p)
      std::memcpy(arenas_[l] + p * plane + to * bytes, arenas_[l] + p * plane + from * bytes, static_cast<size_t>(bytes));
  }
}

int64_t KvBlockPool::RowsOffsetBytes(int32_t block, int64_t layer, int64_t head) const {
  return (head * head_stride(layer) + block * block_stride(layer)) * KvDtypeBytes(layout_.kv_dtype);
}
void* KvBlockPool::KData(int32_t block, int64_t layer, int64_t head) {
  return static_cast<char*>(KBase(layer)) + RowsOffsetBytes(block, layer, head);
}
void* KvBlockPool::VData(int32_t block, int64_t layer, int64_t head) {
  return static_cast<char*>(VBase(layer)) + RowsOffsetBytes(block, layer, head);
}
float* KvBlockPool::K(int32_t block, int64_t layer, int64_t head) {
  M2_CHECK(layout_.kv_dtype == KvDtype::kF32, "fp32 access to a {} KV cache", KvDtypeName(layout_.kv_dtype));
  return static_cast<float*>(KData(block, layer, head));
}
float* KvBlockPool::V(int32_t block, int64_t layer, int64_t head) {
  M2_CHECK(layout_.kv_dtype == KvDtype::kF32, "fp32 access to a {} KV cache", KvDtypeName(layout_.kv_dtype));
  return static_cast<float*>(VData(block, layer, head));
}

uint64_t KvBlockPool::Register(int32_t block, uint64_t parent, std::span<const int32_t> tokens) {
  M2_CHECK(static_cast<int64_t>(tokens.size()) == layout_.block_tokens, "register {} tokens as a block of {}",
           tokens.size(), layout_.block_tokens);
  const uint64_t h = PrefixHash(parent, tokens);
  const auto i = static_cast<size_t>(block);
  if (!prefix_cache_supported() || hash_of_[i] != 0 || by_hash_.count(h) != 0) return h;
  by_hash_[h] = block;
  hash_of_[i] = h;
  tokens_of_[i].assign(tokens.begin(), tokens.end());
  return h;
}

void KvBlockPool::Unregister(int32_t block) {
  const auto i = static_cast<size_t>(block);
  if (hash_of_[i] == 0) return;
  auto it = by_hash_.find(hash_of_[i]);
  if (it != by_hash_.end() && it->second == block) {
    by_hash_.erase(it);
    // Its checkpoint is of no use without it (a lookup stops at the missing block).
    if (auto c = checkpoints_.find(hash_of_[i]); c != checkpoints_.end()) {
      checkpoint_lru_.erase(c->second.lru);
      checkpoints_.erase(c);
    }
  }
  hash_of_[i] = 0;
  tokens_of_[i].clear();
}

int32_t KvBlockPool::LookupPrefix(uint64_t hash, std::span<const int32_t> tokens) {
  ++lookups_;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const auto& have = tokens_of_[static_cast<size_t>(it->second)];
  if (!std::equal(have.begin(), have.end(), tokens.begin(), tokens.end())) return -1;
  Retain(it->second);
  ++hits_;
  return it->second;
}

void KvBlockPool::ClearPrefixCache() {
  for (int32_t b : lru_) {
    in_lru_[static_cast<size_t>(b)] = 0;
    Unregister(b);
    free_.push_back(b);
  }
  lru_.clear();
  checkpoints_.clear();
  checkpoint_lru_.clear();
}

void KvBlockPool::set_max_checkpoints(int64_t n) {
  M2_CHECK(n >= 0, "max_checkpoints {}", n);
  max_checkpoints_ = has_recurrent_ ? n : 0;
  while (static_cast<int64_t>(checkpoints_.size()) > max_checkpoints_) EvictOldestCheckpoint();
}

void KvBlockPool::EvictOldestCheckpoint() {
  checkpoints_.erase(checkpoint_lru_.front());
  checkpoint_lru_.pop_front();
  ++checkpoints_evicted_;
}

void KvBlockPool::PutCheckpoint(uint64_t hash, std::vector<float> states) {
  if (max_checkpoints_ == 0) return;
  M2_CHECK(static_cast<int64_t>(states.size()) == checkpoint_floats_, "a checkpoint of {} floats, expected {}",
           states.size(), checkpoint_floats_);
  if (auto it = checkpoints_.find(hash); it != checkpoints_.end()) {
    it->second.states = std::move(states);
    checkpoint_lru_.splice(checkpoint_lru_.end(), checkpoint_lru_, it->second.lru);
    return;
  }
  if (static_cast<int64_t>(checkpoints_.size()) >= max_checkpoints_) EvictOldestCheckpoint();
  checkpoint_lru_.push_back(hash);
  checkpoints_.emplace(hash, Checkpoint{std::move(states), std::prev(checkpoint_lru_.end())});
}

const std::vector<float>* KvBlockPool::FindCheckpoint(uint64_t hash) {
  auto it = checkpoints_.find(hash);
  if (it == checkpoints_.end()) return nullptr;
  checkpoint_lru_.splice(checkpoint_lru_.end(), checkpoint_lru_, it->second.lru);
  return &it->second.states;
}

SequenceCache::SequenceCache(KvBlockPool* pool) : pool_(pool) {
  for (const auto& l : pool_->layout().layers)
    states_.emplace_back(l.kind == LayerCacheKind::kRecurrentState ? static_cast<size_t>(l.state_floats) : 0, 0.0f);
  filled_.assign(pool_->layout().layers.size(), 0);
}

SequenceCache::~SequenceCache() { ReleaseAll(); }

SequenceCache::SequenceCache(SequenceCache&& o) noexcept
    : pool_(o.pool_),
      length_(o.length_),
      blocks_(std::move(o.blocks_)),
      states_(std::move(o.states_)),
      saved_states_(std::move(o.saved_states_)),
      saved_length_(o.saved_length_),
      filled_(std::move(o.filled_)) {
  o.saved_length_ = -1;
  o.blocks_.clear();
  o.length_ = 0;
  o.filled_.assign(filled_.size(), 0);
}

SequenceCache& SequenceCache::operator=(SequenceCache&& o) noexcept {
  if (this != &o) {
    ReleaseAll();
    pool_ = o.pool_;
    length_ = o.length_;
    blocks_ = std::move(o.blocks_);
    states_ = std::move(o.states_);
    saved_states_ = std::move(o.saved_states_);
    saved_length_ = o.saved_length_;
    filled_ = std::move(o.filled_);
    o.saved_length_ = -1;
    o.blocks_.clear();
    o.length_ = 0;
    o.filled_.assign(filled_.size(), 0);
  }
  return *this;
}

void SequenceCache::ReleaseAll() {
  for (int32_t b : blocks_) pool_->Release(b);
  blocks_.clear();
  length_ = 0;
  std::fill(filled_.begin(), filled_.end(), 0);
}

bool SequenceCache::MustCopy(size_t i) const {
  return pool_->RefCount(blocks_[i]) > 1 || pool_->IsRegistered(blocks_[i]);
}

int64_t SequenceCache::BlocksToExtend(int64_t new_length) const {
  if (new_length <= length_) return 0;
  const int64_t bt = pool_->block_tokens();
  const int64_t copy = length_ % bt != 0 && MustCopy(blocks_.size() - 1) ? 1 : 0;
  return (new_length + bt - 1) / bt - static_cast<int64_t>(blocks_.size()) + copy;
}

Status SequenceCache::Extend(int64_t new_length) {
  M2_CHECK(new_length >= length_, "Extend to {} below length {}", new_length, length_);
  const int64_t bt = pool_->block_tokens();
  const int64_t need = (new_length + bt - 1) / bt;
  const size_t had = blocks_.size();
  while (static_cast<int64_t>(blocks_.size()) < need) {
    auto b = pool_->Allocate();
    if (!b.ok()) {  // all or nothing: give back this call's new blocks
      while (blocks_.size() > had) {
        pool_->Release(blocks_.back());
        blocks_.pop_back();
      }
      return b.status();
    }
    blocks_.push_back(*b);
  }
  // The partially filled last block will be written: un-share it (after the new blocks,
  // so that a failure leaves nothing to undo but those).
  if (length_ % bt != 0 && new_length > length_ && MustCopy(had - 1)) {
    auto copy = pool_->Allocate();
    if (!copy.ok()) {
      while (blocks_.size() > had) {
        pool_->Release(blocks_.back());
        blocks_.pop_back();
      }
      return copy.status();
    }
    pool_->CopyBlock(blocks_[had - 1], *copy);
    pool_->Release(blocks_[had - 1]);
    blocks_[had - 1] = *copy;
  }
  length_ = new_length;
  return Status::Ok();
}

Status SequenceCache::Truncate(int64_t new_length) {
  if (new_length < 0 || new_length > length_)
    return Error("cannot truncate a cache of {} positions to {}", length_, new_length);
  if (new_length == length_) return Status::Ok();
  for (size_t l = 0; l < states_.size(); ++l)
    if (!states_[l].empty())
      return Error("layer {} keeps a recurrent state, which cannot be rolled back to position {}", l, new_length);
  UndoExtend(new_length);
  return Status::Ok();
}

void SequenceCache::UndoExtend(int64_t old_length) {
  M2_CHECK(old_length >= 0 && old_length <= length_, "UndoExtend to {} of a cache of {} positions", old_length, length_);
  const int64_t bt = pool_->block_tokens();
  const size_t keep = static_cast<size_t>((old_length + bt - 1) / bt);
  while (blocks_.size() > keep) {
    pool_->Release(blocks_.back());
    blocks_.pop_back();
  }
  length_ = old_length;
  for (int64_t& f : filled_) f = std::min(f, old_length);
}

void SequenceCache::SaveStates() {
  if (!has_recurrent()) return;
  saved_states_.resize(states_.size());
  for (size_t l = 0; l < states_.size(); ++l) saved_states_[l].assign(states_[l].begin(), states_[l].end());
  saved_length_ = length_;
}

Status SequenceCache::RestoreSavedStates() {
  if (saved_length_ < 0) return Error("no saved recurrent states to restore");
  if (saved_length_ > length_)
    return Error("the recurrent states were saved at position {}, past the cache's {} positions", saved_length_,
                 length_);
  for (size_t l = 0; l < states_.size(); ++l) std::copy(saved_states_[l].begin(), saved_states_[l].end(), states_[l].begin());
  UndoExtend(saved_length_);
  saved_length_ = -1;
  return Status::Ok();
}

void SequenceCache::AdoptPrefix(std::span<const int32_t> blocks, int64_t length, int64_t layers) {
  M2_CHECK(blocks_.empty() && length_ == 0, "AdoptPrefix on a cache of {} positions", length_);
  M2_CHECK(length >= 0 && length <= static_cast<int64_t>(blocks.size()) * pool_->block_tokens(),
           "{} positions in {} blocks", length, blocks.size());
  blocks_.assign(blocks.begin(), blocks.end());
  length_ = length;
  for (int64_t l = 0; l < layers && l < static_cast<int64_t>(filled_.size()); ++l) filled_[static_cast<size_t>(l)] = length;
}

void SequenceCache::set_filled(int64_t layer, int64_t n) {
  M2_CHECK(layer >= 0 && static_cast<size_t>(layer) < filled_.size(), "layer {} of {}", layer, filled_.size());
  M2_CHECK(n >= 0 && n <= length_, "filled {} outside a cache of {}", n, length_);
  filled_[static_cast<size_t>(layer)] = n;
}

Status SequenceCache::Unshare(int64_t from, int64_t to) {
  M2_CHECK(from >= 0 && from <= to && to <= length_, "unshare [{}, {}) of a cache of {}", from, to, length_);
  if (from == to) return Status::Ok();
  const int64_t bt = pool_->block_tokens();
  for (int64_t b = from / bt; b <= (to - 1) / bt; ++b) {
    if (!MustCopy(static_cast<size_t>(b))) continue;
    int32_t& block = blocks_[static_cast<size_t>(b)];
    M2_ASSIGN_OR_RETURN(int32_t copy, pool_->Allocate());
    pool_->CopyBlock(block, copy);
    pool_->Release(block);
    block = copy;
  }
  return Status::Ok();
}

void SequenceCache::CopyStatesTo(std::vector<float>* out) const {
  out->clear();
  out->reserve(static_cast<size_t>(pool_->checkpoint_floats()));
  for (const auto& st : states_) out->insert(out->end(), st.begin(), st.end());
}

void SequenceCache::LoadStates(std::span<const float> states) {
  M2_CHECK(static_cast<int64_t>(states.size()) == pool_->checkpoint_floats(), "{} state floats, expected {}",
           states.size(), pool_->checkpoint_floats());
  size_t at = 0;
  for (auto& st : states_) {
    std::copy(states.begin() + static_cast<std::ptrdiff_t>(at), states.begin() + static_cast<std::ptrdiff_t>(at + st.size()),
              st.begin());
    at += st.size();
  }
}

SequenceCache SequenceCache::Fork() const {
  SequenceCache c(pool_);
  c.blocks_ = blocks_;
  for (int32_t b : blocks_) pool_->Retain(b);
  c.length_ = length_;
  c.states_ = states_;
  c.filled_ = filled_;
  return c;
}

void* SequenceCache::KRaw(int64_t layer, int64_t pos, int64_t head) {
  M2_CHECK(pos >= 0 && pos < length_, "position {} outside cache of {}", pos, length_);
  const int64_t bt = pool_->block_tokens();
  const auto& spec = pool_->layout().layers[static_cast<size_t>(layer)];
  M2_CHECK(head >= 0 && head < spec.kv_heads, "KV head {} outside [0, {})", head, spec.kv_heads);
  return static_cast<char*>(pool_->KData(blocks_[static_cast<size_t>(pos / bt)], layer, head)) +
         pos % bt * KvRowBytes(pool_->dtype(), spec.head_dim);
}

void* SequenceCache::VRaw(int64_t layer, int64_t pos, int64_t head) {
  const char* k = static_cast<const char*>(KRaw(layer, pos, head));  // checks pos and head
  return static_cast<char*>(pool_->VBase(layer)) + (k - static_cast<const char*>(pool_->KBase(layer)));
}

float* SequenceCache::K(int64_t layer, int64_t pos, int64_t head) {
  M2_CHECK(pool_->dtype() == KvDtype::kF32, "fp32 access to a {} KV cache", KvDtypeName(pool_->dtype()));
  return static_cast<float*>(KRaw(layer, pos, head));
}

float* SequenceCache::V(int64_t layer, int64_t pos, int64_t head) {
  M2_CHECK(pool_->dtype() == KvDtype::kF32, "fp32 access to a {} KV cache", KvDtypeName(pool_->dtype()));
  return static_cast<float*>(VRaw(layer, pos, head));
}

}  // namespace m2
