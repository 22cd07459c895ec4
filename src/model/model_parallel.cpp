// The part of Model that keeps the ranks of a split model in step (parallel.h): rank 0
// announces each forward pass, the others follow.
//
// A message is one broadcast of its size, then one of its bytes:
// (every array starting at a multiple of 8 bytes, zero padding before it):
//   i32 kind, i32 module (kMtp), i64 n,
//   n x i32 token, n x i64 position, n x i32 sequence, n x u8 want_logits,
//   i64 sequences, per sequence: u64 pool id, i64 block_tokens, i32 kv dtype, i32 layers,
//     i64 max_blocks, i64 table length, that many i32 block ids,
//   i64 copies, per copy: u64 pool id, i32 from, i32 to,   (copy-on-write since the last pass)
//   i64 retired pools, that many u64 ids,
//   i64 floats of hidden input (kMtp: n x hidden), the floats.
// Ranks > 0 keep a pool per pool id of rank 0 with their own KV heads, and address its
// blocks by rank 0's ids: they never allocate, so they cannot disagree.
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "base/check.h"
#include "model/model.h"

namespace m2 {

namespace {

struct Writer {
  std::vector<char>& buf;
  template <class T>
  void Put(T v) {
    const size_t at = buf.size();
    buf.resize(at + sizeof(T));
    std::memcpy(buf.data() + at, &v, sizeof(T));
  }
  // Arrays start at a multiple of 8 bytes (the receiver reads them in place).
  void Align() { buf.resize((buf.size() + 7) / 8 * 8); }
  template <class T>
  void Put(std::span<const T> v) {
    Align();
    const size_t at = buf.size();
    buf.resize(at + v.size_bytes());
    if (!v.empty()) std::memcpy(buf.data() + at, v.data(), v.size_bytes());
  }
};

struct Reader {
  const std::vector<char>& buf;
  size_t at = 0;
  template <class T>
  T Get() {
    M2_CHECK(at + sizeof(T) <= buf.size(), "message from rank 0 ends early ({} bytes)", buf.size());
    T v;
    std::memcpy(&v, buf.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  template <class T>
  const T* Array(int64_t n) {
    at = (at + 7) / 8 * 8;
    M2_CHECK(n >= 0 && at + static_cast<size_t>(n) * sizeof(T) <= buf.size(), "message from rank 0 ends early");
    const T* p = reinterpret_cast<const T*>(buf.data() + at);
    at += static_cast<size_t>(n) * sizeof(T);
    return p;
  }
};

int64_t ResidentBytes() {
  std::ifstream f("/proc/self/statm");
  int64_t total = 0, resident = 0;
  f >> total >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

void Model::Announce(int32_t kind, int32_t module, std::span<const int32_t> tokens,
                     std::span<const uint8_t> want_logits, std::span<SequenceCache* const> caches,
                     std::span<const float> hidden_in) {
  message_.clear();
  Writer w{message_};
  const auto n = static_cast<int64_t>(tokens.size());
  w.Put(kind);
  w.Put(module);
  w.Put(n);
  w.Put(tokens);
  w.Align();
  for (const TokenSlot& s : slots_) w.Put<int64_t>(s.pos);
  w.Align();
  for (const TokenSlot& s : slots_) w.Put<int32_t>(s.seq);
  w.Put(want_logits);
  w.Put<int64_t>(static_cast<int64_t>(caches.size()));
  for (SequenceCache* c : caches) {
    KvBlockPool* pool = c->pool();
    if (!pool->mirrored()) pool->set_mirror(mirror_);
    w.Put<uint64_t>(pool->id());
    w.Put<int64_t>(pool->block_tokens());
    w.Put<int32_t>(static_cast<int32_t>(pool->dtype()));
    w.Put<int32_t>(static_cast<int32_t>(pool->layout().layers.size()));
    w.Put<int64_t>(pool->max_blocks());
    w.Put<int64_t>(static_cast<int64_t>(c->block_table().size()));
    w.Put(std::span<const int32_t>(c->block_table()));
  }
  {
    std::lock_guard<std::mutex> lock(mirror_->mu);
    w.Put<int64_t>(static_cast<int64_t>(mirror_->copies.size()));
    for (const auto& cp : mirror_->copies) {
      w.Put(cp.pool);
      w.Put(cp.from);
      w.Put(cp.to);
    }
    w.Put<int64_t>(static_cast<int64_t>(mirror_->retired.size()));
    for (uint64_t id : mirror_->retired) w.Put(id);
    mirror_->copies.clear();
    mirror_->retired.clear();
  }
  w.Put<int64_t>(static_cast<int64_t>(hidden_in.size()));
  w.Put(hidden_in);
  int64_t bytes = static_cast<int64_t>(message_.size());
  par_->comm->Broadcast(&bytes, sizeof bytes, 0);
  par_->comm->Broadcast(message_.data(), bytes, 0);
}

Status Model::Follow() {
  if (!par_ || par_->plan.rank == 0)
    return Error("Model::Follow is for ranks other than 0 of a model split over several ranks");
  Comm& comm = *par_->comm;
  std::vector<float> logits, hidden_out;
  std::vector<int32_t> want_hidden_none;
  for (;;) {
    const CommStats idle = comm.stats();  // before this message
    int64_t bytes = 0;
    comm.Broadcast(&bytes, sizeof bytes, 0);
    message_.resize(static_cast<size_t>(bytes));
    comm.Broadcast(message_.data(), bytes, 0);
    Reader r{message_};
    const auto kind = r.Get<int32_t>();
    const auto module = r.Get<int32_t>();
    if (kind == kShutdown) return Status::Ok();
    if (kind == kStats) {
      GatherRankStats(idle);
      continue;
    }
    M2_CHECK(kind == kTrunk || kind == kMtp, "rank {}: unknown message {} from rank 0", rank(), kind);
    const auto n = r.Get<int64_t>();
    const int32_t* tokens = r.Array<int32_t>(n);
    const int64_t* pos = r.Array<int64_t>(n);
    const int32_t* seq = r.Array<int32_t>(n);
    const uint8_t* want_logits = r.Array<uint8_t>(n);
    const auto seqs = r.Get<int64_t>();
    seq_views_.resize(static_cast<size_t>(seqs));
    struct Table {
      KvBlockPool* pool;
      const int32_t* blocks;
      int64_t len;
    };
    std::vector<Table> tables;
    for (int64_t i = 0; i < seqs; ++i) {
      const auto id = r.Get<uint64_t>();
      const auto block_tokens = r.Get<int64_t>();
      const auto dtype = static_cast<KvDtype>(r.Get<int32_t>());
      const auto layers = r.Get<int32_t>();
      const auto max_blocks = r.Get<int64_t>();
      const auto len = r.Get<int64_t>();
      const int32_t* blocks = r.Array<int32_t>(len);
      auto& pool = peer_pools_[id];
      if (!pool) {
        CacheLayout layout = cache_layout(block_tokens, layers > cfg_.num_hidden_layers, dtype);
        M2_CHECK(static_cast<int32_t>(layout.layers.size()) == layers,
                 "rank {}: rank 0's pool has {} layers, this model makes {}", rank(), layers, layout.layers.size());
        pool = std::make_unique<KvBlockPool>(std::move(layout), max_blocks);
      }
      tables.push_back({pool.get(), blocks, len});
    }
    const auto copies = r.Get<int64_t>();
    for (int64_t i = 0; i < copies; ++i) {
      const auto id = r.Get<uint64_t>();
      const auto from = r.Get<int32_t>(), to = r.Get<int32_t>();
      auto it = peer_pools_.find(id);
      if (it == peer_pools_.end()) continue;  // a pool this rank never ran: nothing in it yet
      M2_CHECK(it->second->Reserve(std::max(from, to) + 1).ok(), "rank {}: block {} out of range", rank(), to);
      it->second->CopyBlock(from, to);
    }
    const auto retired = r.Get<int64_t>();
    for (int64_t i = 0; i < retired; ++i) peer_pools_.erase(r.Get<uint64_t>());
    const auto hidden_floats = r.Get<int64_t>();
    const float* hidden_in = r.Array<float>(hidden_floats);
    for (int64_t i = 0; i < seqs; ++i) {
      const Table& t = tables[static_cast<size_t>(i)];
      int32_t top = -1;
      for (int64_t b = 0; b < t.len; ++b) top = std::max(top, t.blocks[b]);
      if (const Status st = t.pool->Reserve(top + 1); !st.ok())
        M2_CHECK(false, "rank {}: {}", rank(), st.message());
      seq_views_[static_cast<size_t>(i)] = {t.pool, t.blocks};
    }
    slots_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) slots_[static_cast<size_t>(i)] = {nullptr, pos[i], seq[i]};
    logits.clear();
    hidden_out.clear();
    if (kind == kTrunk) RunTrunk(tokens, want_logits, nullptr, n, logits, nullptr, nullptr);
    else RunMtp(module, tokens, hidden_in, want_logits, n, logits, hidden_out, nullptr);
  }
}

std::vector<RankStats> Model::GatherRankStats() {
  return GatherRankStats(par_ ? par_->comm->stats() : CommStats{});
}

std::vector<RankStats> Model::GatherRankStats(const CommStats& before_request) {
  RankStats mine;
  mine.weight_bytes = weight_bytes_;
  mine.resident_bytes = ResidentBytes();
  mine.forwards = forwards_;
  mine.forward_seconds = forward_seconds_;
  mine.forward_comm_seconds = forward_comm_seconds_;
  if (!par_) {
    mine.comm = {};
    return {mine};
  }
  if (par_->plan.rank == 0) {
    int64_t bytes = 8;
    int32_t ask[2] = {kStats, 0};
    par_->comm->Broadcast(&bytes, sizeof bytes, 0);
    par_->comm->Broadcast(ask, bytes, 0);
  }
  mine.comm = before_request;
  std::vector<RankStats> all(static_cast<size_t>(par_->plan.ranks));
  par_->comm->AllGatherFixed(&mine, sizeof mine, all.data());
  return all;
}

}  // namespace m2
