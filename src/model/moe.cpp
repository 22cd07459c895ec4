// Sparse MoE of MiniMax-M2 (transformers: MiniMaxM2TopKRouter + MiniMaxM2Experts):
//   s = sigmoid(x gate^T)                 fp32 [n, E]   (the hybrids, MixtralTopKRouter:
//                                                        softmax over E, no bias)
//   idx = top_k(s + e_score_correction_bias)   the bias only chooses experts
//   w = s[idx] / sum(s[idx])              weights are the unbiased scores, renormalised
//   out = sum_j w_j * W2_j(silu(W1_j x) * W3_j x)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <span>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/layers.h"

namespace m2 {

namespace {
std::atomic<bool> g_moe_rows_jobs{true};
}  // namespace
void SetMoeRowsJobsForTesting(bool on) { g_moe_rows_jobs.store(on, std::memory_order_relaxed); }

namespace {
// Expert e's (token, slot) pairs in the chunk: pair_flat[expert_start[e] .. expert_start[e + 1]).
std::span<const int32_t> ExpertPairs(const Scratch& s, int64_t e) {
  return std::span<const int32_t>(s.pair_flat.data() + s.expert_start[e],
                                  static_cast<size_t>(s.expert_start[e + 1] - s.expert_start[e]));
}

// Chunks of the one-pass MoE's two jobs: about this many bytes of weights each (an
// expert's matrix of M2 in q4 is 2.65 MB). Each chunk a thread takes starts a stream of
// its own, and starting one costs: `gemv_bench --moe q4` (256 experts, 2 threads) in the
// minutes the memory is fast read 73-75% of the read in chunks of 512 KiB against 79-81%
// for whole experts per thread, and 76-84% in chunks of 2 MiB.
constexpr int64_t kMoeRowChunkBytes = int64_t{2} << 20;

// A chunk of up to kMaxGemvTokens tokens on several threads (decode steps): the rows of
// every used expert's W1 and W3 as one pool job, then the rows of every W2 as a second,
// each in chunks of about kMoeRowChunkBytes taken from a counter. When threads took whole
// experts, one that finished first waited up to an expert for the other (a single-stream
// step of M2 runs 8 experts a layer: 2-7% of their time idle in a 2-thread decode); with
// few experts and many threads each matrix was a pool job of its own (3 waits per expert).
// The thread that finishes an expert's last W1 / W3 rows forms silu(gate) * up and
// prepares it for W2; the one that finishes its last W2 rows copies them out. The same bits
// as the other paths: every row of every product is computed whole by one kernel call
// (RowsInput).
void ExpertsByRows(const MoeWeights& w, const float* x, int64_t c0, int64_t c1, int64_t K, int64_t Hd, int64_t I,
                   Scratch& s, ThreadPool& pool) {
  const int64_t used = static_cast<int64_t>(s.used.size()), p0 = c0 * K, tokens = c1 - c0;
  const auto pairs_of = [&](int64_t i) { return ExpertPairs(s, s.used[static_cast<size_t>(i)]); };
  // Slots for as many experts as the chunk can use, each reserved for every token of it,
  // so a warm step of the same size allocates nothing whatever the routing.
  const int64_t slots = std::min<int64_t>(static_cast<int64_t>(w.experts.size()), tokens * K);
  if (static_cast<int64_t>(s.rows_in1.size()) < slots) {
    s.rows_in1.resize(static_cast<size_t>(slots));
    s.rows_in3.resize(static_cast<size_t>(slots));
    s.rows_in2.resize(static_cast<size_t>(slots));
  }
  if (s.rows_done_size < 2 * slots) {
    s.rows_done = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(2 * slots));
    s.rows_done_size = 2 * slots;
  }
  s.rows_first.resize(static_cast<size_t>(slots + 1));
  s.rows_gathered.resize(static_cast<size_t>(tokens * K * Hd));
  s.rows_gate.resize(static_cast<size_t>(tokens * K * I));
  s.rows_up.resize(static_cast<size_t>(tokens * K * I));
  s.rows_down.resize(static_cast<size_t>(tokens * K * Hd));

  // Each slot's first row in the flat buffers, its input for W1 (and W3), and the counts.
  const RowsInput* in1[kMaxGemvTokens * kMaxExpertsPerToken];
  const RowsInput* in3[kMaxGemvTokens * kMaxExpertsPerToken];
  int64_t first = 0;
  for (int64_t i = 0; i < used; ++i) {
    const ExpertWeights& ex = w.experts[s.used[static_cast<size_t>(i)]];
    const auto pairs = pairs_of(i);
    const auto m = static_cast<int64_t>(pairs.size());
    s.rows_first[static_cast<size_t>(i)] = first;
    auto& r1 = s.rows_in1[static_cast<size_t>(i)];
    auto& r3 = s.rows_in3[static_cast<size_t>(i)];
    r1.Reserve(ex.w1, tokens), r3.Reserve(ex.w3, tokens), s.rows_in2[static_cast<size_t>(i)].Reserve(ex.w2, tokens);
    if (tokens == 1 && i > 0 && s.rows_in1[0].Serves(ex.w1)) {
      in1[i] = &s.rows_in1[0];  // one token: every expert's input is that token, prepared once
    } else {
      const float* xi = x + c0 * Hd;
      if (tokens > 1) {
        float* g = &s.rows_gathered[static_cast<size_t>(first * Hd)];
        for (int64_t r = 0; r < m; ++r) std::copy_n(x + (pairs[r] / K) * Hd, Hd, g + r * Hd);
        xi = g;
      }
      r1.Prepare(ex.w1, xi, m);
      in1[i] = &r1;
    }
    if (in1[i]->Serves(ex.w3)) {
      in3[i] = in1[i];
    } else {
      r3.Prepare(ex.w3, tokens > 1 ? &s.rows_gathered[static_cast<size_t>(first * Hd)] : x + c0 * Hd, m);
      in3[i] = &r3;
    }
    s.rows_done[2 * i].store(0, std::memory_order_relaxed);
    s.rows_done[2 * i + 1].store(0, std::memory_order_relaxed);
    first += m;
  }
  s.rows_first[static_cast<size_t>(used)] = first;
  for (int64_t i = used; i < slots; ++i) {
    const ExpertWeights& ex = w.experts[s.used[0]];  // the experts share their shapes and formats
    s.rows_in1[static_cast<size_t>(i)].Reserve(ex.w1, tokens);
    s.rows_in3[static_cast<size_t>(i)].Reserve(ex.w3, tokens);
    s.rows_in2[static_cast<size_t>(i)].Reserve(ex.w2, tokens);
  }

  int64_t bytes13 = 0, bytes2 = 0;
  for (int64_t i = 0; i < used; ++i) {
    const ExpertWeights& ex = w.experts[s.used[static_cast<size_t>(i)]];
    bytes13 += ex.w1.bytes() + ex.w3.bytes(), bytes2 += ex.w2.bytes();
  }
  const int threads = pool.size();
  const auto order = DecodeChunksSpread() ? ThreadPool::Order::kSpread : ThreadPool::Order::kInOrder;
  // Job 1: rows [0, used * 2I): slot i's W1 rows at 2iI, its W3 rows at (2i + 1)I.
  pool.ParallelForChunks(used * 2 * I, 16, RowChunksPerThread(bytes13, threads, kMoeRowChunkBytes),
                         [&](int64_t b, int64_t e, int) {
    for (int64_t p = b; p < e;) {
      const int64_t k = p / I, r0 = p - k * I, r1 = std::min(I, r0 + (e - p)), i = k / 2;
      const ExpertWeights& ex = w.experts[s.used[static_cast<size_t>(i)]];
      const int64_t f = s.rows_first[static_cast<size_t>(i)], m = s.rows_first[static_cast<size_t>(i) + 1] - f;
      if (k % 2 == 0) in1[i]->Rows(ex.w1, &s.rows_gate[static_cast<size_t>(f * I)], r0, r1);
      else in3[i]->Rows(ex.w3, &s.rows_up[static_cast<size_t>(f * I)], r0, r1);
      if (s.rows_done[2 * i].fetch_add(r1 - r0, std::memory_order_acq_rel) + (r1 - r0) == 2 * I) {
        float* g = &s.rows_gate[static_cast<size_t>(f * I)];
        SiluMul(g, &s.rows_up[static_cast<size_t>(f * I)], m * I);
        s.rows_in2[static_cast<size_t>(i)].Prepare(ex.w2, g, m);
      }
      p += r1 - r0;
    }
  }, order);
  // Job 2: rows [0, used * Hd): slot i's W2 rows at i * Hd.
  pool.ParallelForChunks(used * Hd, 16, RowChunksPerThread(bytes2, threads, kMoeRowChunkBytes),
                         [&](int64_t b, int64_t e, int) {
    for (int64_t p = b; p < e;) {
      const int64_t i = p / Hd, r0 = p - i * Hd, r1 = std::min(Hd, r0 + (e - p));
      const ExpertWeights& ex = w.experts[s.used[static_cast<size_t>(i)]];
      const int64_t f = s.rows_first[static_cast<size_t>(i)];
      float* down = &s.rows_down[static_cast<size_t>(f * Hd)];
      s.rows_in2[static_cast<size_t>(i)].Rows(ex.w2, down, r0, r1);
      if (s.rows_done[2 * i + 1].fetch_add(r1 - r0, std::memory_order_acq_rel) + (r1 - r0) == Hd) {
        const auto pairs = pairs_of(i);
        for (size_t r = 0; r < pairs.size(); ++r)
          std::copy_n(down + static_cast<int64_t>(r) * Hd, Hd, &s.pair_out[static_cast<size_t>((pairs[r] - p0) * Hd)]);
      }
      p += r1 - r0;
    }
  }, order);
}
}  // namespace

void MoeForward(const ModelConfig& cfg, const MoeWeights& w, int64_t layer, const float* x, int64_t n, float* out,
                Scratch& s, ThreadPool& pool, Parallel* par, Tracer* trace) {
  const int64_t E = cfg.num_local_experts, K = cfg.num_experts_per_tok, Hd = cfg.hidden_size;
  const int64_t I = cfg.intermediate_size;
  s.router.resize(static_cast<size_t>(n * E));
  LinearOnPool(w.gate, x, n, s.router.data(), pool);  // router logits [n, E]
  if (trace) trace->Record(fmt::format("layers.{}.router_logits", layer), s.router.data(), {n, E});

  // Selection per token: chosen[t*K + j] = expert, weight[t*K + j] = its weight.
  auto& chosen = s.chosen;
  auto& weight = s.weight;
  auto& score = s.score;
  auto& biased = s.biased;
  auto& order = s.order;
  chosen.resize(static_cast<size_t>(n * K));
  weight.resize(static_cast<size_t>(n * K));
  score.resize(static_cast<size_t>(E));
  biased.resize(static_cast<size_t>(E));
  order.resize(static_cast<size_t>(E));
  const bool softmax = cfg.scoring_func == "softmax";
  for (int64_t t = 0; t < n; ++t) {
    if (softmax) {
      std::copy_n(&s.router[t * E], E, score.data());
      Softmax(score.data(), E);
    } else {
      for (int64_t e = 0; e < E; ++e) score[e] = 1.0f / (1.0f + std::exp(-s.router[t * E + e]));
    }
    for (int64_t e = 0; e < E; ++e) biased[e] = score[e] + (w.bias.empty() ? 0.0f : w.bias[e]);
    std::iota(order.begin(), order.end(), 0);
    // Highest biased score first; ties go to the lower expert index.
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) {
      return biased[a] != biased[b] ? biased[a] > biased[b] : a < b;
    });
    float sum = 0.0f;
    for (int64_t j = 0; j < K; ++j) sum += score[order[j]];
    for (int64_t j = 0; j < K; ++j) {
      chosen[t * K + j] = order[j];
      weight[t * K + j] = score[order[j]] / sum;
    }
  }

  const int threads = pool.size();
  if (s.expert_threads.size() < static_cast<size_t>(threads)) s.expert_threads.resize(static_cast<size_t>(threads));
  // The chunk's (token, slot) pairs grouped by expert, in one flat array (a counting sort:
  // no per-expert vectors that could grow, so a warm step allocates nothing whatever the
  // routing): expert e's pairs are pair_flat[expert_start[e] .. expert_start[e + 1]).
  const auto by_expert = [&](int64_t e) { return ExpertPairs(s, e); };

  // One expert on its (token, slot) pairs: gather, W1 and W3, silu * up, W2, and each
  // pair's output row into pair_out (relative to the chunk's first pair p0).
  const auto run_expert = [&](int64_t e, int64_t p0, Scratch::ExpertThread& es, bool split_rows) {
    const auto pairs = by_expert(e);
    const int64_t m = static_cast<int64_t>(pairs.size());
    es.gathered.resize(static_cast<size_t>(m * Hd));
    for (int64_t r = 0; r < m; ++r) std::copy_n(x + (pairs[r] / K) * Hd, Hd, &es.gathered[r * Hd]);
    es.gate.resize(static_cast<size_t>(m * I));
    es.up.resize(static_cast<size_t>(m * I));
    es.down.resize(static_cast<size_t>(m * Hd));
    const ExpertWeights& ex = w.experts[e];
    const auto linear = [&](const LinearWeight& lw, const float* in, int64_t rows_in, float* o) {
      if (split_rows) LinearOnPool(lw, in, rows_in, o, pool);
      else LinearOnThisThread(lw, in, rows_in, o);
    };
    if (split_rows) LinearPairOnPool(ex.w1, ex.w3, es.gathered.data(), m, es.gate.data(), es.up.data(), pool);
    else LinearPairOnThisThread(ex.w1, ex.w3, es.gathered.data(), m, es.gate.data(), es.up.data());
    SiluMul(es.gate.data(), es.up.data(), m * I);
    linear(ex.w2, es.gate.data(), m, es.down.data());
    for (int64_t r = 0; r < m; ++r) std::copy_n(&es.down[r * Hd], Hd, &s.pair_out[(pairs[r] - p0) * Hd]);
  };

  for (int64_t c0 = 0; c0 < n; c0 += kMoeChunkTokens) {
    const int64_t c1 = std::min(n, c0 + kMoeChunkTokens), p0 = c0 * K;
    // Group the chunk's (token, slot) pairs by expert; each used expert runs once.
    GroupByKey(p0, c1 * K, E, [&](int64_t i) { return chosen[i]; }, s.expert_start, s.expert_next, s.pair_flat);
    s.used.clear();
    // This rank's experts (all of them in one process).
    const int64_t e_lo = par ? par->plan.expert_first[par->plan.rank] : 0;
    const int64_t e_hi = par ? par->plan.expert_first[par->plan.rank + 1] : E;
    for (int64_t e = e_lo; e < e_hi; ++e)
      if (!by_expert(e).empty()) s.used.push_back(static_cast<int32_t>(e));
    // Biggest first, so the last experts handed out are small (balances the threads).
    // (std::sort with a tie-break: stable_sort would allocate.)
    std::sort(s.used.begin(), s.used.end(), [&](int32_t a, int32_t b) {
      return by_expert(a).size() != by_expert(b).size() ? by_expert(a).size() > by_expert(b).size() : a < b;
    });
    s.pair_out.resize(static_cast<size_t>((c1 - c0) * K * Hd));

    const int64_t used = static_cast<int64_t>(s.used.size());
    s.experts_run += used;
    if (threads > 1 && used > 0 && RowsInput::Applies(c1 - c0) && g_moe_rows_jobs.load(std::memory_order_relaxed)) {
      ExpertsByRows(w, x, c0, c1, K, Hd, I, s, pool);
    } else if (threads > 1 && used >= 4 * threads) {
      // Any slot may take the biggest expert (s.used is biggest first): size every slot's
      // scratch for it here, on the calling thread, so a warm step allocates nothing
      // whichever thread gets which expert.
      const auto most = static_cast<size_t>(by_expert(s.used[0]).size());
      for (int t = 0; t < threads; ++t) {
        auto& es = s.expert_threads[static_cast<size_t>(t)];
        if (es.gathered.size() < most * Hd) es.gathered.resize(most * Hd);
        if (es.gate.size() < most * I) es.gate.resize(most * I), es.up.resize(most * I);
        if (es.down.size() < most * Hd) es.down.resize(most * Hd);
      }
      std::atomic<int64_t> next{0};
      pool.ParallelFor(threads, 1, [&](int64_t, int64_t, int th) {
        for (int64_t i = next.fetch_add(1); i < used; i = next.fetch_add(1))
          run_expert(s.used[i], p0, s.expert_threads[th], false);
      });
    } else {
      // One slot runs every expert: sized for the most pairs an expert can have (one per
      // token of the chunk), so a warm step of the same size allocates nothing whatever
      // the routing.
      auto& es = s.expert_threads[0];
      const auto rows = static_cast<size_t>(c1 - c0);
      if (es.gathered.size() < rows * Hd) es.gathered.resize(rows * Hd);
      if (es.gate.size() < rows * I) es.gate.resize(rows * I), es.up.resize(rows * I);
      if (es.down.size() < rows * Hd) es.down.resize(rows * Hd);
      for (int64_t i = 0; i < used; ++i) run_expert(s.used[i], p0, es, true);
    }

    if (par) {
      // Each rank's experts are consecutive, so their pairs are one run of pair_flat:
      // send ours in that order, receive everyone's in pair_flat order.
      const auto& ef = par->plan.expert_first;
      const int R = par->plan.ranks;
      s.pair_bytes.resize(static_cast<size_t>(R));
      for (int r = 0; r < R; ++r)
        s.pair_bytes[static_cast<size_t>(r)] =
            (s.expert_start[ef[r + 1]] - s.expert_start[ef[r]]) * Hd * static_cast<int64_t>(sizeof(float));
      const int64_t k_lo = s.expert_start[e_lo], k_hi = s.expert_start[e_hi];
      const int64_t pairs = (c1 - c0) * K;
      s.pairs_send.resize(static_cast<size_t>((k_hi - k_lo) * Hd));
      s.pairs_recv.resize(static_cast<size_t>(pairs * Hd));
      for (int64_t k = k_lo; k < k_hi; ++k)
        std::copy_n(&s.pair_out[(s.pair_flat[k] - p0) * Hd], Hd, &s.pairs_send[(k - k_lo) * Hd]);
      par->GatherBytes(s.pairs_send.data(), s.pair_bytes, s.pairs_recv.data());
      for (int64_t k = 0; k < pairs; ++k)
        if (k < k_lo || k >= k_hi) std::copy_n(&s.pairs_recv[k * Hd], Hd, &s.pair_out[(s.pair_flat[k] - p0) * Hd]);
    }

    // out[t] = sum over t's slots, in expert-index order, of weight * expert output.
    pool.ParallelFor(c1 - c0, 8, [&](int64_t b, int64_t e, int) {
      int64_t slot[kMaxExpertsPerToken];  // config.cpp checks top_k against it
      for (int64_t t = c0 + b; t < c0 + e; ++t) {
        for (int64_t j = 0; j < K; ++j) slot[j] = t * K + j;
        std::sort(slot, slot + K, [&](int64_t a, int64_t c) { return chosen[a] < chosen[c]; });
        float* o = out + t * Hd;
        std::fill_n(o, Hd, 0.0f);
        for (int64_t j = 0; j < K; ++j) {
          const float wt = weight[slot[j]];
          const float* d = &s.pair_out[(slot[j] - p0) * Hd];
          for (int64_t h = 0; h < Hd; ++h) o[h] += wt * d[h];
        }
      }
    });
  }
  if (trace) trace->Record(fmt::format("layers.{}.moe_out", layer), out, {n, Hd});
}

}  // namespace m2
