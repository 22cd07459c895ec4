#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace m2::runtime {

namespace {

// Sums within 1e-6 of top_p count as reaching it: probabilities come from float logits
// (relative error ~6e-8 each), so a cutoff that falls exactly on a boundary in exact
// arithmetic (0.4 + 0.3 for top_p 0.7) must not depend on the last bits.
constexpr double kTopPSlack = 1e-6;

bool Finite(double v) { return std::isfinite(v); }

}  // namespace

Status SamplingParams::Validate() const {
  if (!Finite(temperature) || temperature < 0)
    return Error("temperature: expected a number >= 0 (0 = greedy), found {}", temperature);
  if (top_k < 0) return Error("top_k: expected an integer >= 0 (0 = off), found {}", top_k);
  if (!Finite(top_p) || top_p <= 0 || top_p > 1)
    return Error("top_p: expected a number in (0, 1] (1 = off), found {}", top_p);
  if (!Finite(min_p) || min_p < 0 || min_p > 1)
    return Error("min_p: expected a number in [0, 1] (0 = off), found {}", min_p);
  if (!Finite(repetition_penalty) || repetition_penalty <= 0)
    return Error("repetition_penalty: expected a number > 0 (1 = off), found {}", repetition_penalty);
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  const Status s = params.Validate();
  M2_CHECK(s.ok(), "{}", s.message());
}

void Sampler::Reseed(uint64_t seed) {
  params_.seed = seed;
  rng_.seed(seed);
}

void Sampler::Filter(std::span<const float> logits, std::span<const int32_t> context) {
  const int64_t n = static_cast<int64_t>(logits.size());
  M2_CHECK(n > 0, "empty logits row");
  candidates_.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    // A NaN logit (a broken model) must not poison the sums: it is never chosen.
    const double l = logits[i];
    candidates_[i] = {std::isnan(l) ? -std::numeric_limits<double>::infinity() : l, static_cast<int32_t>(i)};
  }

  // 1. Repetition penalty, once per distinct token.
  if (params_.repetition_penalty != 1.0 && !context.empty()) {
    seen_.assign(n, 0);
    for (int32_t id : context) {
      if (id < 0 || id >= n || seen_[id]) continue;
      seen_[id] = 1;
      double& l = candidates_[id].p;
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }

  // 2. Greedy.
  if (params_.temperature == 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (candidates_[i].p > candidates_[best].p) best = i;  // strict: the lowest id wins ties
    candidates_.assign(1, Candidate{1.0, static_cast<int32_t>(best)});
    return;
  }

  // 3. Temperature and softmax, most probable first.
  for (Candidate& c : candidates_) c.p /= params_.temperature;
  std::sort(candidates_.begin(), candidates_.end(),
            [](const Candidate& a, const Candidate& b) { return a.p > b.p || (a.p == b.p && a.id < b.id); });
  const double max_logit = candidates_[0].p;
  if (!Finite(max_logit)) {
    // Every logit -inf (or +inf present): no distribution to draw from; take the first.
    candidates_.resize(1);
    candidates_[0].p = 1.0;
    return;
  }
  auto normalize = [this] {
    double sum = 0;
    for (const Candidate& c : candidates_) sum += c.p;
    for (Candidate& c : candidates_) c.p /= sum;
  };
  for (Candidate& c : candidates_) c.p = std::exp(c.p - max_logit);
  normalize();

  // 4. Top-k.
  if (params_.top_k > 0 && params_.top_k < n) {
    candidates_.resize(params_.top_k);
    normalize();
  }

  // 5. Top-p: keep up to and including the token whose cumulative sum reaches top_p.
  if (params_.top_p < 1.0) {
    double cum = 0;
    size_t keep = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += candidates_[i].p;
      if (cum >= params_.top_p - kTopPSlack) {
        keep = i + 1;
        break;
      }
    }
    candidates_.resize(keep);
    normalize();
  }

  // 6. Min-p, relative to the most probable token (always kept).
  if (params_.min_p > 0) {
    const double threshold = params_.min_p * candidates_[0].p;
    size_t keep = 1;
    while (keep < candidates_.size() && candidates_[keep].p >= threshold) ++keep;
    candidates_.resize(keep);
    normalize();
  }
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> context) {
  Filter(logits, context);
  if (candidates_.size() == 1) return candidates_[0].id;
  // u in [0, 1) from the top 53 bits: exactly representable, the same everywhere.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  double cum = 0;
  for (const Candidate& c : candidates_) {
    cum += c.p;
    if (u < cum) return c.id;
  }
  return candidates_.back().id;  // u within rounding of 1
}

std::vector<double> Sampler::Distribution(std::span<const float> logits, std::span<const int32_t> context) {
  Filter(logits, context);
  std::vector<double> dist(logits.size(), 0.0);
  for (const Candidate& c : candidates_) dist[c.id] = c.p;
  return dist;
}

}  // namespace m2::runtime
