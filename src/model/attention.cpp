// Self-attention of MiniMax-M2 (transformers: MiniMaxM2Attention.forward):
//   q = q_norm(x Wq^T), k = k_norm(x Wk^T), v = x Wv^T   -- ONE RMSNorm over all heads
//   RoPE (NeoX) on channels [0, rotary_dim) of every q and k head
//   o_h = softmax(q_h K_g^T / sqrt(head_dim)) V_g, g = h / (heads / kv_heads), causal
//   out = concat_h(o_h) Wo^T
#include <cmath>
#include <fmt/format.h>

#include "kernels/dot.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/layers.h"

namespace m2 {

void AttentionForward(const ModelConfig& cfg, const AttentionWeights& w, int64_t layer, const float* inv_freq,
                      const float* x, const std::vector<TokenSlot>& slots, float* out, Scratch& s, Tracer* trace) {
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t H = cfg.num_attention_heads, KV = cfg.num_key_value_heads, D = cfg.head_dim;
  const int64_t qd = cfg.q_dim(), kvd = cfg.kv_dim(), group = cfg.kv_group();
  const auto name = [&](const char* stage) { return fmt::format("layers.{}.{}", layer, stage); };
  s.q.resize(static_cast<size_t>(n * qd));
  s.k.resize(static_cast<size_t>(n * kvd));
  s.v.resize(static_cast<size_t>(n * kvd));
  s.attn.resize(static_cast<size_t>(n * qd));

  Linear(w.q, x, n, s.q.data());  // [n, H*D]
  Linear(w.k, x, n, s.k.data());  // [n, KV*D]
  Linear(w.v, x, n, s.v.data());  // [n, KV*D]
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
  // Every token's K/V goes into the cache before any token attends.
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(&s.k[t * kvd], kvd, slots[t].cache->K(layer, slots[t].pos));
    std::copy_n(&s.v[t * kvd], kvd, slots[t].cache->V(layer, slots[t].pos));
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t t = 0; t < n; ++t) {
    SequenceCache& c = *slots[t].cache;
    const int64_t len = slots[t].pos + 1;  // causal: positions 0..pos
    s.scores.resize(static_cast<size_t>(group * len));
    // Scores for the `group` query heads sharing KV head g, one K load per position.
    for (int64_t g = 0; g < KV; ++g) {
      for (int64_t j = 0; j < len; ++j) {
        const float* kj = c.K(layer, j) + g * D;
        for (int64_t r = 0; r < group; ++r)
          s.scores[r * len + j] = detail::Dot(&s.q[t * qd + (g * group + r) * D], kj, D) * scale;
      }
      for (int64_t r = 0; r < group; ++r) Softmax(&s.scores[r * len], len);
      for (int64_t r = 0; r < group; ++r) {
        float* o = &s.attn[t * qd + (g * group + r) * D];
        std::fill_n(o, D, 0.0f);
        for (int64_t j = 0; j < len; ++j) {
          const float p = s.scores[r * len + j];
          const float* vj = c.V(layer, j) + g * D;
          for (int64_t d = 0; d < D; ++d) o[d] += p * vj[d];
        }
      }
    }
  }
  if (trace) trace->Record(name("attn_heads"), s.attn.data(), {n, H, D});
  Linear(w.o, s.attn.data(), n, out);  // [n, hidden]
}

}  // namespace m2
