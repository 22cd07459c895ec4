// Self-attention of MiniMax-M2 (transformers: MiniMaxM2Attention.forward):
//   q = q_norm(x Wq^T), k = k_norm(x Wk^T), v = x Wv^T   -- ONE RMSNorm over all heads
//   RoPE (NeoX) on channels [0, rotary_dim) of every q and k head
//   o_h = softmax(q_h K_g^T / sqrt(head_dim)) V_g, g = h / (heads / kv_heads), causal
//   out = concat_h(o_h) Wo^T
#include <algorithm>
#include <cmath>
#include <vector>
#include <fmt/format.h>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/layers.h"

namespace m2 {

void AttentionForward(const ModelConfig& cfg, const AttentionWeights& w, int64_t layer, const float* inv_freq,
                      const float* x, const std::vector<TokenSlot>& slots, const std::vector<SeqView>& seqs, float* out,
                      Scratch& s, ThreadPool& pool, Parallel* par, Tracer* trace) {
  const int64_t n = static_cast<int64_t>(slots.size());
  // This rank's heads (all of them in one process).
  const int64_t H = par ? par->plan.q_heads() : cfg.num_attention_heads;
  const int64_t KV = par ? par->plan.kv_heads() : cfg.num_key_value_heads;
  const int64_t D = cfg.head_dim;
  const int64_t qd = H * D, kvd = KV * D, group = H / KV;
  const auto name = [&](const char* stage) { return fmt::format("layers.{}.{}", layer, stage); };
  s.q.resize(static_cast<size_t>(n * qd));
  s.k.resize(static_cast<size_t>(n * kvd));
  s.v.resize(static_cast<size_t>(n * kvd));
  s.attn.resize(static_cast<size_t>(n * qd));

  // q [n, H*D], k and v [n, KV*D]: in decode steps one pool job over the three (linear.h).
  const LinearWeight* qkv[] = {&w.q, &w.k, &w.v};
  float* const qkv_out[] = {s.q.data(), s.k.data(), s.v.data()};
  LinearGroupOnPool(qkv, qkv_out, 3, x, n, pool);
  if (!w.q_norm.empty()) {
    // One RMSNorm over all heads of q (and of k): the statistic is the sum, in head order,
    // of each head's sum of squares, so that it is the same whether the heads are here or
    // spread over ranks.
    const int64_t per_token = H + KV;
    s.head_ss.resize(static_cast<size_t>(n * per_token));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < H; ++h) s.head_ss[t * per_token + h] = SumSquares(&s.q[t * qd + h * D], D);
      for (int64_t g = 0; g < KV; ++g) s.head_ss[t * per_token + H + g] = SumSquares(&s.k[t * kvd + g * D], D);
    }
    const double* ss = s.head_ss.data();
    const ShardPlan* plan = par ? &par->plan : nullptr;
    if (par) {
      s.pair_bytes.resize(static_cast<size_t>(plan->ranks));
      int64_t total = 0;
      for (int r = 0; r < plan->ranks; ++r) {
        const int64_t c = plan->q_first[r + 1] - plan->q_first[r] + plan->kv_count[r];
        s.pair_bytes[static_cast<size_t>(r)] = n * c * static_cast<int64_t>(sizeof(double));
        total += n * c;
      }
      s.head_ss_all.resize(static_cast<size_t>(total));
      par->GatherBytes(s.head_ss.data(), s.pair_bytes, s.head_ss_all.data());
    }
    for (int64_t t = 0; t < n; ++t) {
      double q_ss = 0, k_ss = 0;
      if (!par) {
        for (int64_t h = 0; h < H; ++h) q_ss += ss[t * per_token + h];
        for (int64_t g = 0; g < KV; ++g) k_ss += ss[t * per_token + H + g];
      } else {
        // Rank r's block: [n][its query heads, its KV heads]. Query heads are in rank
        // order; a KV head held by several ranks counts once (from the first).
        const double* block = s.head_ss_all.data();
        int64_t kv_done = 0;
        for (int r = 0; r < plan->ranks; ++r) {
          const int64_t hq = plan->q_first[r + 1] - plan->q_first[r], hk = plan->kv_count[r];
          const double* row = block + t * (hq + hk);
          for (int64_t h = 0; h < hq; ++h) q_ss += row[h];
          for (int64_t g = 0; g < hk; ++g)
            if (plan->kv_first[r] + g >= kv_done) k_ss += row[hq + g];
          kv_done = std::max(kv_done, plan->kv_first[r] + hk);
          block += n * (hq + hk);
        }
      }
      RmsScale(&s.q[t * qd], w.q_norm.data(), qd, q_ss, cfg.q_dim(), cfg.rms_norm_eps, &s.q[t * qd]);
      RmsScale(&s.k[t * kvd], w.k_norm.data(), kvd, k_ss, cfg.kv_dim(), cfg.rms_norm_eps, &s.k[t * kvd]);
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
    const SeqView& sv = seqs[static_cast<size_t>(slots[t].seq)];
    const KvDtype dt = sv.pool->dtype();
    for (int64_t g = 0; g < KV; ++g) {
      StoreKv(&s.k[t * kvd + g * D], D, dt, sv.KAt(layer, slots[t].pos, g));
      StoreKv(&s.v[t * kvd + g * D], D, dt, sv.VAt(layer, slots[t].pos, g));
    }
  }

  // Query tiles: runs of up to kQueryTile tokens of one sequence at consecutive positions
  // (a prefill's tokens), attended together (AttendQueries): each K and V row is read
  // once per tile, not once per token, and every token gets the bits it gets alone. A tile
  // of nq tokens whose last is at position pos needs nq * group * (pos + 1) floats of scores.
  constexpr int64_t kQueryTile = 4;
  s.attn_tiles.clear();
  int64_t scratch_floats = 0;
  for (int64_t t = 0; t < n;) {
    int64_t e = t + 1;
    while (e < n && e - t < kQueryTile && slots[e].seq == slots[t].seq && slots[e].pos == slots[e - 1].pos + 1) ++e;
    s.attn_tiles.push_back(t);
    scratch_floats = std::max<int64_t>(scratch_floats, (e - t) * group * (slots[e - 1].pos + 1));
    t = e;
  }
  s.attn_tiles.push_back(n);
  const int64_t tiles = static_cast<int64_t>(s.attn_tiles.size()) - 1;
  // One work item per (tile, KV head): the `group` query heads sharing that KV head.
  // Items go to the threads in contiguous chunks (thread_pool.h), head by head: all the
  // tiles of KV head 0, then of head 1, ... so a thread's consecutive items read the same
  // head's K and V rows, which stay in the caches from one tile to the next (tile by tile,
  // each item read a different head's rows, from memory once the context outgrew the
  // caches). Within a head, a tile's work grows with its position in a prefill, so the
  // tiles are visited in the order 0, last, 1, last - 1, ... which gives every chunk about
  // the same amount of work.
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Scores scratch per thread slot, sized here on the calling thread: chunks go to
  // whichever thread is free (thread_pool.h), so a slot may meet its longest row in any
  // step, and a warm step must not allocate.
  if (s.attn_scores.size() < static_cast<size_t>(pool.size())) s.attn_scores.resize(static_cast<size_t>(pool.size()));
  for (auto& sc : s.attn_scores)
    if (sc.size() < static_cast<size_t>(scratch_floats)) sc.resize(static_cast<size_t>(scratch_floats));
  pool.ParallelFor(tiles * KV, 1, [&](int64_t i0, int64_t i1, int th) {
    std::vector<float>& scores = s.attn_scores[static_cast<size_t>(th)];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / tiles, u = i % tiles;
      const int64_t tile = u % 2 == 0 ? u / 2 : tiles - 1 - u / 2;
      const int64_t t = s.attn_tiles[static_cast<size_t>(tile)], nq = s.attn_tiles[static_cast<size_t>(tile) + 1] - t;
      const SeqView& sv = seqs[static_cast<size_t>(slots[t].seq)];
      KvHeadView kv;
      kv.k_base = sv.pool->KBase(layer);
      kv.v_base = sv.pool->VBase(layer);
      kv.blocks = sv.blocks;
      kv.block_stride = sv.pool->block_stride(layer);
      kv.dtype = sv.pool->dtype();
      kv.block_tokens = sv.pool->block_tokens();
      kv.head_offset = g * sv.pool->head_stride(layer);  // a plane per head (kv_cache.h)
      kv.row_stride = KvRowElems(kv.dtype, D);
      kv.length = slots[t].pos + 1;  // causal: the tile's first token attends 0..pos, the next one more
      AttendQueries(&s.q[t * qd + g * group * D], qd, nq, group, D, kv, scale, scores.data(),
                    &s.attn[t * qd + g * group * D], qd, w.math);
    }
  });
  if (trace) trace->Record(name("attn_heads"), s.attn.data(), {n, H, D});
  if (!par) {
    LinearOnPool(w.o, s.attn.data(), n, out, pool);  // [n, hidden]
    return;
  }
  // Every rank's heads side by side, then this rank's rows of o_proj, gathered.
  s.attn_all.resize(static_cast<size_t>(n * cfg.q_dim()));
  par->GatherColumns(s.attn.data(), n, par->plan.q_col_first, s.attn_all.data());
  s.out_part.resize(static_cast<size_t>(n * w.o.rows));
  if (w.o.rows > 0) LinearOnPool(w.o, s.attn_all.data(), n, s.out_part.data(), pool);
  par->GatherColumns(s.out_part.data(), n, par->plan.hidden_first, out);
}

}  // namespace m2
