// The int16-activation path for q8 weights (kernels/linear_int16.h): the quantizer, the
// kernels against the portable reference and each other, and Linear()'s modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "base/dtype.h"
#include "kernels/linear.h"
#include "kernels/linear_bf16.h"
#include "kernels/linear_int16.h"

namespace m2 {
namespace {

// A q8 weight with random codes (-128 included) and random positive f16 scales.
struct Q8 {
  LinearWeight w;
  std::vector<int8_t> q;
  std::vector<uint16_t> s;
  float At(int64_t r, int64_t j) const {
    return static_cast<float>(q[static_cast<size_t>(r * w.cols + j)]) * F16ToF32(s[static_cast<size_t>(r * (w.cols / 32) + j / 32)]);
  }
};

Q8 MakeQ8(int64_t rows, int64_t cols, std::mt19937& rng) {
  Q8 m;
  m.q.resize(static_cast<size_t>(rows * cols));
  m.s.resize(static_cast<size_t>(rows * cols / 32));
  for (auto& v : m.q) v = static_cast<int8_t>(rng() & 0xff);
  std::uniform_real_distribution<float> ud(0.001f, 0.02f);
  for (auto& v : m.s) v = F32ToF16(ud(rng));
  m.w.format = WeightFormat::kQ8;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.data = m.q.data();
  m.w.scale = m.s.data();
  return m;
}

struct Int16Input {
  std::vector<int16_t> q;
  std::vector<float> d;
  Int16Activations a;
};

Int16Input Quantize(const std::vector<float>& x, int64_t n, int64_t cols) {
  Int16Input in;
  in.q.resize(static_cast<size_t>(n * cols));
  in.d.resize(static_cast<size_t>(n * cols / 32));
  QuantizeActivationsInt16(x.data(), n, cols, in.q.data(), in.d.data());
  in.a = {.q = in.q.data(), .d = in.d.data(), .n = n, .cols = cols};
  return in;
}

// Each value within half a step of its group's scale, the step max|x| / 32767; an all-zero
// group is exact; a group with a NaN or an infinity has a NaN scale. The AVX2 quantizer
// gives the same values and scales.
TEST(Int16ActivationsTest, QuantizedWithinHalfAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 3, cols = 128;
  std::vector<float> x(n * cols);
  for (auto& v : x) v = nd(rng);
  x[40] = 50.0f;                                                 // an outlier sets its group's step
  x[41] = -50.0f;                                                // and its negative
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;                     // token 0, group 2: all zero
  x[cols + 5] = std::numeric_limits<float>::quiet_NaN();         // token 1, group 0
  x[2 * cols + 100] = -std::numeric_limits<float>::infinity();  // token 2, group 3
  const Int16Input in = Quantize(x, n, cols);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < cols / 32; ++g) {
      const int64_t k = t * 4 + g;
      if ((t == 1 && g == 0) || (t == 2 && g == 3)) {
        EXPECT_TRUE(std::isnan(in.d[k])) << t << " " << g;
        continue;
      }
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[t * cols + g * 32 + i]));
      EXPECT_FLOAT_EQ(in.d[k], amax / 32767.0f);
      for (int i = 0; i < 32; ++i) {
        const int64_t j = t * cols + g * 32 + i;
        ASSERT_LE(std::abs(in.q[j]), 32767);
        ASSERT_LE(std::fabs(in.q[j] * in.d[k] - x[j]), 0.5f * in.d[k] * 1.001f + 1e-30f) << j;
      }
    }
  EXPECT_EQ(in.d[2], 0.0f);
  EXPECT_EQ(in.q[40], 32767);
  EXPECT_EQ(in.q[41], -32767);
  if (Cpu().has_avx2()) {
    std::vector<int16_t> q(in.q.size(), 99);
    std::vector<float> d(in.d.size());
    QuantizeActivationsInt16Avx2(x.data(), n, cols, q.data(), d.data());
    EXPECT_EQ(q, in.q);
    for (size_t k = 0; k < d.size(); ++k)
      EXPECT_TRUE(d[k] == in.d[k] || (std::isnan(d[k]) && std::isnan(in.d[k]))) << k;
  }
}

// A kernel against the reference (the same integer dots; only the fp32 summation order
// differs) and, for the VNNI build, against the AVX2 one bit for bit. Token counts across
// the tiles of 4 and their rests, row counts that leave rests of the 4- and 2-row passes,
// column counts whose groups are not a multiple of the 16-group scale chunk.
void CheckKernel(Int16RowsFn kernel) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{37, 96}, {19, 544}, {6, 1056}, {3, 512}}) {
    const Q8 m = MakeQ8(rows, cols, rng);
    for (int64_t n : {1, 2, 3, 4, 5, 7, 9, 21}) {
      std::vector<float> x(static_cast<size_t>(n * cols));
      for (auto& v : x) v = nd(rng);
      const Int16Input in = Quantize(x, n, cols);
      std::vector<float> ref(static_cast<size_t>(n * rows)), got(ref.size(), -1.0f);
      ASSERT_TRUE(LinearInt16RowsReference(m.w, in.a, ref.data(), 0, rows));
      // Two row ranges: a row's result must not depend on which rows share its pass.
      ASSERT_TRUE(kernel(m.w, in.a, got.data(), 0, rows / 2 + 1));
      ASSERT_TRUE(kernel(m.w, in.a, got.data(), rows / 2 + 1, rows));
      if (kernel != LinearInt16RowsAvx2) {
        std::vector<float> avx2(ref.size());
        ASSERT_TRUE(LinearInt16RowsAvx2(m.w, in.a, avx2.data(), 0, rows));
        ASSERT_EQ(got, avx2) << Int16RowsKernelName(kernel) << " n=" << n;
      }
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double mag = 0;  // sum of |w x| as quantized: the scale of the rounding error
          for (int64_t j = 0; j < cols; ++j)
            mag += std::fabs(m.At(r, j) * in.q[t * cols + j] * in.d[t * cols / 32 + j / 32]);
          const size_t k = static_cast<size_t>(t * rows + r);
          ASSERT_NEAR(got[k], ref[k], 4e-6 * mag + 1e-6)
              << Int16RowsKernelName(kernel) << " " << rows << "x" << cols << " n=" << n << " t=" << t << " r=" << r;
        }
    }
  }
}

TEST(Int16ActivationsTest, Avx2MatchesTheReference) {
  if (!Cpu().has_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  for (int one_row : {0, 1}) {  // 2 rows a pass up to 2 tokens, then 1; or always 1
    SetDecodeOneRowForTesting(one_row);
    CheckKernel(LinearInt16RowsAvx2);
  }
  SetDecodeOneRowForTesting(-1);
}

TEST(Int16ActivationsTest, Avx512VnniMatchesAvx2AndTheReference) {
  if (!Cpu().has_avx512() || !Cpu().avx512_vnni) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: " << Cpu().Describe();
  // Both forms: the 256-bit one (own rows a pass) and the 512-bit one of one row a pass.
  for (int one_row : {0, 1}) {
    SetDecodeOneRowForTesting(one_row);
    CheckKernel(LinearInt16RowsAvx512Vnni);
  }
  SetDecodeOneRowForTesting(-1);
}

TEST(Int16ActivationsTest, KernelChoiceAndFormats) {
  CpuFeatures all;
  all.avx2 = all.fma = all.f16c = all.avx512f = all.avx512bw = all.avx512vl = all.avx512_vnni = true;
  EXPECT_STREQ(Int16RowsKernelName(Int16RowsKernel(KernelIsa::kAvx512, all)), "avx512vnni");
  EXPECT_STREQ(Int16RowsKernelName(Int16RowsKernel(KernelIsa::kAvx2, all)), "avx2");
  EXPECT_STREQ(Int16RowsKernelName(Int16RowsKernel(KernelIsa::kPortable, all)), "reference");
  CpuFeatures older = all;  // AVX-512 without VNNI (Skylake-SP)
  older.avx512_vnni = false;
  EXPECT_STREQ(Int16RowsKernelName(Int16RowsKernel(KernelIsa::kAvx512, older)), "avx2");
  // Only q8: any other format is refused, nothing written.
  std::mt19937 rng(1);
  Q8 m = MakeQ8(4, 64, rng);
  m.w.format = WeightFormat::kQ4;
  const std::vector<float> x(64, 1.0f);
  const Int16Input in = Quantize(x, 1, 64);
  std::vector<float> y(4, 7.0f);
  EXPECT_FALSE(LinearInt16RowsReference(m.w, in.a, y.data(), 0, 4));
  if (Cpu().has_avx2()) {
    EXPECT_FALSE(LinearInt16RowsAvx2(m.w, in.a, y.data(), 0, 4));
  }
  EXPECT_EQ(y, std::vector<float>(4, 7.0f));
}

// Linear() with kInt16: within the bound the quantization allows of the exact product,
// sum_j |w_j| * step_j / 2 (plus fp32 rounding), on the dispatched kernel and the pool; a
// NaN in the input comes out as NaN.
TEST(Int16ActivationsTest, LinearStaysWithinTheQuantizationBound) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Q8 m = MakeQ8(300, 512, rng);
  m.w.activations = ActivationMode::kInt16;
  const int64_t rows = 300, cols = 512;
  for (int64_t n : {1, 3, 8, 40}) {
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (auto& v : x) v = nd(rng);
    std::vector<float> y(static_cast<size_t>(n * rows));
    Linear(m.w, x.data(), n, y.data());
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> step(static_cast<size_t>(cols / 32));
      for (int64_t g = 0; g < cols / 32; ++g) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[t * cols + g * 32 + i]));
        step[g] = amax / 32767.0;
      }
      for (int64_t r = 0; r < rows; ++r) {
        long double exact = 0, bound = 0, mag = 0;
        for (int64_t j = 0; j < cols; ++j) {
          const double wj = m.At(r, j), xj = x[t * cols + j];
          exact += wj * xj;
          bound += std::fabs(wj) * step[j / 32] / 2;
          mag += std::fabs(wj * xj);
        }
        ASSERT_NEAR(y[t * rows + r], static_cast<double>(exact), static_cast<double>(bound + 1e-5 * mag))
            << "n=" << n << " t=" << t << " r=" << r;
      }
    }
  }
  std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(rows));
  x[33] = std::numeric_limits<float>::quiet_NaN();
  Linear(m.w, x.data(), 1, y.data());
  for (float v : y) ASSERT_TRUE(std::isnan(v));
}

// kInt16Decode: int16 up to kMaxGemvTokens tokens (bit-identical to kInt16 there: a token's
// result does not depend on its batch), the exact fp32 kernels beyond;
// kInt16DecodeBf16Prefill: the same decode steps, and beyond them the bf16 GEMM's result
// (where this CPU has it).
TEST(Int16ActivationsTest, DecodeModesAreInt16UpToTheGemvLimitOnly) {
  std::mt19937 rng(17);
  Q8 m = MakeQ8(64, 256, rng);
  for (int64_t n : {int64_t{1}, int64_t{2}, kMaxGemvTokens, kMaxGemvTokens + 1, int64_t{40}}) {
    std::vector<float> x(static_cast<size_t>(n * 256));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * static_cast<float>(i));
    std::vector<float> exact(static_cast<size_t>(n * 64)), int16(exact.size()), decode(exact.size()), one(64);
    m.w.activations = ActivationMode::kExact;
    Linear(m.w, x.data(), n, exact.data());
    m.w.activations = ActivationMode::kInt16;
    Linear(m.w, x.data(), n, int16.data());
    Linear(m.w, x.data() + (n - 1) * 256, 1, one.data());  // the last token alone
    EXPECT_TRUE(std::equal(one.begin(), one.end(), int16.end() - 64)) << "n=" << n;
    m.w.activations = ActivationMode::kInt16Decode;
    Linear(m.w, x.data(), n, decode.data());
    EXPECT_NE(exact, int16);
    EXPECT_EQ(decode, n <= kMaxGemvTokens ? int16 : exact) << "n=" << n;
    if (Bf16GemmAvailable()) {
      std::vector<float> bf16(exact.size()), both(exact.size());
      m.w.activations = ActivationMode::kBf16Prefill;
      Linear(m.w, x.data(), n, bf16.data());
      m.w.activations = ActivationMode::kInt16DecodeBf16Prefill;
      Linear(m.w, x.data(), n, both.data());
      EXPECT_EQ(both, n <= kMaxGemvTokens ? int16 : bf16) << "n=" << n;
    }
  }
}

// The int16 prefill GEMM (kInt16DecodeInt16Prefill, more than kMaxGemvTokens tokens): the
// reference's bits for every token, whatever the batch: token counts across the vectors,
// the 32-token tiles and the 128-token chunks, row counts that leave partial panels, column
// counts with a partial 256-column chunk (and a single group); codes including -128. Up to
// kMaxGemvTokens the mode is the int16 decode kernels'. Each build runs where the CPU has it.
TEST(Int16GemmTest, GivesTheReferenceBitsForEveryToken) {
  if (Int16GemmLanes() == 0) GTEST_SKIP() << "the portable kernels: no int16 GEMM";
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{37, 96}, {13, 544}, {24, 32}, {50, 768}}) {
    Q8 m = MakeQ8(rows, cols, rng);
    for (int64_t n : {9, 16, 17, 33, 40, 130}) {
      std::vector<float> x(static_cast<size_t>(n * cols));
      for (auto& v : x) v = nd(rng);
      x[5] = 300.0f;  // an outlier in one group
      const Int16Input in = Quantize(x, n, cols);
      std::vector<float> ref(static_cast<size_t>(n * rows));
      ASSERT_TRUE(LinearInt16RowsReference(m.w, in.a, ref.data(), 0, rows));
      m.w.activations = ActivationMode::kInt16DecodeInt16Prefill;
      std::vector<float> got(ref.size(), -1.0f);
      Linear(m.w, x.data(), n, got.data());
      ASSERT_EQ(got, ref) << rows << "x" << cols << " n=" << n;
      // Each build directly, where this CPU runs it.
      for (bool wide : {false, true}) {
        if (wide && !(Cpu().has_avx512() && Cpu().avx512_vnni)) continue;
        const int64_t lanes = wide ? 16 : 8, ntp = (std::min<int64_t>(n, 128) + lanes - 1) / lanes * lanes;
        if (n > 128) continue;  // one chunk here; Linear() above covers the chunking
        std::vector<uint32_t> q(static_cast<size_t>(ntp * cols / 2));
        std::vector<float> d(static_cast<size_t>(ntp * cols / 32));
        PackTokensInt16Avx2(x.data(), n, cols, ntp, 0, ntp, q.data(), d.data());
        const Int16TokenTiles tiles{.q = q.data(), .d = d.data(), .ntp = ntp, .n = n};
        std::vector<float> direct(ref.size(), -1.0f);
        ASSERT_TRUE((wide ? GemmRowsInt16Avx512Vnni : GemmRowsInt16Avx2)(m.w, tiles, direct.data(), 0, rows / 2 + 1));
        ASSERT_TRUE((wide ? GemmRowsInt16Avx512Vnni : GemmRowsInt16Avx2)(m.w, tiles, direct.data(), rows / 2 + 1, rows));
        ASSERT_EQ(direct, ref) << (wide ? "avx512vnni " : "avx2 ") << rows << "x" << cols << " n=" << n;
      }
    }
  }
  // A NaN in a token's input: that token's outputs NaN, the others' unchanged.
  Q8 m = MakeQ8(30, 64, rng);
  m.w.activations = ActivationMode::kInt16DecodeInt16Prefill;
  std::vector<float> x(static_cast<size_t>(20 * 64), 0.25f), y(static_cast<size_t>(20 * 30));
  x[3 * 64 + 7] = std::numeric_limits<float>::quiet_NaN();
  Linear(m.w, x.data(), 20, y.data());
  for (int64_t t = 0; t < 20; ++t)
    for (int64_t r = 0; r < 30; ++r) EXPECT_EQ(std::isnan(y[t * 30 + r]), t == 3) << t << " " << r;
}

// An FP8 weight (128 x 128 blocks, a different scale in each): codes drawn as a
// checkpoint's (GaussianFp8Codes) or uniform over the non-NaN codes, so that groups span
// from a few binades to all of them (subnormals included).
struct Fp8 {
  LinearWeight w;
  std::vector<uint8_t> codes;
  std::vector<float> bs;
};

Fp8 MakeFp8(int64_t rows, int64_t cols, bool checkpoint_codes, std::mt19937& rng) {
  Fp8 m;
  m.w.format = WeightFormat::kFp8Block;
  m.w.rows = rows;
  m.w.cols = cols;
  m.codes.resize(static_cast<size_t>(rows * cols));
  static const std::vector<uint8_t> gaussian = GaussianFp8Codes(100.0f);
  for (auto& c : m.codes) {
    c = checkpoint_codes ? gaussian[rng() & 0xffff] : static_cast<uint8_t>(rng() & 0xff);
    if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN codes here
  }
  m.bs.resize(static_cast<size_t>(m.w.scale_rows() * m.w.scale_cols()));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : m.bs) v = std::exp(nd(rng));
  m.w.data = m.codes.data();
  m.w.scale = m.bs.data();
  return m;
}

// An FP8 group as int16 (Fp8GroupToInt16), against the exact values: the step 2^(s - 9) x
// the block scale with s = max(0, E - 8) for the group's largest exponent field E; every
// code within 7 exponents of E exact, the others within half a step (ties to even), |q| at
// most 1920; a NaN code gives q = 0 and a NaN scale. Then every code alone in a group with
// the largest finite one (448): each within half a step of its value.
TEST(Int16Fp8Test, GroupsConvertExactlyWithinSevenBinades) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 2000; ++trial) {
    uint8_t codes[32];
    const int spread = 1 + static_cast<int>(rng() % 16), top_e = static_cast<int>(rng() % 16);
    for (auto& c : codes) {
      const int e = std::max(0, top_e - static_cast<int>(rng() % spread));
      c = static_cast<uint8_t>((rng() & 0x80) | (e << 3) | (rng() & 7));
      if ((c & 0x7f) == 0x7f) c ^= 1;
    }
    int top = 0;
    for (uint8_t c : codes) top = std::max(top, c & 0x7f);
    const int s = std::max(0, (top >> 3) - 8);
    int16_t q[32];
    const float scale = Fp8GroupToInt16(codes, 3.0f, q);
    ASSERT_EQ(scale, 3.0f * std::ldexp(1.0f, s - 9)) << trial;
    for (int i = 0; i < 32; ++i) {
      const double v = Fp8E4M3ToF32(codes[i]), got = q[i] * std::ldexp(1.0, s - 9);
      ASSERT_LE(std::abs(q[i]), 1920);
      if (((codes[i] & 0x7f) >> 3) >= (top >> 3) - 7) {
        ASSERT_EQ(got, v) << trial << " " << i << " code " << int(codes[i]);
      } else {
        ASSERT_LE(std::fabs(got - v), std::ldexp(1.0, s - 10)) << trial << " " << i;
      }
    }
  }
  uint8_t codes[32] = {};
  codes[0] = 0x7e;  // 448: E = 15, s = 7
  int16_t q[32];
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    codes[1] = static_cast<uint8_t>(c);
    ASSERT_EQ(Fp8GroupToInt16(codes, 1.0f, q), 0.25f);  // 2^(7 - 9)
    EXPECT_EQ(q[0], 1792);
    EXPECT_LE(std::fabs(q[1] * 0.25 - Fp8E4M3ToF32(codes[1])), 0.125) << c;
  }
  codes[1] = 0x40;  // 2.0 = 8 x 0.25 exactly
  Fp8GroupToInt16(codes, 1.0f, q);
  EXPECT_EQ(q[1], 8);
  codes[1] = 0x09;  // 2^-6 x 1.125: 0.0703 steps, rounds to 0
  Fp8GroupToInt16(codes, 1.0f, q);
  EXPECT_EQ(q[1], 0);
  codes[5] = 0xff;
  EXPECT_TRUE(std::isnan(Fp8GroupToInt16(codes, 1.0f, q)));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], 0);
}

// FP8 weights on the int16 GEMM (kInt16Prefill, what --activations int16+int16 gives them):
// the reference's bits for every token (both builds where the CPU runs them; products of
// 512+ tokens go in chunks of 512), close to the exact product (the weights within 2^-12 of
// their group's largest, the activations within 2^-16), and decode-sized products exact. A
// NaN code makes its row's outputs NaN; blocks that split a group keep the exact kernels.
TEST(Int16GemmTest, Fp8GivesTheReferenceBits) {
  if (Int16GemmLanes() == 0) GTEST_SKIP() << "the portable kernels: no int16 GEMM";
  std::mt19937 rng(43);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct C {
    int64_t rows, cols;
    bool checkpoint;
  };
  for (const C c : std::vector<C>{{37, 800, false}, {25, 256, true}, {12, 32, false}, {140, 384, true}}) {
    Fp8 m = MakeFp8(c.rows, c.cols, c.checkpoint, rng);
    for (int64_t n : {9, 17, 45, 131, 600}) {
      if (n == 600 && c.rows * c.cols > 100000) continue;
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      const Int16Input in = Quantize(x, n, c.cols);
      std::vector<float> ref(static_cast<size_t>(n * c.rows)), got(ref.size(), -1.0f), exact(ref.size());
      ASSERT_TRUE(LinearInt16RowsReference(m.w, in.a, ref.data(), 0, c.rows));
      m.w.activations = ActivationMode::kExact;
      Linear(m.w, x.data(), n, exact.data());
      m.w.activations = ActivationMode::kInt16Prefill;
      ASSERT_TRUE(UsesInt16Gemm(m.w, n));
      Linear(m.w, x.data(), n, got.data());
      ASSERT_EQ(got, ref) << c.rows << "x" << c.cols << " n=" << n;
      float range = 0.0f, err = 0.0f;
      for (size_t i = 0; i < got.size(); ++i)
        range = std::max(range, std::fabs(exact[i])), err = std::max(err, std::fabs(got[i] - exact[i]));
      EXPECT_LT(err, 1e-3f * range) << c.rows << "x" << c.cols << " n=" << n << ": int16 against exact";
      for (bool wide : {false, true}) {
        if (wide && !(Cpu().has_avx512() && Cpu().avx512_vnni)) continue;
        if (n > 128) continue;
        const int64_t lanes = wide ? 16 : 8, ntp = (n + lanes - 1) / lanes * lanes;
        std::vector<uint32_t> q(static_cast<size_t>(ntp * c.cols / 2));
        std::vector<float> d(static_cast<size_t>(ntp * c.cols / 32));
        PackTokensInt16Avx2(x.data(), n, c.cols, ntp, 0, ntp, q.data(), d.data());
        const Int16TokenTiles tiles{.q = q.data(), .d = d.data(), .ntp = ntp, .n = n};
        std::vector<float> direct(ref.size(), -1.0f);
        ASSERT_TRUE((wide ? GemmRowsInt16Avx512Vnni : GemmRowsInt16Avx2)(m.w, tiles, direct.data(), 0, c.rows));
        ASSERT_EQ(direct, ref) << (wide ? "avx512vnni " : "avx2 ") << c.rows << "x" << c.cols << " n=" << n;
      }
      // Decode-sized products stay exact.
      std::vector<float> one(static_cast<size_t>(c.rows)), one_exact(one.size());
      Linear(m.w, x.data(), 1, one.data());
      m.w.activations = ActivationMode::kExact;
      Linear(m.w, x.data(), 1, one_exact.data());
      EXPECT_EQ(one, one_exact);
    }
  }
  Fp8 m = MakeFp8(20, 160, false, rng);
  m.codes[5 * 160 + 70] = 0x7f;  // row 5, third group
  m.w.activations = ActivationMode::kInt16Prefill;
  const int64_t n = 12;
  std::vector<float> x(static_cast<size_t>(n * 160)), got(static_cast<size_t>(n * 20)), ref(got.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.29f * static_cast<float>(i));
  const Int16Input in = Quantize(x, n, 160);
  ASSERT_TRUE(LinearInt16RowsReference(m.w, in.a, ref.data(), 0, 20));
  Linear(m.w, x.data(), n, got.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < 20; ++r) {
      if (r == 5) {
        ASSERT_TRUE(std::isnan(got[t * 20 + r])) << t;
      } else {
        ASSERT_EQ(got[t * 20 + r], ref[t * 20 + r]) << t << " " << r;
      }
    }
  m.w.block_cols = 48;
  EXPECT_FALSE(UsesInt16Gemm(m.w, 40));
  m.w.block_cols = 128;
  EXPECT_TRUE(UsesInt16Gemm(m.w, 40));
  EXPECT_FALSE(UsesInt16Gemm(m.w, kMaxGemvTokens));
  Q8 q8w = MakeQ8(8, 64, rng);
  q8w.w.activations = ActivationMode::kInt16Prefill;  // the FP8 mode on q8 weights: exact kernels
  EXPECT_FALSE(UsesInt16Gemm(q8w.w, 40));
}

}  // namespace
}  // namespace m2
