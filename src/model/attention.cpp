// Self-attention of MiniMax-M2 (transformers: MiniMaxM2Attention.forward):
//   q = q_norm(x Wq^T), k = k_norm(x Wk^T), v = x Wv^T   -- ONE RMSNorm over all heads
//   RoPE (NeoX) on channels [0, rotary_dim) of every q and k head
//   o_h = softmax(q_h K_g^T / sqrt(head_dim)) V_g, g = h / (heads / kv_heads), causal
//   out = concat_h(o_h) Wo^T
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/layers.h"

namespace m2 {

void AttentionForward(const ModelConfig& cfg, const AttentionWeights& w, int64_t layer, const float* inv_freq,
                      const float* x, const std::vector<TokenSlot>& slots, const std::vector<SeqView>& seqs, float* out,
                      Scratch& s, ThreadPool& pool, Tracer* trace) {
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t H = cfg.num_attention_heads, KV = cfg.num_key_value_heads, D = cfg.head_dim;
  const int64_t qd = cfg.q_dim(), kvd = cfg.kv_dim(), group = cfg.kv_group();
  const auto name = [&](const char* stage) { return fmt::format("layers.{}.{}", layer, stage); };
  s.q.resize(static_cast<size_t>(n * qd));
  s.k.resize(static_cast<size_t>(n * kvd));
  s.v.resize(static_cast<size_t>(n * kvd));
  s.attn.resize(static_cast<size_t>(n * qd));

  LinearOnPool(w.q, x, n, s.q.data(), pool);  // [n, H*D]
  LinearOnPool(w.k, x, n, s.k.data(), pool);  // [n, KV*D]
  LinearOnPool(w.v, x, n, s.v.data(), pool);  // [n, KV*D]
  if (!w.q_norm.empty()) {
    for (int64_t t = 0; t < n; ++t) {
      RmsNorm(&s.q[t * qd], w.q_norm.data(), qd, cfg.rms_norm_eps, &s.q[t * qd]);
      RmsNorm(&s.k[t * kvd], w.k_norm.data(), kvd, cfg.rms_norm_eps, &s.k[t * kvd]);
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < H; ++h) RopeNeox(&s.q[t * qd + h * D], cfg.rotary_dim, inv_freq, slots[t].pos);
    for (int64_t h = 0; h < KV; ++h) RopeNeox(&s.k[t * kvd + h * D], cfg.rotary_dim, inv_freq, slots[t].pos);
  }
  if (trace) {
    trace->Record(name("q"), s.q.data(), {n, H, D});
    trace->Record(name("k"), s.k.data(), {n, KV, D});
    trace->Record(name("v"), s.v.data(), {n, KV, D});
  }
  // Every token's K/V goes into the cache (in its storage dtype) before any token attends.
  for (int64_t t = 0; t < n; ++t) {
    const KvDtype dt = slots[t].cache->pool()->dtype();
    for (int64_t g = 0; g < KV; ++g) {
      StoreKv(&s.k[t * kvd + g * D], D, dt, slots[t].cache->KRaw(layer, slots[t].pos, g));
      StoreKv(&s.v[t * kvd + g * D], D, dt, slots[t].cache->VRaw(layer, slots[t].pos, g));
    }
  }

  // One work item per (token, KV head): the `group` query heads sharing that KV head.
  // Items go to the threads in contiguous chunks (thread_pool.h); in a prefill a token's
  // work grows with its position, so the tokens are visited in the order 0, n-1, 1, n-2,
  // ... which gives every chunk about the same amount of work.
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Scores scratch per thread slot, sized here on the calling thread: chunks go to
  // whichever thread is free (thread_pool.h), so a slot may meet its longest row in any
  // step, and a warm step must not allocate.
  int64_t longest = 0;
  for (int64_t t = 0; t < n; ++t) longest = std::max<int64_t>(longest, slots[t].pos + 1);
  if (s.attn_scores.size() < static_cast<size_t>(pool.size())) s.attn_scores.resize(static_cast<size_t>(pool.size()));
  for (auto& sc : s.attn_scores)
    if (sc.size() < static_cast<size_t>(group * longest)) sc.resize(static_cast<size_t>(group * longest));
  pool.ParallelFor(n * KV, 1, [&](int64_t i0, int64_t i1, int th) {
    std::vector<float>& scores = s.attn_scores[static_cast<size_t>(th)];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t u = i / KV, g = i % KV;
      const int64_t t = u % 2 == 0 ? u / 2 : n - 1 - u / 2;
      const SeqView& sv = seqs[static_cast<size_t>(slots[t].seq)];
      KvHeadView kv;
      kv.k_base = sv.pool->KBase(layer);
      kv.v_base = sv.pool->VBase(layer);
      kv.blocks = sv.blocks;
      kv.block_stride = sv.pool->block_stride(layer);
      kv.dtype = sv.pool->dtype();
      kv.block_tokens = sv.pool->block_tokens();
      kv.head_offset = g * kv.block_tokens * D;  // head-major blocks (kv_cache.h)
      kv.row_stride = D;
      kv.length = slots[t].pos + 1;  // causal: positions 0..pos of its own sequence
      AttendGroup(&s.q[t * qd + g * group * D], group, D, kv, scale, scores.data(), &s.attn[t * qd + g * group * D]);
    }
  });
  if (trace) trace->Record(name("attn_heads"), s.attn.data(), {n, H, D});
  LinearOnPool(w.o, s.attn.data(), n, out, pool);  // [n, hidden]
}

}  // namespace m2
