// Self-attention of MiniMax-M2 (transformers: MiniMaxM2Attention.forward):
//   q = q_norm(x Wq^T), k = k_norm(x Wk^T), v = x Wv^T   -- ONE RMSNorm over all heads
//   RoPE (NeoX) on channels [0, rotary_dim) of every q and k head
//   o_h = softmax(q_h K_g^T / sqrt(head_dim)) V_g, g = h / (heads / kv_heads), causal
//   out = concat_h(o_h) Wo^T
#include <cmath>
#include <fmt/format.h>

#include "base/thread_pool.h"
#include "kernels/attention.h"
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
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < KV; ++g) {
      std::copy_n(&s.k[t * kvd + g * D], D, slots[t].cache->K(layer, slots[t].pos, g));
      std::copy_n(&s.v[t * kvd + g * D], D, slots[t].cache->V(layer, slots[t].pos, g));
    }

  // Block pointers of every sequence in the batch, for this layer.
  s.seq_caches.clear();
  s.seq_first_block.clear();
  s.k_blocks.clear();
  s.v_blocks.clear();
  s.token_seq.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    SequenceCache* c = slots[t].cache;
    size_t idx = 0;
    while (idx < s.seq_caches.size() && s.seq_caches[idx] != c) ++idx;
    if (idx == s.seq_caches.size()) {
      s.seq_caches.push_back(c);
      s.seq_first_block.push_back(static_cast<int64_t>(s.k_blocks.size()));
      for (size_t b = 0; b < c->block_table().size(); ++b) {
        s.k_blocks.push_back(c->KBlock(layer, b));
        s.v_blocks.push_back(c->VBlock(layer, b));
      }
    }
    s.token_seq[t] = static_cast<int32_t>(idx);
  }

  // One work item per (token, KV head): the `group` query heads sharing that KV head.
  // Items go to the threads in contiguous ranges; in a prefill a token's work grows with
  // its position, so the tokens are visited in the order 0, n-1, 1, n-2, ... which gives
  // every range about the same amount of work.
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  ThreadPool::Global().ParallelFor(n * KV, 1, [&](int64_t i0, int64_t i1, int) {
    thread_local std::vector<float> scores;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t u = i / KV, g = i % KV;
      const int64_t t = u % 2 == 0 ? u / 2 : n - 1 - u / 2;
      const int64_t first = s.seq_first_block[s.token_seq[t]];
      KvHeadView kv;
      kv.k_blocks = &s.k_blocks[first];
      kv.v_blocks = &s.v_blocks[first];
      kv.block_tokens = slots[t].cache->block_tokens();
      kv.head_offset = g * kv.block_tokens * D;  // head-major blocks (kv_cache.h)
      kv.row_stride = D;
      kv.length = slots[t].pos + 1;  // causal: positions 0..pos of its own sequence
      if (scores.size() < static_cast<size_t>(group * kv.length)) scores.resize(static_cast<size_t>(group * kv.length));
      AttendGroup(&s.q[t * qd + g * group * D], group, D, kv, scale, scores.data(), &s.attn[t * qd + g * group * D]);
    }
  });
  if (trace) trace->Record(name("attn_heads"), s.attn.data(), {n, H, D});
  Linear(w.o, s.attn.data(), n, out);  // [n, hidden]
}

}  // namespace m2
