// Lightning attention of the MiniMax-Text-01 / M1 hybrids (transformers:
// MiniMaxLightningAttention.forward; MODEL_SPEC.md section 2):
//   qkv = silu(x Wqkv^T)                   per head h: [q_h | k_h | v_h], head_dim each
//   o_h = linear attention with decay exp(-slope_h) over the sequence, from its state
//   out = (rmsnorm(concat_h o_h, norm) * sigmoid(x Wgate^T)) Wout^T
// The per-head recurrence lives in kernels/lightning.h: blocked for runs of several
// tokens of one sequence (prefill), token by token for short runs (decode).
#include <algorithm>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "kernels/lightning.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/layers.h"

namespace m2 {

namespace {
// Runs of at most this many tokens of one sequence use the recurrence (one pass over the
// state per token); longer ones the blocked form (matrix products).
constexpr int64_t kRecurrentMaxRun = 4;
}  // namespace

void LightningForward(const ModelConfig& cfg, const LightningWeights& w, int64_t layer, const float* x,
                      const std::vector<TokenSlot>& slots, float* out, Scratch& s, ThreadPool& pool, Tracer* trace) {
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t H = cfg.num_attention_heads, D = cfg.head_dim, hd = H * D, row = 3 * hd;
  const auto name = [&](const char* stage) { return fmt::format("layers.{}.{}", layer, stage); };
  s.qkv.resize(static_cast<size_t>(n * row));
  s.attn.resize(static_cast<size_t>(n * hd));
  s.gate.resize(static_cast<size_t>(n * hd));

  LinearOnPool(w.qkv, x, n, s.qkv.data(), pool);  // [n, H*3*D]
  Silu(s.qkv.data(), n * row);
  if (trace) trace->Record(name("qkv"), s.qkv.data(), {n, H, 3 * D});

  // Group the rows by sequence (a sequence's rows are its consecutive positions in batch
  // order, possibly interleaved with other sequences' rows), keeping batch order within.
  int32_t seqs = 0;
  for (int64_t i = 0; i < n; ++i) seqs = std::max(seqs, slots[i].seq + 1);
  GroupByKey(0, n, seqs, [&](int64_t i) { return slots[i].seq; }, s.seq_start, s.seq_next, s.run_rows);
  s.run_start.clear();
  s.run_seq.clear();
  for (int32_t q = 0; q < seqs; ++q)
    if (s.seq_start[q + 1] > s.seq_start[q]) {
      s.run_start.push_back(s.seq_start[q]);
      s.run_seq.push_back(s.run_rows[static_cast<size_t>(s.seq_start[q])]);  // a row of the run, for its cache
    }
  const auto runs = static_cast<int64_t>(s.run_start.size());
  s.run_start.push_back(n);
  // Usually each sequence's rows are together already (the engine builds its batches so):
  // then the kernels read qkv and write the output in place, without the grouped copies
  // (for Text-01 they would take 96 + 32 KiB more per token).
  bool grouped = true;
  for (int64_t i = 0; i < n && grouped; ++i) grouped = s.run_rows[i] == i;
  const float* qkv = s.qkv.data();
  float* heads_out = s.attn.data();
  if (!grouped) {
    s.qkv_grouped.resize(static_cast<size_t>(n * row));
    s.lightning_out.resize(static_cast<size_t>(n * hd));
    for (int64_t i = 0; i < n; ++i) std::copy_n(&s.qkv[s.run_rows[i] * row], row, &s.qkv_grouped[i * row]);
    qkv = s.qkv_grouped.data();
    heads_out = s.lightning_out.data();
  }

  s.slopes.resize(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) s.slopes[h] = cfg.lightning_slope(layer, h);
  // Scratch per thread slot, sized here on the calling thread (a warm step allocates nothing).
  const auto scratch_floats = static_cast<size_t>(LightningScratchFloats(D, cfg.lightning_block));
  if (s.lightning_threads.size() < static_cast<size_t>(pool.size()))
    s.lightning_threads.resize(static_cast<size_t>(pool.size()));
  for (auto& t : s.lightning_threads)
    if (t.size() < scratch_floats) t.resize(scratch_floats);

  // One work item per (run, head): heads of one sequence are independent.
  pool.ParallelFor(runs * H, 1, [&](int64_t i0, int64_t i1, int th) {
    float* scratch = s.lightning_threads[static_cast<size_t>(th)].data();
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i / H, h = i % H;
      const int64_t first = s.run_start[r], len = s.run_start[r + 1] - first;
      float* state = slots[s.run_seq[r]].cache->State(layer) + h * D * D;
      const float* q = qkv + first * row + h * 3 * D;
      float* o = heads_out + first * hd + h * D;
      if (len <= kRecurrentMaxRun)
        LightningRecurrent(q, q + D, q + 2 * D, row, len, D, s.slopes[h], state, o, hd);
      else
        LightningBlocked(q, q + D, q + 2 * D, row, len, D, s.slopes[h], cfg.lightning_block, state, o, hd, scratch);
    }
  });
  if (!grouped)
    for (int64_t i = 0; i < n; ++i) std::copy_n(&s.lightning_out[i * hd], hd, &s.attn[s.run_rows[i] * hd]);
  if (trace) trace->Record(name("attn_heads"), s.attn.data(), {n, H, D});

  for (int64_t t = 0; t < n; ++t)
    RmsNorm(&s.attn[t * hd], w.norm.data(), hd, cfg.lightning_norm_eps, &s.attn[t * hd]);
  LinearOnPool(w.gate, x, n, s.gate.data(), pool);  // [n, H*D]
  SigmoidMul(s.attn.data(), s.gate.data(), n * hd);
  if (trace) trace->Record(name("gated"), s.attn.data(), {n, hd});
  LinearOnPool(w.out, s.attn.data(), n, out, pool);  // [n, hidden]
}

}  // namespace m2
