#include "model/parallel.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "base/check.h"

namespace m2 {

namespace {

// [0, n) cut into `ranks` nearly equal ranges whose inner boundaries are multiples of `align`.
std::vector<int64_t> SplitAligned(int64_t n, int ranks, int64_t align) {
  std::vector<int64_t> first(static_cast<size_t>(ranks) + 1);
  for (int r = 0; r <= ranks; ++r) {
    const int64_t even = n * r / ranks;
    first[static_cast<size_t>(r)] = r == ranks ? n : std::min(n, (even + align / 2) / align * align);
  }
  return first;
}

// The largest FP8 block height among these weights (1 when none is FP8): split points of
// their rows must be multiples of it.
int64_t RowAlign(std::initializer_list<const LinearWeight*> ws) {
  int64_t a = 1;
  for (const LinearWeight* w : ws)
    if (w->valid() && w->format == WeightFormat::kFp8Block) a = std::max(a, w->block_rows);
  return a;
}

void ForEachLayer(ModelWeights& w, const std::function<void(LayerWeights&)>& fn) {
  for (auto& l : w.layers) fn(l);
  for (auto& m : w.mtp) fn(m.layer);
}

}  // namespace

std::string ShardPlan::Describe(int r) const {
  const auto u = static_cast<size_t>(r);
  const auto range = [](int64_t a, int64_t b) { return b > a ? fmt::format("{}-{}", a, b - 1) : std::string("none"); };
  return fmt::format("experts {}, query heads {}, KV heads {}, o_proj rows {}, vocabulary rows {}",
                     range(expert_first[u], expert_first[u + 1]), range(q_first[u], q_first[u + 1]),
                     range(kv_first[u], kv_first[u] + kv_count[u]), range(hidden_first[u], hidden_first[u + 1]),
                     range(vocab_first[u], vocab_first[u + 1]));
}

Result<ShardPlan> PlanShards(const ModelConfig& cfg, const ModelWeights& w, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) return Error("rank {} of {} ranks", rank, ranks);
  ShardPlan p;
  p.rank = rank;
  p.ranks = ranks;
  const int64_t H = cfg.num_attention_heads, KV = cfg.num_key_value_heads, D = cfg.head_dim, R = ranks;
  if (ranks > 1) {
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
      if (cfg.layer_type(l) == LayerType::kLightning)
        return Error("layer {} is a Lightning attention layer: splitting the Lightning hybrids over ranks is not "
                     "supported yet (run them in one process)",
                     l);
    if (H % R != 0)
      return Error("{} ranks cannot split the model's {} query heads evenly: use a number of ranks that divides {}",
                   R, H, H);
    if (KV % R != 0 && R % KV != 0)
      return Error("{} ranks cannot split the model's {} KV heads: the number of ranks must divide them or be a "
                   "multiple of them",
                   R, KV);
  }
  for (int64_t r = 0; r <= R; ++r) p.q_first.push_back(H * r / R);
  for (int64_t q : p.q_first) p.q_col_first.push_back(q * D);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t count = KV % R == 0 ? KV / R : 1;
    p.kv_first.push_back(KV % R == 0 ? r * count : r / (R / KV));
    p.kv_count.push_back(count);
  }
  // FP8 blocks of rows must not be cut by a head boundary.
  for (const auto& L : w.layers) {
    for (int64_t r = 0; r < R && ranks > 1; ++r) {
      const int64_t qa = RowAlign({&L.attn.q}), kva = RowAlign({&L.attn.k, &L.attn.v});
      if ((p.q_first[r] * D) % qa != 0 || (p.kv_first[r] * D) % kva != 0)
        return Error("{} ranks would cut the FP8 weight blocks of {} rows of the attention projections (heads of {} "
                     "values): use fewer ranks, or quantize the model (m2 quantize) first",
                     R, std::max(qa, kva), D);
    }
  }
  int64_t o_align = 1;
  for (const auto& L : w.layers) o_align = std::max(o_align, RowAlign({&L.attn.o}));
  for (const auto& m : w.mtp) o_align = std::max(o_align, RowAlign({&m.layer.attn.o}));
  p.hidden_first = SplitAligned(cfg.hidden_size, ranks, o_align);
  p.vocab_first = SplitAligned(cfg.vocab_size, ranks, RowAlign({&w.lm_head}));
  for (int64_t r = 0; r <= R; ++r) p.expert_first.push_back(cfg.num_local_experts * r / R);
  return p;
}

LinearWeight SliceRows(const LinearWeight& w, int64_t r0, int64_t r1) {
  M2_CHECK(0 <= r0 && r0 <= r1 && r1 <= w.rows, "rows [{}, {}) of {}", r0, r1, w.rows);
  LinearWeight s = w;
  s.rows = r1 - r0;
  if (s.rows == 0) {
    s.data = s.scale = nullptr;
    return s;
  }
  int64_t row_bytes = 0;
  switch (w.format) {
    case WeightFormat::kF32: row_bytes = 4 * w.cols; break;
    case WeightFormat::kBF16:
    case WeightFormat::kF16: row_bytes = 2 * w.cols; break;
    case WeightFormat::kFp8Block:
    case WeightFormat::kQ8: row_bytes = w.cols; break;
    case WeightFormat::kQ4: row_bytes = w.cols / 2; break;
  }
  s.data = static_cast<const char*>(w.data) + r0 * row_bytes;
  if (w.format == WeightFormat::kFp8Block) {
    M2_CHECK(r0 % w.block_rows == 0, "FP8 rows from {}: not on a block of {}", r0, w.block_rows);
    s.scale = static_cast<const float*>(w.scale) + (r0 / w.block_rows) * w.scale_cols();
  } else if (w.format == WeightFormat::kQ8 || w.format == WeightFormat::kQ4) {
    s.scale = static_cast<const uint16_t*>(w.scale) + r0 * w.scale_cols();
  }
  return s;
}

int64_t WeightBytesRead(const ModelWeights& cw) {
  auto& w = const_cast<ModelWeights&>(cw);
  int64_t bytes = 0;
  ForEachLinear(w, [&](LinearWeight& l) {
    if (&l != &w.embed && l.valid()) bytes += l.bytes();
  });
  return bytes;
}

int64_t ShardWeights(const ShardPlan& p, const ModelConfig& cfg, ModelWeights& w) {
  const auto r = static_cast<size_t>(p.rank);
  const int64_t D = cfg.head_dim;
  const int64_t q0 = p.q_first[r] * D, q1 = p.q_first[r + 1] * D;
  const int64_t k0 = p.kv_first[r] * D, k1 = (p.kv_first[r] + p.kv_count[r]) * D;
  const auto slice_vec = [](std::vector<float>& v, int64_t a, int64_t b) {
    if (!v.empty()) v = std::vector<float>(v.begin() + a, v.begin() + b);
  };
  ForEachLayer(w, [&](LayerWeights& L) {
    if (L.type != LayerType::kSoftmax) return;
    L.attn.q = SliceRows(L.attn.q, q0, q1);
    L.attn.k = SliceRows(L.attn.k, k0, k1);
    L.attn.v = SliceRows(L.attn.v, k0, k1);
    slice_vec(L.attn.q_norm, q0, q1);
    slice_vec(L.attn.k_norm, k0, k1);
    L.attn.o = SliceRows(L.attn.o, p.hidden_first[r], p.hidden_first[r + 1]);
    // Other ranks' experts: empty views, so nothing can read them by mistake.
    for (int64_t e = 0; e < static_cast<int64_t>(L.moe.experts.size()); ++e)
      if (e < p.expert_first[r] || e >= p.expert_first[r + 1]) L.moe.experts[static_cast<size_t>(e)] = {};
  });
  w.lm_head = SliceRows(w.lm_head, p.vocab_first[r], p.vocab_first[r + 1]);
  return WeightBytesRead(w);
}

void Parallel::GatherBytes(const void* local, const std::vector<int64_t>& bytes, void* out) {
  comm->AllGatherV(local, out, bytes);
}

void Parallel::GatherColumns(const float* local, int64_t n, const std::vector<int64_t>& first, float* out, int root) {
  const int R = plan.ranks;
  const int64_t total = first[static_cast<size_t>(R)];
  counts.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r)
    counts[static_cast<size_t>(r)] =
        n * (first[static_cast<size_t>(r) + 1] - first[static_cast<size_t>(r)]) * static_cast<int64_t>(sizeof(float));
  if (root >= 0 && root != plan.rank) {
    comm->GatherV(local, nullptr, counts, root);
    return;
  }
  recv.resize(static_cast<size_t>(n * total));
  if (root >= 0) comm->GatherV(local, recv.data(), counts, root);
  else comm->AllGatherV(local, recv.data(), counts);
  const float* src = recv.data();
  for (int r = 0; r < R; ++r) {
    const int64_t c0 = first[static_cast<size_t>(r)], cols = first[static_cast<size_t>(r) + 1] - c0;
    for (int64_t t = 0; t < n; ++t) std::memcpy(out + t * total + c0, src + t * cols, static_cast<size_t>(cols) * sizeof(float));
    src += n * cols;
  }
}

}  // namespace m2
