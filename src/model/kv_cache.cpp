#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace m2 {

KvBlockPool::KvBlockPool(CacheLayout layout, int64_t max_blocks) : layout_(std::move(layout)), max_blocks_(max_blocks) {
  M2_CHECK(layout_.block_tokens > 0);
  for (const auto& l : layout_.layers) {
    layer_offset_.push_back(block_floats_);
    const int64_t half = l.kind == LayerCacheKind::kKeyValue ? layout_.block_tokens * l.kv_heads * l.head_dim : 0;
    layer_half_.push_back(half);
    block_floats_ += 2 * half;
  }
}

Result<int32_t> KvBlockPool::Allocate() {
  if (!free_.empty()) {
    const int32_t b = free_.back();
    free_.pop_back();
    refs_[b] = 1;
    return b;
  }
  if (max_blocks_ > 0 && static_cast<int64_t>(blocks_.size()) >= max_blocks_)
    return Error("the KV cache is full: all {} blocks of {} tokens are in use", max_blocks_, layout_.block_tokens);
  blocks_.emplace_back(new float[static_cast<size_t>(std::max<int64_t>(block_floats_, 1))]());
  refs_.push_back(1);
  return static_cast<int32_t>(blocks_.size() - 1);
}

void KvBlockPool::Retain(int32_t block) {
  M2_CHECK(refs_[block] > 0, "retain of free block {}", block);
  ++refs_[block];
}

void KvBlockPool::Release(int32_t block) {
  M2_CHECK(refs_[block] > 0, "release of free block {}", block);
  if (--refs_[block] == 0) free_.push_back(block);
}

void KvBlockPool::CopyBlock(int32_t from, int32_t to) {
  std::memcpy(blocks_[to].get(), blocks_[from].get(), static_cast<size_t>(block_floats_) * sizeof(float));
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
      filled_(std::move(o.filled_)) {
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
    filled_ = std::move(o.filled_);
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

Status SequenceCache::Extend(int64_t new_length) {
  M2_CHECK(new_length >= length_, "Extend to {} below length {}", new_length, length_);
  const int64_t bt = pool_->block_tokens();
  // The partially filled last block will be written: un-share it first.
  if (length_ % bt != 0 && new_length > length_) {
    int32_t& last = blocks_.back();
    if (pool_->RefCount(last) > 1) {
      M2_ASSIGN_OR_RETURN(int32_t copy, pool_->Allocate());
      pool_->CopyBlock(last, copy);
      pool_->Release(last);
      last = copy;
    }
  }
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
  const int64_t bt = pool_->block_tokens();
  const size_t keep = static_cast<size_t>((new_length + bt - 1) / bt);
  while (blocks_.size() > keep) {
    pool_->Release(blocks_.back());
    blocks_.pop_back();
  }
  length_ = new_length;
  for (int64_t& f : filled_) f = std::min(f, new_length);
  return Status::Ok();
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
    int32_t& block = blocks_[static_cast<size_t>(b)];
    if (pool_->RefCount(block) == 1) continue;
    M2_ASSIGN_OR_RETURN(int32_t copy, pool_->Allocate());
    pool_->CopyBlock(block, copy);
    pool_->Release(block);
    block = copy;
  }
  return Status::Ok();
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

float* SequenceCache::K(int64_t layer, int64_t pos, int64_t head) {
  M2_CHECK(pos >= 0 && pos < length_, "position {} outside cache of {}", pos, length_);
  const int64_t bt = pool_->block_tokens();
  const auto& spec = pool_->layout().layers[layer];
  M2_CHECK(head >= 0 && head < spec.kv_heads, "KV head {} outside [0, {})", head, spec.kv_heads);
  return pool_->K(blocks_[pos / bt], layer) + (head * bt + pos % bt) * spec.head_dim;
}

float* SequenceCache::V(int64_t layer, int64_t pos, int64_t head) {
  M2_CHECK(pos >= 0 && pos < length_, "position {} outside cache of {}", pos, length_);
  const int64_t bt = pool_->block_tokens();
  const auto& spec = pool_->layout().layers[layer];
  M2_CHECK(head >= 0 && head < spec.kv_heads, "KV head {} outside [0, {})", head, spec.kv_heads);
  return pool_->V(blocks_[pos / bt], layer) + (head * bt + pos % bt) * spec.head_dim;
}

}  // namespace m2
