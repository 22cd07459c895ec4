// Sparse MoE of MiniMax-M2 (transformers: MiniMaxM2TopKRouter + MiniMaxM2Experts):
//   s = sigmoid(x gate^T)                 fp32 [n, E]
//   idx = top_k(s + e_score_correction_bias)   the bias only chooses experts
//   w = s[idx] / sum(s[idx])              weights are the unbiased scores, renormalised
//   out = sum_j w_j * W2_j(silu(W1_j x) * W3_j x)
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "kernels/linear.h"
#include "kernels/ops.h"
#include "model/layers.h"

namespace m2 {

void MoeForward(const ModelConfig& cfg, const MoeWeights& w, int64_t layer, const float* x, int64_t n, float* out,
                Scratch& s, Tracer* trace) {
  const int64_t E = cfg.num_local_experts, K = cfg.num_experts_per_tok, Hd = cfg.hidden_size;
  const int64_t I = cfg.intermediate_size;
  s.router.resize(static_cast<size_t>(n * E));
  Linear(w.gate, x, n, s.router.data());  // router logits [n, E]
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
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-s.router[t * E + e]));
      biased[e] = score[e] + (w.bias.empty() ? 0.0f : w.bias[e]);
    }
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

  std::fill_n(out, n * Hd, 0.0f);
  // Group the (token, slot) pairs by expert; each used expert runs once on its tokens.
  auto& by_expert = s.by_expert;
  by_expert.resize(static_cast<size_t>(E));
  for (auto& v : by_expert) v.clear();  // keeps capacity: no allocation once warm
  for (int64_t i = 0; i < n * K; ++i) by_expert[chosen[i]].push_back(static_cast<int32_t>(i));
  for (int64_t e = 0; e < E; ++e) {
    const auto& pairs = by_expert[e];
    if (pairs.empty()) continue;
    const int64_t m = static_cast<int64_t>(pairs.size());
    s.gathered.resize(static_cast<size_t>(m * Hd));
    for (int64_t r = 0; r < m; ++r) std::copy_n(x + (pairs[r] / K) * Hd, Hd, &s.gathered[r * Hd]);
    s.gate.resize(static_cast<size_t>(m * I));
    s.up.resize(static_cast<size_t>(m * I));
    s.down.resize(static_cast<size_t>(m * Hd));
    const ExpertWeights& ex = w.experts[e];
    Linear(ex.w1, s.gathered.data(), m, s.gate.data());
    Linear(ex.w3, s.gathered.data(), m, s.up.data());
    SiluMul(s.gate.data(), s.up.data(), m * I);
    Linear(ex.w2, s.gate.data(), m, s.down.data());
    for (int64_t r = 0; r < m; ++r) {
      const float wt = weight[pairs[r]];
      float* o = out + (pairs[r] / K) * Hd;
      for (int64_t d = 0; d < Hd; ++d) o[d] += wt * s.down[r * Hd + d];
    }
  }
  if (trace) trace->Record(fmt::format("layers.{}.moe_out", layer), out, {n, Hd});
}

}  // namespace m2
