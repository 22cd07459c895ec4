// Sampler: each filtering step against distributions worked out by hand, the order of the
// steps, cutoff edge cases, and draws against the documented mapping of mt19937_64; then
// the sampler against a straightforward implementation of the documented rules (softmax,
// full sort, cutoffs) on many random rows and settings: the same distribution to 1e-12 and
// the same tokens for the same seed.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>

namespace m2::runtime {
namespace {

// Logits whose softmax at temperature 1 is exactly proportional to `weights`.
std::vector<float> LogitsFor(std::vector<double> weights) {
  std::vector<float> l;
  for (double w : weights) l.push_back(static_cast<float>(std::log(w)));
  return l;
}

void ExpectDist(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "id " << i;
}

SamplingParams P(double temperature, int64_t top_k = 0, double top_p = 1, double min_p = 0, double rep = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = rep;
  p.seed = 1;
  return p;
}

const std::vector<float> k1234 = LogitsFor({1, 2, 3, 4});  // p = 0.1 0.2 0.3 0.4

TEST(Sampler, ValidateNamesTheField) {
  EXPECT_TRUE(P(0.7, 40, 0.95, 0.05, 1.1).Validate().ok());
  EXPECT_NE(P(-1).Validate().message().find("temperature"), std::string::npos);
  EXPECT_NE(P(1, -2).Validate().message().find("top_k"), std::string::npos);
  EXPECT_NE(P(1, 0, 0).Validate().message().find("top_p"), std::string::npos);
  EXPECT_NE(P(1, 0, 1.5).Validate().message().find("top_p"), std::string::npos);
  EXPECT_NE(P(1, 0, 1, 2).Validate().message().find("min_p"), std::string::npos);
  EXPECT_NE(P(1, 0, 1, 0, 0).Validate().message().find("repetition_penalty"), std::string::npos);
  EXPECT_NE(P(NAN).Validate().message().find("temperature"), std::string::npos);
}

TEST(Sampler, TemperatureScalesLogits) {
  Sampler s(P(1));
  ExpectDist(s.Distribution(k1234, {}), {0.1, 0.2, 0.3, 0.4});
  Sampler half(P(0.5));  // p ~ w^2
  ExpectDist(half.Distribution(k1234, {}), {1 / 30., 4 / 30., 9 / 30., 16 / 30.});
  Sampler hot(P(2));  // p ~ sqrt(w)
  const double z = 1 + std::sqrt(2.) + std::sqrt(3.) + 2;
  ExpectDist(hot.Distribution(k1234, {}), {1 / z, std::sqrt(2.) / z, std::sqrt(3.) / z, 2 / z});
}

TEST(Sampler, GreedyTakesTheLargestLowestIdOnTies) {
  Sampler g(P(0));
  EXPECT_EQ(g.Sample(k1234, {}), 3);
  const std::vector<float> tie = {0.5f, 2.f, 2.f, -1.f};
  EXPECT_EQ(g.Sample(tie, {}), 1);
  ExpectDist(g.Distribution(tie, {}), {0, 1, 0, 0});
}

TEST(Sampler, TopK) {
  Sampler s(P(1, 2));
  ExpectDist(s.Distribution(k1234, {}), {0, 0, 3 / 7., 4 / 7.});
  Sampler all(P(1, 10));  // k larger than the vocabulary: no change
  ExpectDist(all.Distribution(k1234, {}), {0.1, 0.2, 0.3, 0.4});
  Sampler one(P(1, 1));
  ExpectDist(one.Distribution(k1234, {}), {0, 0, 0, 1});
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  // Sorted: 0.4, 0.3, 0.2, 0.1; cumulative 0.4, 0.7, 0.9, 1.0.
  ExpectDist(Sampler(P(1, 0, 0.7)).Distribution(k1234, {}), {0, 0, 3 / 7., 4 / 7.});  // exactly on a boundary
  ExpectDist(Sampler(P(1, 0, 0.70001)).Distribution(k1234, {}), {0, 2 / 9., 3 / 9., 4 / 9.});
  ExpectDist(Sampler(P(1, 0, 0.69999)).Distribution(k1234, {}), {0, 0, 3 / 7., 4 / 7.});
  ExpectDist(Sampler(P(1, 0, 0.4)).Distribution(k1234, {}), {0, 0, 0, 1});
  ExpectDist(Sampler(P(1, 0, 0.01)).Distribution(k1234, {}), {0, 0, 0, 1});  // the top token always stays
  ExpectDist(Sampler(P(1, 0, 0.9999)).Distribution(k1234, {}), {0.1, 0.2, 0.3, 0.4});
  // Ties at the cutoff: equal probabilities are ordered by id, so the lower ids stay.
  const std::vector<float> flat = {0, 0, 0, 0};
  ExpectDist(Sampler(P(1, 0, 0.5)).Distribution(flat, {}), {0.5, 0.5, 0, 0});
  ExpectDist(Sampler(P(1, 0, 0.6)).Distribution(flat, {}), {1 / 3., 1 / 3., 1 / 3., 0});
}

TEST(Sampler, MinPIsRelativeToTheTopToken) {
  ExpectDist(Sampler(P(1, 0, 1, 0.45)).Distribution(k1234, {}), {0, 2 / 9., 3 / 9., 4 / 9.});  // >= 0.18 kept
  ExpectDist(Sampler(P(1, 0, 1, 0.6)).Distribution(k1234, {}), {0, 0, 3 / 7., 4 / 7.});     // >= 0.24 kept
  ExpectDist(Sampler(P(1, 0, 1, 1.0)).Distribution(k1234, {}), {0, 0, 0, 1});
}

TEST(Sampler, StepsApplyInOrderEachOnTheRenormalizedResult) {
  // top-k 3 -> {2,3,4}/9; top-p 0.7 over that: 4/9 = 0.44, + 3/9 = 0.78 >= 0.7 -> {3,4}/7.
  ExpectDist(Sampler(P(1, 3, 0.7)).Distribution(k1234, {}), {0, 0, 3 / 7., 4 / 7.});
  // Temperature before top-p: at T = 0.5, p = {1,4,9,16}/30, and 16/30 = 0.53 alone
  // reaches top-p 0.5 (at T = 1 it would need two tokens).
  ExpectDist(Sampler(P(0.5, 0, 0.5)).Distribution(k1234, {}), {0, 0, 0, 1});
  ExpectDist(Sampler(P(1, 0, 0.5)).Distribution(k1234, {}), {0, 0, 3 / 7., 4 / 7.});
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeOncePerToken) {
  const std::vector<float> l = {2.f, -2.f, 1.f, 0.5f};
  // Penalized with 2 over {0, 1} (1 twice: still once): {1, -4, 1, 0.5}.
  Sampler s(P(1, 0, 1, 0, 2.0));
  const std::vector<int32_t> ctx = {0, 1, 1, 99, -3};  // ids outside the row are ignored
  const double z = std::exp(1.) + std::exp(-4.) + std::exp(1.) + std::exp(0.5);
  ExpectDist(s.Distribution(l, ctx), {std::exp(1.) / z, std::exp(-4.) / z, std::exp(1.) / z, std::exp(0.5) / z});
  // Greedy sees the penalty too: 0 and 2 tie at 1, the lower id wins; without the context 0.
  Sampler g(P(0, 0, 1, 0, 2.0));
  EXPECT_EQ(g.Sample(l, ctx), 0);
  Sampler g3(P(0, 0, 1, 0, 3.0));  // {0.667, -6, 1, 0.5}
  EXPECT_EQ(g3.Sample(l, ctx), 2);
  // A penalty below 1 rewards repetition.
  Sampler r(P(0, 0, 1, 0, 0.25));  // {1, -2, 4, 0} -> {4, -0.5, 4, 0}: a tie, the lower id wins
  EXPECT_EQ(r.Sample(std::vector<float>{1.f, -2.f, 4.f, 0.f}, ctx), 0);
}

TEST(Sampler, DrawsFollowTheDocumentedMappingOfMt19937_64) {
  // u = (next() >> 11) * 2^-53, then the first token whose cumulative probability (most
  // probable first) exceeds u.
  SamplingParams p = P(1);
  p.seed = 20261130;
  Sampler s(p);
  std::mt19937_64 rng(p.seed);
  const int order[] = {3, 2, 1, 0};
  const double probs[] = {0.4, 0.3, 0.2, 0.1};
  for (int i = 0; i < 200; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    double cum = 0;
    int want = 0;
    for (int j = 0; j < 4; ++j) {
      cum += probs[j];
      if (u < cum) {
        want = order[j];
        break;
      }
    }
    ASSERT_EQ(s.Sample(k1234, {}), want) << "draw " << i << " u=" << u;
  }
}

TEST(Sampler, FrequenciesMatchTheDistribution) {
  SamplingParams p = P(1, 0, 0.9);  // keeps {0.4, 0.3, 0.2} -> 4/9, 3/9, 2/9
  p.seed = 7;
  Sampler s(p);
  const int n = 90000;
  std::map<int, int> count;
  for (int i = 0; i < n; ++i) ++count[s.Sample(k1234, {})];
  EXPECT_EQ(count.count(0), 0u);  // cut by top-p: never drawn
  const double want[] = {0, 2 / 9., 3 / 9., 4 / 9.};
  for (int id = 1; id < 4; ++id) {
    const double sigma = std::sqrt(want[id] * (1 - want[id]) / n);
    EXPECT_NEAR(count[id] / double(n), want[id], 5 * sigma) << id;
  }
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  std::vector<float> logits(64);
  for (int i = 0; i < 64; ++i) logits[i] = static_cast<float>(std::sin(i * 1.7));
  auto run = [&](uint64_t seed) {
    SamplingParams p = P(1.0, 0, 0.95);
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.Sample(logits, out));
    return out;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
  // Reseed restarts the sequence.
  SamplingParams p = P(1.0, 0, 0.95);
  p.seed = 5;
  Sampler s(p);
  const int32_t first = s.Sample(logits, {});
  s.Sample(logits, {});
  s.Reseed(5);
  EXPECT_EQ(s.Sample(logits, {}), first);
}

TEST(Sampler, NanLogitsAreNeverChosen) {
  const std::vector<float> l = {NAN, 1.f, NAN, 0.f};
  Sampler g(P(0));
  EXPECT_EQ(g.Sample(l, {}), 1);
  Sampler s(P(1));
  const auto d = s.Distribution(l, {});
  EXPECT_EQ(d[0], 0);
  EXPECT_EQ(d[2], 0);
  EXPECT_NEAR(d[1] + d[3], 1, 1e-12);
  for (int i = 0; i < 100; ++i) {
    const int32_t t = s.Sample(l, {});
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

// The rules of sampler.h done the plain way: softmax over the whole row, every token
// sorted (larger probability first, lower id on ties), then the cutoffs in turn.
struct Kept {
  int32_t id;
  double p;
};

std::vector<Kept> ReferenceFilter(const SamplingParams& sp, const std::vector<float>& logits,
                                  const std::vector<int32_t>& context) {
  const int64_t n = static_cast<int64_t>(logits.size());
  std::vector<std::pair<double, int32_t>> v(n);  // (value, id)
  for (int64_t i = 0; i < n; ++i) {
    const double l = logits[i];
    v[i] = {std::isnan(l) ? -INFINITY : l, static_cast<int32_t>(i)};
  }
  if (sp.repetition_penalty != 1) {
    std::vector<bool> seen(n);
    for (int32_t id : context) {
      if (id < 0 || id >= n || seen[id]) continue;
      seen[id] = true;
      double& l = v[id].first;
      l = l > 0 ? l / sp.repetition_penalty : l * sp.repetition_penalty;
    }
  }
  if (sp.temperature == 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (v[i].first > v[best].first) best = i;
    return {{static_cast<int32_t>(best), 1.0}};
  }
  for (auto& e : v) e.first /= sp.temperature;
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (!std::isfinite(v[0].first)) return {{v[0].second, 1.0}};
  std::vector<Kept> k(n);
  for (int64_t i = 0; i < n; ++i) k[i] = {v[i].second, std::exp(v[i].first - v[0].first)};
  auto normalize = [&k] {
    double sum = 0;
    for (const Kept& e : k) sum += e.p;
    for (Kept& e : k) e.p /= sum;
  };
  normalize();
  if (sp.top_k > 0 && sp.top_k < n) {
    k.resize(sp.top_k);
    normalize();
  }
  if (sp.top_p < 1) {
    double cum = 0;
    size_t keep = k.size();
    for (size_t i = 0; i < k.size(); ++i) {
      cum += k[i].p;
      if (cum >= sp.top_p - 1e-6) {
        keep = i + 1;
        break;
      }
    }
    k.resize(keep);
    normalize();
  }
  if (sp.min_p > 0) {
    const double threshold = sp.min_p * k[0].p;
    size_t keep = 1;
    while (keep < k.size() && k[keep].p >= threshold) ++keep;
    k.resize(keep);
    normalize();
  }
  return k;
}

int32_t ReferenceDraw(const std::vector<Kept>& k, std::mt19937_64& rng) {
  if (k.size() == 1) return k[0].id;
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  double cum = 0;
  for (const Kept& e : k) {
    cum += e.p;
    if (u < cum) return e.id;
  }
  return k.back().id;
}

// The sampler's distribution within 1e-12 of the reference's, and `draws` tokens equal.
void ExpectLikeReference(const SamplingParams& p, const std::vector<float>& logits, const std::vector<int32_t>& context,
                         int draws, const std::string& what) {
  SCOPED_TRACE(what + " n=" + std::to_string(logits.size()) + " T=" + std::to_string(p.temperature) +
               " top_k=" + std::to_string(p.top_k) + " top_p=" + std::to_string(p.top_p) +
               " min_p=" + std::to_string(p.min_p) + " rep=" + std::to_string(p.repetition_penalty));
  const std::vector<Kept> ref = ReferenceFilter(p, logits, context);
  std::vector<double> want(logits.size(), 0.0);
  for (const Kept& e : ref) want[e.id] = e.p;
  Sampler s(p);
  const std::vector<double> got = s.Distribution(logits, context);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-12) << "id " << i << " (" << ref.size() << " kept)";
  std::mt19937_64 rng(p.seed);
  for (int d = 0; d < draws; ++d) ASSERT_EQ(s.Sample(logits, context), ReferenceDraw(ref, rng)) << "draw " << d;
}

// Rows of several shapes: spread, peaked, heavy with exact ties, -inf, NaN, very wide,
// nearly flat, all equal; and one whose every 48th logit is far below the rest (the
// sampler looks at every (n / 1024)-th token to guess where the largest tokens end and
// where a deep cutoff lies).
std::vector<float> RandomRow(int kind, int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<float> l(n);
  for (int64_t i = 0; i < n; ++i) {
    const double z = normal(rng);
    switch (kind) {
      case 0: l[i] = static_cast<float>(3 * z); break;
      case 1: l[i] = static_cast<float>(3 * z); break;
      case 2: l[i] = std::floor(2 * z); break;  // integers: many exact ties
      case 3: l[i] = uniform(rng) < 0.3 ? -INFINITY : std::floor(1.5 * z) / 2; break;
      case 4: l[i] = uniform(rng) < 0.1 ? NAN : static_cast<float>(z); break;
      case 5: l[i] = static_cast<float>(40 * z); break;  // spread past exp's range
      case 6: l[i] = static_cast<float>(0.01 * z); break;  // nearly flat
      case 7: l[i] = 0.5f; break;
      default: l[i] = i % 48 == 0 ? -100.f : static_cast<float>(3 * z); break;
    }
  }
  if (kind == 1)
    for (int j = 0; j < 8; ++j) l[static_cast<int64_t>(uniform(rng) * n)] = static_cast<float>(10 + 10 * uniform(rng));
  return l;
}

constexpr int kRowKinds = 9;

std::vector<int32_t> RandomContext(int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> id(-2, n + 2);
  std::vector<int32_t> c;
  for (int i = 0; i < std::min<int64_t>(40, 2 * n); ++i) c.push_back(static_cast<int32_t>(id(rng)));
  return c;
}

// Every combination of the settings below on rows of each kind.
TEST(Sampler, MatchesTheReferenceOnRandomRows) {
  std::mt19937_64 rng(12345);
  const double temperatures[] = {0, 0.25, 0.7, 1, 2.5};
  const double top_ps[] = {1, 0.95, 0.6, 0.2, 1e-4};
  const double min_ps[] = {0, 0.02, 0.4, 1};
  const double penalties[] = {1, 1.5, 0.6};
  for (int64_t n : {1, 2, 7, 1000}) {
    const int64_t top_ks[] = {0, 1, 3, 40, std::max<int64_t>(n - 1, 0), n, n + 5};
    for (int kind = 0; kind < kRowKinds; ++kind) {
      const std::vector<float> logits = RandomRow(kind, n, rng);
      const std::vector<int32_t> context = RandomContext(n, rng);
      for (double t : temperatures)
        for (int64_t k : top_ks)
          for (double tp : top_ps)
            for (double mp : min_ps)
              for (double rep : penalties) {
                SamplingParams p = P(t, k, tp, mp, rep);
                p.seed = rng();
                // A sanitizer build (~5x slower; it is there to catch memory errors, which one
                // draw per setting exercises) draws once per setting; every setting still runs.
                ExpectLikeReference(p, logits, context, std::getenv("M2_SANITIZED") ? 1 : (n == 1000 ? 10 : 20),
                                    "kind " + std::to_string(kind));
                if (HasFatalFailure()) return;
              }
    }
  }
}

// Vocabulary 50,000 (50,003 for the last kind): a sample of the combinations per row kind,
// more draws each.
TEST(Sampler, MatchesTheReferenceOnLargeRows) {
  std::mt19937_64 rng(777);
  const double temperatures[] = {0, 0.25, 0.7, 1, 2.5};
  const double top_ps[] = {1, 1, 0.95, 0.6, 0.2, 1e-4};
  const double min_ps[] = {0, 0, 0.02, 0.4, 1};
  const double penalties[] = {1, 1.5, 0.6};
  auto pick = [&rng](const auto& options) { return options[rng() % std::size(options)]; };
  for (int kind = 0; kind < kRowKinds; ++kind) {
    const int64_t n = kind == kRowKinds - 1 ? 50003 : 50000;
    const int64_t top_ks[] = {0, 0, 1, 3, 40, 1000, n - 1, n};
    const std::vector<float> logits = RandomRow(kind, n, rng);
    const std::vector<int32_t> context = RandomContext(n, rng);
    const bool sanitized = std::getenv("M2_SANITIZED") != nullptr;  // ~5x slower: fewer draws
    for (int i = 0; i < 40; ++i) {
      SamplingParams p = P(pick(temperatures), pick(top_ks), pick(top_ps), pick(min_ps), pick(penalties));
      p.seed = rng();
      ExpectLikeReference(p, logits, context, sanitized ? 2 : 30, "kind " + std::to_string(kind));
      if (HasFatalFailure()) return;
    }
    // Plain sampling and top-p alone, the settings that sum over the whole row.
    for (double t : {0.7, 1.0})
      for (double tp : {1.0, 0.95}) {
        SamplingParams p = P(t, 0, tp);
        p.seed = rng();
        ExpectLikeReference(p, logits, context, sanitized ? 5 : 100, "kind " + std::to_string(kind));
        if (HasFatalFailure()) return;
      }
  }
}

// Rows and settings at the edges: every logit -inf, +inf present, temperatures so small
// or large that logit / temperature overflows or underflows, a min_p so small its
// threshold underflows, top-k reaching past the finite logits.
TEST(Sampler, MatchesTheReferenceAtTheEdges) {
  std::mt19937_64 rng(99);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows = {
      {-inf, -inf, -inf},
      {NAN, -inf, NAN},
      {1.f, inf, 2.f, inf},
      {0.f, -1000.f, -1000.f, 5.f},
      {3.f, -inf, 3.f, NAN, -inf, 1.f},
      {-0.f, 0.f, -0.f, 0.f},
      {1e-40f, 2e-40f, 3e38f, -3e38f, 1.f},
  };
  rows.push_back(RandomRow(0, 3000, rng));
  rows.push_back(RandomRow(3, 3000, rng));
  const double temperatures[] = {1e-250, 1e-30, 1, 1e30, 1e250};
  const int64_t top_ks[] = {0, 2, 5};
  const double min_ps[] = {0, 1e-250, 1e-300, 0.5};
  for (const auto& logits : rows) {
    const std::vector<int32_t> context = RandomContext(static_cast<int64_t>(logits.size()), rng);
    for (double t : temperatures)
      for (int64_t k : top_ks)
        for (double mp : min_ps)
          for (double tp : {1.0, 0.5})
            for (double rep : {1.0, 1e200}) {
              SamplingParams p = P(t, k, tp, mp, rep);
              p.seed = rng();
              ExpectLikeReference(p, logits, context, 20, "edge row of " + std::to_string(logits.size()));
              if (HasFatalFailure()) return;
            }
  }
}

}  // namespace
}  // namespace m2::runtime
