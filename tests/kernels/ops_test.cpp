// Element-wise ops against direct double-precision formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "kernels/ops.h"
#include "kernels/probe.h"

namespace m2 {
namespace {

TEST(OpsTest, RmsNormMatchesFormula) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int n = 200;
  std::vector<float> x(n), w(n), out(n);
  for (int i = 0; i < n; ++i) x[i] = nd(rng), w[i] = 1.0f + 0.1f * nd(rng);
  RmsNorm(x.data(), w.data(), n, 1e-6, out.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(out[i], w[i] * x[i] * inv, 4e-7 * std::fabs(w[i] * x[i] * inv) + 1e-12);
  RmsNorm(x.data(), w.data(), n, 1e-6, x.data());  // in place
  EXPECT_EQ(x, out);
}

TEST(OpsTest, RopeRotatesPairsHalfApartAndLeavesTheRest) {
  const int head_dim = 16, rot = 8;
  std::vector<float> inv(rot / 2);
  RopeInvFreq(10000.0, rot, inv.data());
  for (int i = 0; i < rot / 2; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / rot), 1e-7);
  std::vector<float> h(head_dim);
  for (int i = 0; i < head_dim; ++i) h[i] = static_cast<float>(i + 1);
  const auto orig = h;
  const int pos = 7;
  RopeNeox(h.data(), rot, inv.data(), pos);
  for (int i = 0; i < rot / 2; ++i) {
    const double a = pos * double(inv[i]);
    EXPECT_NEAR(h[i], orig[i] * std::cos(a) - orig[i + rot / 2] * std::sin(a), 1e-5);
    EXPECT_NEAR(h[i + rot / 2], orig[i + rot / 2] * std::cos(a) + orig[i] * std::sin(a), 1e-5);
  }
  for (int i = rot; i < head_dim; ++i) EXPECT_EQ(h[i], orig[i]);
  std::vector<float> z = orig;
  RopeNeox(z.data(), rot, inv.data(), 0);  // position 0 is the identity
  EXPECT_EQ(z, orig);
}

TEST(OpsTest, SoftmaxAndSilu) {
  std::vector<float> x = {1000.0f, 999.0f, -5.0f};  // large values: no overflow
  Softmax(x.data(), 3);
  EXPECT_NEAR(x[0], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(x[0] + x[1] + x[2], 1.0, 1e-6);
  std::vector<float> g = {-2.0f, 0.0f, 3.0f}, u = {1.0f, 2.0f, 0.5f};
  SiluMul(g.data(), u.data(), 3);
  EXPECT_NEAR(g[0], -2.0 / (1 + std::exp(2.0)), 1e-6);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_NEAR(g[2], 0.5 * 3.0 / (1 + std::exp(-3.0)), 1e-6);
}

// Every SiluMul build this CPU runs against silu(g) u in double precision: within 1e-6
// relative (plus 1e-30 absolute for results near 0), over magnitudes from 1e-6 to 120 of
// both signs; -0 below -87; NaN stays NaN; and an element's result is the same bits
// whatever n and its place (the SIMD tail goes through a full vector).
TEST(OpsTest, SiluMulEveryBuildMatchesTheFormula) {
  struct Build {
    const char* name;
    void (*fn)(float*, const float*, int64_t);
  };
  std::vector<Build> builds = {{"portable", SiluMulPortable}};
  if (Cpu().has_avx2()) builds.push_back({"avx2", SiluMulAvx2});
  if (Cpu().has_avx512()) builds.push_back({"avx512", SiluMulAvx512});
  std::vector<float> g, u;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  for (float m = 1e-6f; m < 120.0f; m *= 1.37f)
    for (float sign : {1.0f, -1.0f}) g.push_back(sign * m), u.push_back(ud(rng));
  g.push_back(0.0f), u.push_back(1.5f);
  g.push_back(-0.0f), u.push_back(1.5f);
  const size_t finite = g.size();
  g.push_back(std::nanf("")), u.push_back(1.0f);
  g.push_back(1.0f), u.push_back(std::nanf(""));
  for (const Build& b : builds) {
    SCOPED_TRACE(b.name);
    std::vector<float> out = g;
    b.fn(out.data(), u.data(), static_cast<int64_t>(out.size()));
    for (size_t i = 0; i < finite; ++i) {
      const double x = g[i], want = x / (1.0 + std::exp(-x)) * u[i];
      EXPECT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-30) << "g " << g[i] << " u " << u[i];
    }
    EXPECT_TRUE(std::isnan(out[finite]));
    EXPECT_TRUE(std::isnan(out[finite + 1]));
    // The same elements in calls of every length from every start: the same bits.
    for (int64_t start = 0; start < 5; ++start)
      for (int64_t n = 1; n <= 37; ++n) {
        std::vector<float> part(g.begin() + start, g.begin() + start + n);
        b.fn(part.data(), u.data() + start, n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(std::memcmp(&part[i], &out[start + i], 4), 0) << start << " " << n;
      }
  }
}

}  // namespace
// gemv_bench --overlap's loop (ReadWithFmas) reads every element it is given, whatever
// the FMA count, the length and the build: with the same FMAs, a buffer of small integers
// (as bits) sums to exactly their total more than a buffer of zeros does.
TEST(OpsTest, ReadWithFmasReadsEveryElement) {
  struct Build {
    const char* name;
    double (*fn)(const float*, int64_t, int);
  };
  std::vector<Build> builds = {{"dispatch", ReadWithFmas}};
  if (Cpu().has_avx2()) builds.push_back({"avx2", ReadWithFmasAvx2});
  if (Cpu().has_avx512()) builds.push_back({"avx512", ReadWithFmasAvx512});
  std::vector<float> data(1000), zeros(1000, 0.0f);
  for (size_t i = 0; i < data.size(); ++i) {
    const int32_t bits = static_cast<int32_t>(i % 97) + 1;
    std::memcpy(&data[i], &bits, sizeof bits);
  }
  for (const Build& b : builds)
    for (const int fmas : kReadFmaCounts)
      for (const int64_t n : {0, 1, 15, 16, 31, 32, 33, 100, 1000}) {
        double want = 0;
        for (int64_t i = 0; i < n; ++i) want += static_cast<double>(i % 97 + 1);
        EXPECT_EQ(b.fn(data.data(), n, fmas) - b.fn(zeros.data(), n, fmas), want)
            << b.name << ", " << fmas << " FMAs per 64 bytes, " << n << " floats";
      }
}

}  // namespace m2
