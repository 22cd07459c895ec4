// Sampler: each filtering step against distributions worked out by hand, the order of the
// steps, cutoff edge cases, and draws against the documented mapping of mt19937_64.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

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

}  // namespace
}  // namespace m2::runtime
