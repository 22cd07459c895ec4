// Every Linear kernel (portable reference, AVX2, AVX-512; GEMV and GEMM paths; every
// weight format) against a double-precision scalar computation on the exact weight
// values. Tolerance from the data: an fp32 sum of K products, in any order, is within
// K * eps * sum_j |x_j w_j| of the exact sum (the classic recursive-summation bound);
// the decode of a weight is exact, so that is the whole error budget.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <algorithm>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/linear_bf16.h"

namespace m2 {
namespace {

struct Case {
  WeightFormat format;
  int64_t rows, cols;
  // FP8 codes drawn as a checkpoint's are (GaussianFp8Codes: zero and subnormal codes
  // rare), with some 64-byte lines of zero and subnormal codes among them; otherwise
  // uniform over the codes (a zero or subnormal in 1 of 16).
  bool checkpoint_codes = false;
};

struct Weight {
  LinearWeight w;
  std::vector<uint8_t> data;
  std::vector<float> fp8_scale;
  std::vector<uint16_t> q_scale;
  std::vector<float> exact;  // the value every stored element stands for
};

Weight Make(const Case& c, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Weight m;
  LinearWeight& w = m.w;
  w.format = c.format;
  w.rows = c.rows;
  w.cols = c.cols;
  const int64_t n = c.rows * c.cols;
  m.exact.resize(static_cast<size_t>(n));
  const auto set16 = [&](int64_t k, uint16_t v) { std::memcpy(&m.data[k * 2], &v, 2); };
  switch (c.format) {
    case WeightFormat::kF32:
      m.data.resize(n * 4);
      for (int64_t k = 0; k < n; ++k) {
        m.exact[k] = nd(rng);
        std::memcpy(&m.data[k * 4], &m.exact[k], 4);
      }
      break;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      m.data.resize(n * 2);
      for (int64_t k = 0; k < n; ++k) {
        const float v = nd(rng);
        const uint16_t h = c.format == WeightFormat::kBF16 ? F32ToBf16(v) : F32ToF16(v);
        set16(k, h);
        m.exact[k] = c.format == WeightFormat::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
      }
      break;
    case WeightFormat::kFp8Block: {
      m.data.resize(n);
      m.fp8_scale.resize(static_cast<size_t>(w.scale_rows() * w.scale_cols()));
      for (auto& s : m.fp8_scale) s = std::exp(nd(rng));  // a different scale in every block
      static const std::vector<uint8_t> codes = GaussianFp8Codes(100.0f);
      for (int64_t i = 0; i < c.rows; ++i)
        for (int64_t j = 0; j < c.cols; ++j) {
          uint8_t q;
          if (!c.checkpoint_codes) {
            q = static_cast<uint8_t>(rng() & 0xff);
            if ((q & 0x7f) == 0x7f) q ^= 1;  // no NaN codes in real checkpoints
          } else {
            q = codes[rng() & 0xffff];
            // Every third row: its second 64-byte line all zero and subnormal codes, and
            // one subnormal in its fourth (so that a kernel which treats such lines apart,
            // as an integer decode to fp32 would have to on Intel, is tested on them).
            if (i % 3 == 0 && j >= 64 && j < 128) q = static_cast<uint8_t>((j % 8) | (j % 16 < 8 ? 0 : 0x80));
            if (i % 3 == 0 && j == 200) q = 0x83;
          }
          m.data[i * c.cols + j] = q;
          m.exact[i * c.cols + j] = Fp8E4M3ToF32(q) * m.fp8_scale[(i / 128) * w.scale_cols() + j / 128];
        }
      w.scale = m.fp8_scale.data();
      break;
    }
    case WeightFormat::kQ8:
    case WeightFormat::kQ4: {
      const bool q4 = c.format == WeightFormat::kQ4;
      m.data.assign(q4 ? n / 2 : n, 0);
      m.q_scale.resize(static_cast<size_t>(c.rows * (c.cols / 32)));
      for (auto& s : m.q_scale) s = F32ToF16(0.01f + std::fabs(nd(rng)) * 0.05f);
      for (int64_t i = 0; i < c.rows; ++i)
        for (int64_t j = 0; j < c.cols; ++j) {
          const float s = F16ToF32(m.q_scale[i * (c.cols / 32) + j / 32]);
          if (q4) {
            const int u = static_cast<int>(rng() % 16);
            const int64_t byte = i * (c.cols / 2) + (j / 32) * 16 + (j % 16);
            m.data[byte] |= static_cast<uint8_t>((j % 32) < 16 ? u : u << 4);
            m.exact[i * c.cols + j] = static_cast<float>(u - 8) * s;
          } else {
            const int8_t q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
            m.data[i * c.cols + j] = static_cast<uint8_t>(q);
            m.exact[i * c.cols + j] = static_cast<float>(q) * s;
          }
        }
      w.scale = m.q_scale.data();
      break;
    }
  }
  w.data = m.data.data();
  return m;
}

using Kernel = std::function<void(const LinearWeight&, const float*, int64_t, float*)>;

void Check(const char* kernel_name, const Kernel& kernel) {
  const std::vector<Case> cases = {
      {WeightFormat::kF32, 7, 33},     {WeightFormat::kBF16, 40, 96},  {WeightFormat::kF16, 9, 40},
      {WeightFormat::kFp8Block, 200, 160},  // partial 128x128 blocks on both axes
      {WeightFormat::kFp8Block, 70, 300},   {WeightFormat::kQ8, 50, 64}, {WeightFormat::kQ4, 37, 96},
      {WeightFormat::kQ8, 19, 544}, {WeightFormat::kQ4, 21, 1056},  // scales in chunks of 16 groups plus a rest
      {WeightFormat::kBF16, 3, 5},
      // Small-batch kernel (3-8 tokens): blocks of 64 rows, chunks of 512 columns, a tail.
      {WeightFormat::kFp8Block, 130, 1100}, {WeightFormat::kBF16, 70, 1030},
      // FP8 codes as in checkpoints (lines of zero / subnormal codes among them), whole
      // 64-byte lines, a block wider than the matrix (192 columns: blocks of 128 and 64).
      {WeightFormat::kFp8Block, 37, 1088, true}, {WeightFormat::kFp8Block, 19, 192, true},
      {WeightFormat::kFp8Block, 9, 64, true},
  };
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& c : cases) {
    const Weight m = Make(c, rng);
    for (int64_t n : {1, 2, 3, 4, 5, 8, 12, 13, 19, 36, 40}) {  // GEMV sizes, GEMM with token tails (19, 36: GEMM + GEMV rest)
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      std::vector<float> y(static_cast<size_t>(n * c.rows), NAN);
      kernel(m.w, x.data(), n, y.data());
      const double eps = std::ldexp(1.0, -24);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < c.rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t j = 0; j < c.cols; ++j) {
            const double p = static_cast<double>(x[t * c.cols + j]) * m.exact[r * c.cols + j];
            ref += p;
            mag += std::fabs(p);
          }
          ASSERT_LE(std::fabs(y[t * c.rows + r] - ref), c.cols * eps * mag + 1e-30)
              << kernel_name << " " << WeightFormatName(c.format) << " " << c.rows << "x" << c.cols << " n=" << n
              << " token " << t << " row " << r;
        }
      }
    }
    std::vector<float> row(static_cast<size_t>(c.cols));  // DequantizeRow is exact
    DequantizeRow(m.w, c.rows - 1, row.data());
    for (int64_t j = 0; j < c.cols; ++j) ASSERT_EQ(row[j], m.exact[(c.rows - 1) * c.cols + j]);
  }
}

TEST(LinearTest, ReferenceKernel) { Check("reference", LinearReference); }

TEST(LinearTest, DispatchedKernelWithThreads) { Check(IsaName(ActiveIsa()), Linear); }

TEST(LinearTest, Avx2Kernels) {
  if (!Cpu().has_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  Check("avx2", [](const LinearWeight& w, const float* x, int64_t n, float* y) {
    ASSERT_TRUE(LinearRowsAvx2(w, x, n, y, 0, w.rows));
  });
}

TEST(LinearTest, Avx512Kernels) {
  if (!Cpu().has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  Check("avx512", [](const LinearWeight& w, const float* x, int64_t n, float* y) {
    ASSERT_TRUE(LinearRowsAvx512(w, x, n, y, 0, w.rows));
  });
}

TEST(LinearTest, RowRangesComposeToTheWholeMatrix) {
  if (!Cpu().has_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  std::mt19937 rng(7);
  const Weight m = Make({WeightFormat::kFp8Block, 100, 256}, rng);
  std::vector<float> x(8 * 256, 0.5f), whole(8 * 100), parts(8 * 100);
  ASSERT_TRUE(LinearRowsAvx2(m.w, x.data(), 8, whole.data(), 0, 100));
  ASSERT_TRUE(LinearRowsAvx2(m.w, x.data(), 8, parts.data(), 0, 32));
  ASSERT_TRUE(LinearRowsAvx2(m.w, x.data(), 8, parts.data(), 32, 45));
  ASSERT_TRUE(LinearRowsAvx2(m.w, x.data(), 8, parts.data(), 45, 100));
  EXPECT_EQ(whole, parts);
}

// The one- and two-token FP8 decode kernels take one of two routes: weights as value x
// 2^-120 (integer operations) against x x 2^112 when every |x| < 2^15, else weights as
// value / 256 (via fp16) against x. Both form the same products, so they must give the
// same bits: x with a largest |x| of exactly 2^15 takes the second route, x / 2 the first,
// and every product, sum and result then halves exactly. The weights include every fp8
// code but NaN (subnormals, zeros of both signs), a scale per block.
TEST(LinearTest, Fp8DecodeRoutesGiveTheSameBits) {
  std::mt19937 rng(31);
  Weight m = Make({WeightFormat::kFp8Block, 40, 1088}, rng);
  for (int64_t j = 0; j < 254; ++j) m.data[static_cast<size_t>(j * 3 % m.data.size())] = static_cast<uint8_t>(j < 127 ? j : j + 1);
  for (int64_t n : {1, 2}) {
    std::vector<float> big(static_cast<size_t>(n * 1088));
    for (size_t i = 0; i < big.size(); ++i) big[i] = 300.0f * std::sin(0.37f * static_cast<float>(i));
    big[77] = 32768.0f;  // 2^15: the fp16 route
    std::vector<float> half(big.size());
    for (size_t i = 0; i < big.size(); ++i) half[i] = big[i] * 0.5f;
    for (bool avx512 : {false, true}) {
      if (avx512 ? !Cpu().has_avx512() : !Cpu().has_avx2()) continue;
      auto run = avx512 ? LinearRowsAvx512 : LinearRowsAvx2;
      std::vector<float> yb(static_cast<size_t>(n * 40)), yh(yb.size());
      ASSERT_TRUE(run(m.w, big.data(), n, yb.data(), 0, 40));
      ASSERT_TRUE(run(m.w, half.data(), n, yh.data(), 0, 40));
      for (size_t i = 0; i < yb.size(); ++i)
        ASSERT_EQ(yh[i], yb[i] * 0.5f) << "n=" << n << " i=" << i << (avx512 ? " avx512" : " avx2");
      std::vector<float> ref(yb.size());
      LinearReference(m.w, half.data(), n, ref.data());
      for (size_t i = 0; i < yb.size(); ++i) ASSERT_NEAR(yh[i], ref[i], 1e-3f * (1.0f + std::fabs(ref[i])));
    }
  }
}

// The same products in the same order whatever the route: x beyond the kernel's 64 KiB stack
// copy (two tokens of 8320 columns) is sorted into even- and odd-numbered values as it is
// loaded and meets weights decoded via fp16; one token of it is copied, sorted, scaled and
// meets the integer decode. Token 0's results must be the same bits either way.
TEST(LinearTest, Fp8DecodeGivesTheSameBitsWithXCopiedOrNot) {
  std::mt19937 rng(37);
  const Weight m = Make({WeightFormat::kFp8Block, 19, 8320}, rng);
  std::vector<float> x(2 * 8320);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 3.0f * std::sin(0.23f * static_cast<float>(i));
  for (bool avx512 : {false, true}) {
    if (avx512 ? !Cpu().has_avx512() : !Cpu().has_avx2()) continue;
    auto run = avx512 ? LinearRowsAvx512 : LinearRowsAvx2;
    std::vector<float> one(19), two(2 * 19);
    ASSERT_TRUE(run(m.w, x.data(), 1, one.data(), 0, 19));
    ASSERT_TRUE(run(m.w, x.data(), 2, two.data(), 0, 19));
    for (int r = 0; r < 19; ++r) ASSERT_EQ(one[r], two[r]) << "row " << r << (avx512 ? " avx512" : " avx2");
    std::vector<float> ref(2 * 19);
    LinearReference(m.w, x.data(), 2, ref.data());
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(two[i], ref[i], 1e-3f * (1.0f + std::fabs(ref[i])));
  }
}

// Intel's FP8 GEMV (the fp16 route always, codes in order, no byte shuffle): its own sums,
// so the same bits for x and x / 2 and for x copied or not, and the reference's values;
// run on any CPU through the test switch.
// One-token bf16 on Intel takes 6 (AVX-512) or 8 (AVX2) rows a pass instead of 4: the same
// bits, rows left over (23 = 3 x 6 + 5 = 2 x 8 + 7) and a column tail (1029) included. The
// wide passes are forced on and off, so any CPU checks them.
TEST(LinearTest, Bf16WideRowPassesGiveTheSameBits) {
  std::mt19937 rng(43);
  const Weight m = Make({WeightFormat::kBF16, 23, 1029}, rng);
  std::vector<float> x(1029);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.31f * static_cast<float>(i));
  std::vector<float> ref(23);
  LinearReference(m.w, x.data(), 1, ref.data());
  for (bool avx512 : {false, true}) {
    if (avx512 ? !Cpu().has_avx512() : !Cpu().has_avx2()) continue;
    auto run = avx512 ? LinearRowsAvx512 : LinearRowsAvx2;
    std::vector<float> narrow(23), wide(23);
    SetBf16GemvWideRowsForTesting(0);
    ASSERT_TRUE(run(m.w, x.data(), 1, narrow.data(), 0, 23));
    SetBf16GemvWideRowsForTesting(1);
    ASSERT_TRUE(run(m.w, x.data(), 1, wide.data(), 0, 23));
    SetBf16GemvWideRowsForTesting(-1);
    for (int r = 0; r < 23; ++r) {
      EXPECT_EQ(narrow[r], wide[r]) << "row " << r << (avx512 ? " avx512" : " avx2");
      EXPECT_NEAR(wide[r], ref[r], 1e-4f * (1.0f + std::fabs(ref[r]))) << "row " << r;
    }
  }
}

// One row a pass (DecodeOneRow, on by default on Zen 5) against each kernel's own count:
// the same bits for every format and activation mode the model uses in decode, odd row
// counts (passes of 2, 3, 4 rows leave some over), group counts that are not a multiple of
// 8 (the q4 tiles' tails), 1 to 5 tokens (one token everywhere, and the 512-bit q4 tiles at
// 2 to 4). Both settings are forced, so every CPU runs both paths of its kernels, each with
// both prefetches (RowPrefetch: the L1 + L2 one and the L2-only one) and, on the pool (from 3
// tokens, where the product is big enough to split), with the row chunks in order and spread.
TEST(LinearTest, OneRowDecodeGivesTheSameBits) {
  std::mt19937 rng(47);
  struct ModeCase {
    Case c;
    ActivationMode mode;
  };
  const std::vector<ModeCase> cases = {
      {{WeightFormat::kBF16, 23, 1029}, ActivationMode::kExact},
      {{WeightFormat::kBF16, 23, 1056}, ActivationMode::kBf16Prefill},
      {{WeightFormat::kF32, 23, 1029}, ActivationMode::kExact},
      {{WeightFormat::kFp8Block, 23, 1152}, ActivationMode::kExact},
      {{WeightFormat::kFp8Block, 23, 1152}, ActivationMode::kBf16Prefill},
      {{WeightFormat::kQ8, 23, 1056}, ActivationMode::kExact},
      {{WeightFormat::kQ8, 23, 1056}, ActivationMode::kInt16Decode},
      {{WeightFormat::kQ8, 23, 1056}, ActivationMode::kInt8Decode},
      {{WeightFormat::kQ4, 23, 1056}, ActivationMode::kExact},
      {{WeightFormat::kQ4, 23, 1056}, ActivationMode::kInt8DecodeInt8Prefill},
      {{WeightFormat::kQ4, 23, 3072}, ActivationMode::kInt8DecodeInt8Prefill}};
  for (const ModeCase& mc : cases) {
    Weight m = Make(mc.c, rng);
    m.w.activations = mc.mode;
    for (int64_t n = 1; n <= 5; ++n) {
      std::vector<float> x(static_cast<size_t>(n * mc.c.cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
      std::vector<float> own(static_cast<size_t>(n * mc.c.rows), -1.0f);
      SetDecodeOneRowForTesting(0);
      SetRowPrefetchForTesting(0);
      LinearOnThisThread(m.w, x.data(), n, own.data());
      for (size_t i = 0; i < own.size(); ++i) ASSERT_FALSE(std::isnan(own[i])) << i;
      // One row or the kernel's own count, each with either prefetch, on this thread; then
      // on the pool with the row chunks in order and spread.
      for (int setting = 0; setting < 5; ++setting) {
        std::vector<float> got(own.size(), -2.0f);
        SetDecodeOneRowForTesting(setting < 4 ? setting / 2 : -1);
        SetRowPrefetchForTesting(setting < 4 ? setting % 2 : -1);
        if (setting < 4) {
          LinearOnThisThread(m.w, x.data(), n, got.data());
          ASSERT_EQ(own, got) << WeightFormatName(mc.c.format) << " mode " << static_cast<int>(mc.mode) << " n=" << n
                              << " setting " << setting;
          continue;
        }
        for (int spread = 0; spread < 2; ++spread) {
          SetDecodeChunkOrderForTesting(spread);
          Linear(m.w, x.data(), n, got.data());
          ASSERT_EQ(own, got) << WeightFormatName(mc.c.format) << " mode " << static_cast<int>(mc.mode) << " n=" << n
                              << " on the pool, chunks " << (spread ? "spread" : "in order");
        }
        SetDecodeChunkOrderForTesting(-1);
      }
      SetDecodeOneRowForTesting(-1);
      SetRowPrefetchForTesting(-1);
    }
  }
}

TEST(LinearTest, Fp8DecodeInOrderOnIntel) {
  std::mt19937 rng(41);
  const Weight m = Make({WeightFormat::kFp8Block, 21, 8320}, rng);
  std::vector<float> x(2 * 8320);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 3.0f * std::sin(0.29f * static_cast<float>(i));
  std::vector<float> half(x.size());
  for (size_t i = 0; i < x.size(); ++i) half[i] = x[i] * 0.5f;
  std::vector<float> ref(2 * 21);
  LinearReference(m.w, x.data(), 2, ref.data());
  SetSubnormalsSlowForTesting(true);
  for (bool avx512 : {false, true}) {
    if (avx512 ? !Cpu().has_avx512() : !Cpu().has_avx2()) continue;
    auto run = avx512 ? LinearRowsAvx512 : LinearRowsAvx2;
    std::vector<float> one(21), two(2 * 21), two_half(2 * 21);
    ASSERT_TRUE(run(m.w, x.data(), 1, one.data(), 0, 21));
    ASSERT_TRUE(run(m.w, x.data(), 2, two.data(), 0, 21));
    ASSERT_TRUE(run(m.w, half.data(), 2, two_half.data(), 0, 21));
    for (int r = 0; r < 21; ++r) EXPECT_EQ(one[r], two[r]) << "row " << r << (avx512 ? " avx512" : " avx2");
    for (size_t i = 0; i < two.size(); ++i) {
      EXPECT_EQ(two_half[i], two[i] * 0.5f) << i << (avx512 ? " avx512" : " avx2");
      EXPECT_NEAR(two[i], ref[i], 1e-3f * (1.0f + std::fabs(ref[i]))) << i << (avx512 ? " avx512" : " avx2");
    }
  }
  SetSubnormalsSlowForTesting(false);
}

// Decode kernels take several rows per pass; a row's result must not depend on which rows
// share its pass (ranges that start and end anywhere), for every format and token count.
TEST(LinearTest, GemvRowRangesComposeToTheWholeMatrix) {
  std::mt19937 rng(11);
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block, WeightFormat::kQ8, WeightFormat::kQ4}) {
    const Weight m = Make({f, 23, 1088}, rng);  // 1088 columns: chunks of 512 and a rest
    for (int64_t n = 1; n <= 8; ++n) {
      std::vector<float> x(static_cast<size_t>(n * 1088));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
      for (bool avx512 : {false, true}) {
        if (avx512 ? !Cpu().has_avx512() : !Cpu().has_avx2()) continue;
        auto run = avx512 ? LinearRowsAvx512 : LinearRowsAvx2;
        std::vector<float> whole(static_cast<size_t>(n * 23)), parts(whole.size());
        ASSERT_TRUE(run(m.w, x.data(), n, whole.data(), 0, 23));
        ASSERT_TRUE(run(m.w, x.data(), n, parts.data(), 0, 5));
        ASSERT_TRUE(run(m.w, x.data(), n, parts.data(), 5, 6));
        ASSERT_TRUE(run(m.w, x.data(), n, parts.data(), 6, 17));
        ASSERT_TRUE(run(m.w, x.data(), n, parts.data(), 17, 23));
        EXPECT_EQ(whole, parts) << WeightFormatName(f) << " n=" << n << (avx512 ? " avx512" : " avx2");
      }
    }
  }
}

// Several products on one input (LinearGroupOnPool: attention's q, k and v) give the same
// bits as one LinearOnPool each: in decode steps, where one pool job runs the rows of all of
// them (row counts that are not multiples of the 16-row grain, so chunks cut across the
// weights' boundaries; one shared preparation of the input, and a group of two kinds that
// each need their own), one row a pass and each kernel's own count, chunks in order and
// spread; and where the group falls back to one product each (exact activations, a prefill).
// Each mode only where the active kernels run it, as the model sets them (bf16 activations
// need AVX-512 BF16; int8 prefill an int8 GEMM): decode steps of 1 to 5 tokens, and 20
// tokens with exact activations.
TEST(LinearTest, GroupOnOneInputGivesTheSameBitsAsOneProductEach) {
  std::mt19937 rng(53);
  struct GroupCase {
    WeightFormat a, b;  // the first weight's format, the other two's
    ActivationMode mode_a, mode_b;
  };
  std::vector<GroupCase> cases = {
      {WeightFormat::kQ4, WeightFormat::kQ4, ActivationMode::kInt8Decode, ActivationMode::kInt8Decode},
      {WeightFormat::kQ8, WeightFormat::kQ8, ActivationMode::kInt16Decode, ActivationMode::kInt16Decode},
      {WeightFormat::kQ4, WeightFormat::kQ8, ActivationMode::kInt8Decode, ActivationMode::kInt16Decode},
      {WeightFormat::kBF16, WeightFormat::kBF16, ActivationMode::kExact, ActivationMode::kExact}};
  if (Bf16GemmAvailable())
    cases.push_back({WeightFormat::kFp8Block, WeightFormat::kFp8Block, ActivationMode::kBf16Prefill, ActivationMode::kBf16Prefill});
  ThreadPool pool(3);
  constexpr int64_t kCols = 1152;
  const int64_t rows[3] = {70, 23, 41};
  for (const GroupCase& gc : cases) {
    std::vector<Weight> ms;
    for (int i = 0; i < 3; ++i) {
      ms.push_back(Make({i == 0 ? gc.a : gc.b, rows[i], kCols}, rng));
      ms.back().w.activations = i == 0 ? gc.mode_a : gc.mode_b;
    }
    for (int64_t n : {1, 2, 3, 5, 20}) {
      if (n > 5 && gc.mode_a != ActivationMode::kExact) continue;
      std::vector<float> x(static_cast<size_t>(n * kCols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.29f * static_cast<float>(i));
      for (int setting = 0; setting < 4; ++setting) {
        SetDecodeOneRowForTesting(setting / 2);
        SetDecodeChunkOrderForTesting(setting % 2);
        std::vector<float> each[3], group[3];
        const LinearWeight* ws[3];
        float* ys[3];
        for (int i = 0; i < 3; ++i) {
          each[i].assign(static_cast<size_t>(n * rows[i]), -1.0f);
          group[i].assign(each[i].size(), -2.0f);
          LinearOnPool(ms[static_cast<size_t>(i)].w, x.data(), n, each[i].data(), pool);
          ws[i] = &ms[static_cast<size_t>(i)].w;
          ys[i] = group[i].data();
        }
        LinearGroupOnPool(ws, ys, 3, x.data(), n, pool);
        for (int i = 0; i < 3; ++i) {
          for (float v : each[i]) ASSERT_FALSE(std::isnan(v));
          ASSERT_EQ(each[i], group[i]) << WeightFormatName(ws[i]->format) << " weight " << i << " n=" << n
                                       << " setting " << setting;
        }
      }
      SetDecodeOneRowForTesting(-1);
      SetDecodeChunkOrderForTesting(-1);
    }
  }
}

}  // namespace
}  // namespace m2

#include "kernels/quantize.h"

namespace m2 {
namespace {

// Quantize then dequantize: every value within half a step of its group's scale, and
// the kernels read the packed layout back exactly as DequantizeRow says.
TEST(QuantizeTest, RoundTripWithinHalfAStep) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  const int64_t rows = 5, cols = 96;
  std::vector<float> w(rows * cols);
  for (auto& v : w) v = nd(rng);
  w[7] = 0.5f;  // an outlier sets its group's scale
  for (WeightFormat f : {WeightFormat::kQ8, WeightFormat::kQ4}) {
    std::vector<uint8_t> data(f == WeightFormat::kQ8 ? rows * cols : rows * cols / 2);
    std::vector<uint16_t> scales(rows * cols / 32);
    for (int64_t r = 0; r < rows; ++r) {
      if (f == WeightFormat::kQ8)
        QuantizeRowQ8(&w[r * cols], cols, reinterpret_cast<int8_t*>(&data[r * cols]), &scales[r * cols / 32]);
      else
        QuantizeRowQ4(&w[r * cols], cols, &data[r * cols / 2], &scales[r * cols / 32]);
    }
    LinearWeight lw;
    lw.format = f;
    lw.rows = rows;
    lw.cols = cols;
    lw.data = data.data();
    lw.scale = scales.data();
    std::vector<float> back(cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(lw, r, back.data());
      for (int64_t j = 0; j < cols; ++j) {
        const float s = F16ToF32(scales[r * cols / 32 + j / 32]);
        ASSERT_LE(std::fabs(back[j] - w[r * cols + j]), 0.5f * s * 1.01f + 1e-7f)
            << WeightFormatName(f) << " row " << r << " col " << j;
      }
    }
  }
}

}  // namespace
}  // namespace m2

#include "kernels/linear_int8.h"

namespace m2 {
namespace {

struct Int8Input {
  std::vector<int8_t> q;
  std::vector<float> d, c;
  Int8Activations a;
};

Int8Input QuantizeForInt8(const std::vector<float>& x, int64_t n, int64_t cols) {
  Int8Input in;
  in.q.resize(static_cast<size_t>(n * cols));
  in.d.resize(static_cast<size_t>(n * cols / 32));
  in.c.resize(in.d.size());
  QuantizeActivationsInt8(x.data(), n, cols, in.q.data(), in.d.data(), in.c.data());
  in.a = {.q = in.q.data(), .d = in.d.data(), .c = in.c.data(), .n = n, .cols = cols};
  return in;
}

// Each value within half a step of its group's scale, the step max|x| / 127, the q4
// correction as documented; an all-zero group is exact; a group with a NaN or an infinity
// has a NaN scale.
TEST(Int8ActivationsTest, QuantizedWithinHalfAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 3, cols = 128;
  std::vector<float> x(n * cols);
  for (auto& v : x) v = nd(rng);
  x[40] = 50.0f;                                     // an outlier sets its group's step
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;         // token 0, group 2: all zero
  x[cols + 5] = std::numeric_limits<float>::quiet_NaN();  // token 1, group 0
  x[2 * cols + 100] = -std::numeric_limits<float>::infinity();  // token 2, group 3
  const Int8Input in = QuantizeForInt8(x, n, cols);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < cols / 32; ++g) {
      const int64_t k = t * 4 + g;
      if ((t == 1 && g == 0) || (t == 2 && g == 3)) {
        EXPECT_TRUE(std::isnan(in.d[k]) && std::isnan(in.c[k])) << t << " " << g;
        continue;
      }
      float amax = 0;
      int sum = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[t * cols + g * 32 + i]));
      EXPECT_FLOAT_EQ(in.d[k], amax / 127.0f);
      for (int i = 0; i < 32; ++i) {
        const int64_t j = t * cols + g * 32 + i;
        ASSERT_LE(std::abs(in.q[j]), 127);
        ASSERT_LE(std::fabs(in.q[j] * in.d[k] - x[j]), 0.5f * in.d[k] * 1.001f + 1e-30f) << j;
        sum += in.q[j];
      }
      EXPECT_FLOAT_EQ(in.c[k], -8.0f * in.d[k] * static_cast<float>(sum));
    }
  EXPECT_EQ(in.d[2], 0.0f);
  // The AVX2 quantizer gives the same bytes and scales (NaN where the scalar one has NaN).
  if (Cpu().has_avx2()) {
    std::vector<int8_t> q(in.q.size(), 99);
    std::vector<float> d(in.d.size()), c(in.c.size());
    QuantizeActivationsInt8Avx2(x.data(), n, cols, q.data(), d.data(), c.data());
    EXPECT_EQ(q, in.q);
    for (size_t k = 0; k < d.size(); ++k) {
      EXPECT_TRUE(d[k] == in.d[k] || (std::isnan(d[k]) && std::isnan(in.d[k]))) << k;
      EXPECT_TRUE(c[k] == in.c[k] || (std::isnan(c[k]) && std::isnan(in.c[k]))) << k;
    }
  }
}

// The x86 kernels against the portable one: the same integer dot per group, so only the
// fp32 summation order differs; and the VNNI builds against the AVX2 one, bit for bit
// (same int32 dots, same fp32 order). Every token count up to 9 (tiles of 4 and their
// rests), odd row counts, and column counts whose groups are not a multiple of 8 (the q4
// correction's rest). Each kernel runs where this CPU has its instructions.
void CheckInt8Kernel(Int8RowsFn kernel) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : std::vector<Case>{{WeightFormat::kQ8, 37, 96},
                                         {WeightFormat::kQ4, 37, 96},
                                         {WeightFormat::kQ8, 19, 544},
                                         {WeightFormat::kQ4, 40, 1056},
                                         {WeightFormat::kQ4, 3, 256}}) {
    const Weight m = Make(c, rng);
    for (int64_t n : {1, 2, 3, 4, 5, 7, 9, 21}) {
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      const Int8Input in = QuantizeForInt8(x, n, c.cols);
      std::vector<float> ref(static_cast<size_t>(n * c.rows)), got(ref.size(), -1.0f);
      ASSERT_TRUE(LinearInt8RowsReference(m.w, in.a, ref.data(), 0, c.rows));
      // Two row ranges: a row's result must not depend on which rows share its pass.
      ASSERT_TRUE(kernel(m.w, in.a, got.data(), 0, c.rows / 2 + 1));
      ASSERT_TRUE(kernel(m.w, in.a, got.data(), c.rows / 2 + 1, c.rows));
      if (kernel != LinearInt8RowsAvx2) {
        std::vector<float> avx2(ref.size());
        ASSERT_TRUE(LinearInt8RowsAvx2(m.w, in.a, avx2.data(), 0, c.rows));
        ASSERT_EQ(got, avx2) << Int8RowsKernelName(kernel) << " " << WeightFormatName(c.format) << " n=" << n;
      }
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < c.rows; ++r) {
          double mag = 0;  // sum of |w x| as quantized: the scale of the rounding error
          for (int64_t j = 0; j < c.cols; ++j)
            mag += std::fabs(m.exact[r * c.cols + j] * in.q[t * c.cols + j] * in.d[t * c.cols / 32 + j / 32]);
          const size_t k = static_cast<size_t>(t * c.rows + r);
          ASSERT_NEAR(got[k], ref[k], 4e-6 * mag + 1e-6)
              << Int8RowsKernelName(kernel) << " " << WeightFormatName(c.format) << " " << c.rows << "x" << c.cols << " n=" << n << " t=" << t << " r=" << r;
        }
    }
  }
}

TEST(Int8ActivationsTest, Avx2MatchesTheReference) {
  if (!Cpu().has_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  CheckInt8Kernel(LinearInt8RowsAvx2);
}

TEST(Int8ActivationsTest, Avx512VnniMatchesAvx2AndTheReference) {
  if (!Cpu().has_avx512() || !Cpu().avx512_vnni) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: " << Cpu().Describe();
  CheckInt8Kernel(LinearInt8RowsAvx512Vnni);
}

TEST(Int8ActivationsTest, AvxVnniMatchesAvx2AndTheReference) {
  if (!Cpu().has_avx2() || !Cpu().avx_vnni) GTEST_SKIP() << "this CPU has no AVX-VNNI: " << Cpu().Describe();
  CheckInt8Kernel(LinearInt8RowsAvxVnni);
}

// Which kernel each family runs: forcing avx2 on a bigger CPU runs plain AVX2.
TEST(Int8ActivationsTest, KernelChoice) {
  CpuFeatures all;
  all.avx2 = all.fma = all.f16c = all.avx512f = all.avx512bw = all.avx512vl = all.avx512_vnni = all.avx_vnni = true;
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernel(KernelIsa::kAvx512, all)), "avx512vnni");
  // (M2_KERNELS=avxvnni asks for AVX-VNNI in the avx2 family on such a CPU: base/cpu.h.)
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernel(KernelIsa::kAvx2, all)), AvxVnniAsked() ? "avxvnni" : "avx2");
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernel(KernelIsa::kPortable, all)), "reference");
  // Linear()'s choice: q8 at one or two tokens on Intel runs plain AVX2 (faster from memory
  // there), everything else the family's kernel.
  CpuFeatures intel = all;
  intel.intel = true;
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernelFor(KernelIsa::kAvx512, intel, WeightFormat::kQ8, 1)), "avx2");
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernelFor(KernelIsa::kAvx512, intel, WeightFormat::kQ8, 2)), "avx2");
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernelFor(KernelIsa::kAvx512, intel, WeightFormat::kQ8, 3)), "avx512vnni");
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernelFor(KernelIsa::kAvx512, intel, WeightFormat::kQ4, 1)), "avx512vnni");
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernelFor(KernelIsa::kPortable, intel, WeightFormat::kQ8, 1)), "reference");
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernelFor(KernelIsa::kAvx512, all, WeightFormat::kQ8, 1)), "avx512vnni");
  CpuFeatures client = all;  // AVX-VNNI without AVX-512
  client.avx512f = client.avx512bw = client.avx512vl = client.avx512_vnni = false;
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernel(KernelIsa::kAvx2, client)), "avxvnni");
  CpuFeatures older = all;  // AVX-512 without VNNI (Skylake-SP)
  older.avx512_vnni = older.avx_vnni = false;
  EXPECT_STREQ(Int8RowsKernelName(Int8RowsKernel(KernelIsa::kAvx512, older)), "avx2");
}

// Linear() with the flag: within the bound the quantization allows of the exact product,
// sum_j |w_j| * step_j / 2 (plus fp32 rounding), on every dispatched kernel and on the
// pool; a NaN in the input comes out as NaN.
TEST(Int8ActivationsTest, LinearWithTheFlagStaysWithinTheQuantizationBound) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : std::vector<Case>{{WeightFormat::kQ8, 300, 512}, {WeightFormat::kQ4, 300, 512}}) {
    Weight m = Make(c, rng);
    m.w.activations = ActivationMode::kInt8;
    for (int64_t n : {1, 3, 8, 40}) {
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      std::vector<float> y(static_cast<size_t>(n * c.rows));
      Linear(m.w, x.data(), n, y.data());
      for (int64_t t = 0; t < n; ++t) {
        std::vector<double> step(static_cast<size_t>(c.cols / 32));
        for (int64_t g = 0; g < c.cols / 32; ++g) {
          float amax = 0;
          for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[t * c.cols + g * 32 + i]));
          step[g] = amax / 127.0;
        }
        for (int64_t r = 0; r < c.rows; ++r) {
          long double exact = 0, bound = 0, mag = 0;
          for (int64_t j = 0; j < c.cols; ++j) {
            const double wj = m.exact[r * c.cols + j], xj = x[t * c.cols + j];
            exact += wj * xj;
            bound += std::fabs(wj) * step[j / 32] / 2;
            mag += std::fabs(wj * xj);
          }
          ASSERT_NEAR(y[t * c.rows + r], static_cast<double>(exact), static_cast<double>(bound + 1e-5 * mag))
              << WeightFormatName(c.format) << " n=" << n << " t=" << t << " r=" << r;
        }
      }
    }
    std::vector<float> x(static_cast<size_t>(c.cols), 0.5f), y(static_cast<size_t>(c.rows));
    x[33] = std::numeric_limits<float>::quiet_NaN();
    Linear(m.w, x.data(), 1, y.data());
    for (float v : y) ASSERT_TRUE(std::isnan(v));
  }
}

// kInt8Decode: int8 up to kMaxGemvTokens tokens (bit-identical to kInt8 there: a token's
// result does not depend on its batch), the exact fp32 kernels beyond.
TEST(Int8ActivationsTest, DecodeModeIsInt8UpToTheGemvLimitOnly) {
  std::mt19937 rng(17);
  Weight m = Make({WeightFormat::kQ4, 64, 256}, rng);
  for (int64_t n : {int64_t{1}, kMaxGemvTokens, kMaxGemvTokens + 1, int64_t{40}}) {
    std::vector<float> x(static_cast<size_t>(n * 256));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * static_cast<float>(i));
    std::vector<float> exact(static_cast<size_t>(n * 64)), int8(exact.size()), decode(exact.size()), one(64);
    m.w.activations = ActivationMode::kExact;
    Linear(m.w, x.data(), n, exact.data());
    m.w.activations = ActivationMode::kInt8;
    Linear(m.w, x.data(), n, int8.data());
    Linear(m.w, x.data() + (n - 1) * 256, 1, one.data());  // the last token alone
    EXPECT_TRUE(std::equal(one.begin(), one.end(), int8.end() - 64)) << "n=" << n;
    m.w.activations = ActivationMode::kInt8Decode;
    Linear(m.w, x.data(), n, decode.data());
    EXPECT_NE(exact, int8);
    EXPECT_EQ(decode, n <= kMaxGemvTokens ? int8 : exact) << "n=" << n;
  }
}

// The int8 prefill GEMM (kInt8DecodeInt8Prefill, more than kMaxGemvTokens tokens): the
// reference's bits for every token, whatever the batch: token counts across the 16-token
// vectors, the 32-token tiles and the 128-token chunks, row counts that leave partial
// panels, column counts with a partial 256-column chunk (and a single group); q8 codes
// including -128. Up to kMaxGemvTokens the mode is the int8 decode kernels' (kInt8Decode).
TEST(Int8GemmTest, GivesTheReferenceBitsForEveryToken) {
  if (Int8GemmFor(WeightFormat::kQ4) == Int8GemmKernel::kNone) GTEST_SKIP() << "the portable kernels: no int8 GEMM";
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : std::vector<Case>{{WeightFormat::kQ4, 37, 800},
                                         {WeightFormat::kQ8, 37, 800},
                                         {WeightFormat::kQ4, 12, 32},
                                         {WeightFormat::kQ8, 25, 256},
                                         {WeightFormat::kQ4, 300, 512}}) {
    if (Int8GemmFor(c.format) == Int8GemmKernel::kNone) continue;  // q8 without vpdpbusd
    Weight m = Make(c, rng);
    if (c.format == WeightFormat::kQ8) m.data[5] = 0x80;  // -128: w + 128 = 0 as the unsigned operand
    for (int64_t n : {9, 16, 17, 32, 45, 128, 131, 200}) {
      if (c.rows == 300 && n > 45) continue;
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      for (int64_t j = 0; j < c.cols; j += 7) x[static_cast<size_t>(j)] *= 40.0f;  // uneven group scales
      const Int8Input in = QuantizeForInt8(x, n, c.cols);
      std::vector<float> ref(static_cast<size_t>(n * c.rows)), got(ref.size(), -1.0f);
      ASSERT_TRUE(LinearInt8RowsReference(m.w, in.a, ref.data(), 0, c.rows));
      m.w.activations = ActivationMode::kInt8DecodeInt8Prefill;
      ASSERT_TRUE(UsesInt8Gemm(m.w, n));
      Linear(m.w, x.data(), n, got.data());
      ASSERT_EQ(got, ref) << WeightFormatName(c.format) << " " << c.rows << "x" << c.cols << " n=" << n;
      // The last token alone: the int8 decode kernel (checked against the reference above).
      std::vector<float> one(static_cast<size_t>(c.rows)), decode(one.size());
      Linear(m.w, x.data() + (n - 1) * c.cols, 1, one.data());
      m.w.activations = ActivationMode::kInt8Decode;
      Linear(m.w, x.data() + (n - 1) * c.cols, 1, decode.data());
      EXPECT_EQ(one, decode);
    }
  }
}

// Two weights on one input (the MoE's W1 and W3): the same bits as two products, whether
// the pair shares one quantization (both on the int8 GEMM, one format and width) or not
// (exact activations; different formats; n within the int8 decode kernel's reach), on the
// pool and on the calling thread.
TEST(LinearTest, PairGivesTheBitsOfTwoProducts) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct PairCase {
    Case a, b;
    ActivationMode mode;
  };
  std::vector<PairCase> cases = {
      {{WeightFormat::kQ4, 40, 256}, {WeightFormat::kQ4, 29, 256}, ActivationMode::kInt8DecodeInt8Prefill},
      {{WeightFormat::kQ8, 40, 256}, {WeightFormat::kQ8, 40, 256}, ActivationMode::kInt8DecodeInt8Prefill},
      {{WeightFormat::kQ8, 40, 256}, {WeightFormat::kQ4, 40, 256}, ActivationMode::kInt8DecodeInt8Prefill},
      {{WeightFormat::kFp8Block, 256, 256}, {WeightFormat::kFp8Block, 128, 256}, ActivationMode::kInt8Prefill},
      {{WeightFormat::kQ4, 40, 256}, {WeightFormat::kQ4, 29, 256}, ActivationMode::kExact}};
  ThreadPool pool(2);
  for (const PairCase& pc : cases) {
    const bool int8 = pc.mode != ActivationMode::kExact;
    if (int8 && (Int8GemmFor(pc.a.format) == Int8GemmKernel::kNone || Int8GemmFor(pc.b.format) == Int8GemmKernel::kNone))
      continue;  // the portable kernels: no int8 GEMM (the model never sets the mode there)
    Weight a = Make(pc.a, rng), b = Make(pc.b, rng);
    a.w.activations = b.w.activations = pc.mode;
    for (int64_t n : {1, 3, 20, 150}) {
      std::vector<float> x(static_cast<size_t>(n * pc.a.cols));
      for (auto& v : x) v = nd(rng);
      std::vector<float> ya(static_cast<size_t>(n * pc.a.rows)), yb(static_cast<size_t>(n * pc.b.rows));
      LinearOnPool(a.w, x.data(), n, ya.data(), pool);
      LinearOnPool(b.w, x.data(), n, yb.data(), pool);
      for (bool on_pool : {true, false}) {
        std::vector<float> pa(ya.size(), -1.0f), pb(yb.size(), -1.0f);
        if (on_pool) LinearPairOnPool(a.w, b.w, x.data(), n, pa.data(), pb.data(), pool);
        else LinearPairOnThisThread(a.w, b.w, x.data(), n, pa.data(), pb.data());
        EXPECT_EQ(pa, ya) << WeightFormatName(pc.a.format) << " n=" << n << " pool " << on_pool;
        EXPECT_EQ(pb, yb) << WeightFormatName(pc.b.format) << " n=" << n << " pool " << on_pool;
      }
    }
  }
}

}  // namespace
// Defined in int8_gemm_emulated.cpp: the AVX-VNNI build with an emulated vpdpbusd.
bool GemmRowsInt8AvxVnniEmulated(const LinearWeight& w, const Int8TokenTiles& x, float* y, int64_t r0, int64_t r1);
namespace {

// Every build called directly, whatever the active family: the AVX2 one (q8 by vpsignb, q4)
// and the AVX-VNNI one with an emulated vpdpbusd (q8, q4) on any AVX2 CPU, the real AVX-VNNI one
// and the AVX-512 VNNI one (q8, q4) where the CPU has them; their packings give the same
// tiles, and each GEMM the reference's bits, on split row ranges, with token counts that
// leave partial vectors (ntp padded to 8 or 16) and partial tiles.
TEST(Int8GemmTest, EachBuildGivesTheReferenceBits) {
  if (!Cpu().has_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  using GemmFn = bool (*)(const LinearWeight&, const Int8TokenTiles&, float*, int64_t, int64_t);
  struct Build {
    const char* name;
    bool runs, q8;
    bool wide;  // 16 lanes, the AVX-512 packing
    GemmFn gemm;
  };
  const Build builds[] = {
      {"avx2", true, true, false, GemmRowsInt8Avx2},
      {"avxvnni (emulated vpdpbusd)", true, true, false, GemmRowsInt8AvxVnniEmulated},
      {"avxvnni", Cpu().avx_vnni, true, false, GemmRowsInt8AvxVnni},
      {"avx512vnni", Cpu().has_avx512() && Cpu().avx512_vnni, true, true, GemmRowsInt8Avx512Vnni},
  };
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : std::vector<Case>{{WeightFormat::kQ4, 29, 544},
                                         {WeightFormat::kQ8, 29, 544},
                                         {WeightFormat::kFp8Block, 29, 544, /*checkpoint_codes=*/true}}) {
    Weight m = Make(c, rng);
    if (c.format == WeightFormat::kQ8) {
      m.data[3] = 0x80;  // -128: w + 128 = 0 as the unsigned operand
      // The largest pair sums AVX2's vpmaddubsw meets (2 x 128 x 127 with |w| and x's sign):
      // row 1's first group all -128, row 2's all +127, against a token whose first group
      // quantizes to +-127 throughout (below).
      for (int64_t k = 0; k < 32; ++k) m.data[static_cast<size_t>(c.cols + k)] = 0x80, m.data[static_cast<size_t>(2 * c.cols + k)] = 127;
    }
    for (int64_t n : {9, 24, 40, 67}) {
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      for (int64_t j = 0; j < c.cols; j += 5) x[static_cast<size_t>(j)] *= 60.0f;  // |q| up to 127 in every group
      for (int64_t k = 0; k < 32; ++k) x[static_cast<size_t>(k)] = k % 3 == 0 ? -1.0f : 1.0f;  // q = +-127
      const Int8Input in = QuantizeForInt8(x, n, c.cols);
      std::vector<float> ref(static_cast<size_t>(n * c.rows));
      ASSERT_TRUE(LinearInt8RowsReference(m.w, in.a, ref.data(), 0, c.rows));
      const int64_t G = c.cols / 32;
      std::vector<uint32_t> q8_lanes, q16_lanes;
      for (const Build& b : builds) {
        if (!b.runs) continue;
        const int64_t lanes = b.wide ? 16 : 8, ntp = (n + lanes - 1) / lanes * lanes;
        std::vector<uint32_t>& q = b.wide ? q16_lanes : q8_lanes;
        q.assign(static_cast<size_t>(ntp * c.cols / 4), 7);
        std::vector<int32_t> s(static_cast<size_t>(ntp * G), 7);
        std::vector<float> d(s.size(), 7.0f);
        const auto pack = b.wide ? PackTokensInt8Avx512 : PackTokensInt8Avx2;
        pack(x.data(), n, c.cols, ntp, 0, ntp / 2 + 1, q.data(), s.data(), d.data());
        pack(x.data(), n, c.cols, ntp, ntp / 2 + 1, ntp, q.data(), s.data(), d.data());
        const Int8TokenTiles tiles{.q = q.data(), .negsum = s.data(), .d = d.data(), .ntp = ntp, .n = n};
        std::vector<float> y(ref.size(), -1.0f);
        const bool ok = b.gemm(m.w, tiles, y.data(), 0, 13) && b.gemm(m.w, tiles, y.data(), 13, c.rows);
        const bool handles = c.format == WeightFormat::kQ4 || b.q8;
        ASSERT_EQ(ok, handles) << b.name << " " << WeightFormatName(c.format) << ": which formats the build takes";
        if (ok) { EXPECT_EQ(y, ref) << b.name << " " << WeightFormatName(c.format) << " n=" << n; }
      }
      if (n % 16 == 0 && !q16_lanes.empty()) { EXPECT_EQ(q8_lanes, q16_lanes) << "the two packings, n=" << n; }
    }
  }
}

// FP8 weights on the int8 GEMM (kInt8Prefill, what --activations int8+int8 gives them):
// each 32-column group of a row decoded and requantized to int8 with an fp32 scale, then as
// q8. The reference's bits for every token and batch (partial 128-column blocks, a
// single-group matrix, checkpoint-like codes with lines of zero and subnormal codes, a
// different block scale per block), within a small part of the exact product's range, and
// decode-sized products exact.
TEST(Int8GemmTest, Fp8RequantizedGivesTheReferenceBits) {
  if (Int8GemmFor(WeightFormat::kFp8Block) == Int8GemmKernel::kNone) GTEST_SKIP() << "the portable kernels: no int8 GEMM";
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : std::vector<Case>{{WeightFormat::kFp8Block, 37, 800},
                                         {WeightFormat::kFp8Block, 25, 256, /*checkpoint_codes=*/true},
                                         {WeightFormat::kFp8Block, 12, 32},
                                         {WeightFormat::kFp8Block, 140, 384, /*checkpoint_codes=*/true}}) {
    Weight m = Make(c, rng);
    for (int64_t n : {9, 17, 45, 131, 600}) {  // 600: FP8 products go in chunks of 512 tokens
      if (n == 600 && c.rows * c.cols > 100000) continue;
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      const Int8Input in = QuantizeForInt8(x, n, c.cols);
      std::vector<float> ref(static_cast<size_t>(n * c.rows)), got(ref.size(), -1.0f), exact(ref.size());
      ASSERT_TRUE(LinearInt8RowsReference(m.w, in.a, ref.data(), 0, c.rows));
      m.w.activations = ActivationMode::kExact;
      Linear(m.w, x.data(), n, exact.data());
      m.w.activations = ActivationMode::kInt8Prefill;
      ASSERT_TRUE(UsesInt8Gemm(m.w, n));
      Linear(m.w, x.data(), n, got.data());
      ASSERT_EQ(got, ref) << c.rows << "x" << c.cols << " n=" << n;
      float range = 0.0f, err = 0.0f;
      for (size_t i = 0; i < got.size(); ++i) range = std::max(range, std::fabs(exact[i])), err = std::max(err, std::fabs(got[i] - exact[i]));
      EXPECT_LT(err, 0.03f * range) << c.rows << "x" << c.cols << " n=" << n << ": int8 against exact";
      EXPECT_GT(err, 0.0f);
      // Decode-sized products stay exact.
      std::vector<float> one(static_cast<size_t>(c.rows)), one_exact(one.size());
      Linear(m.w, x.data(), 1, one.data());
      m.w.activations = ActivationMode::kExact;
      Linear(m.w, x.data(), 1, one_exact.data());
      EXPECT_EQ(one, one_exact);
    }
  }
}

// A group's requantization by hand: codes 1.0, -0.5, 448 (the largest), a subnormal and
// zeros, block scale 2: d = 448 / 127 x 2 rounded, q = round(v x 127 / 448); a NaN code
// makes the group's scale NaN (its q zero), so a row holding one gives NaN outputs.
TEST(Int8GemmTest, Fp8GroupRequantizedByHand) {
  uint8_t codes[32] = {};
  codes[0] = 0x38, codes[1] = 0xb0, codes[2] = 0x7e, codes[3] = 0x01, codes[4] = 0xd0;  // 1, -0.5, 448, 2^-9, -8
  int8_t q[32];
  const float d = QuantizeFp8GroupInt8(codes, 2.0f, q);
  EXPECT_EQ(d, (448.0f / 127.0f) * 2.0f);
  EXPECT_EQ(q[0], 0);  // 127 / 448 = 0.28
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[2], 127);
  EXPECT_EQ(q[3], 0);
  EXPECT_EQ(q[4], -2);  // -8 x 127 / 448 = -2.27
  codes[7] = 0xff;
  EXPECT_TRUE(std::isnan(QuantizeFp8GroupInt8(codes, 2.0f, q)));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], 0);

  if (Int8GemmFor(WeightFormat::kFp8Block) == Int8GemmKernel::kNone) return;
  std::mt19937 rng(37);
  Weight m = Make({WeightFormat::kFp8Block, 20, 160}, rng);
  m.data[5 * 160 + 70] = 0x7f;  // row 5, third group
  const int64_t n = 12;
  std::vector<float> x(static_cast<size_t>(n * 160));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.29f * static_cast<float>(i));
  const Int8Input in = QuantizeForInt8(x, n, 160);
  std::vector<float> ref(static_cast<size_t>(n * 20)), got(ref.size());
  ASSERT_TRUE(LinearInt8RowsReference(m.w, in.a, ref.data(), 0, 20));
  m.w.activations = ActivationMode::kInt8Prefill;
  Linear(m.w, x.data(), n, got.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < 20; ++r) {
      if (r == 5) ASSERT_TRUE(std::isnan(got[t * 20 + r])) << t;
      else ASSERT_EQ(got[t * 20 + r], ref[t * 20 + r]) << t << " " << r;
    }
  // Blocks that split a group keep the exact kernels; so do other formats under this mode.
  m.w.block_cols = 48;
  EXPECT_FALSE(UsesInt8Gemm(m.w, 40));
  m.w.block_cols = 128;
  EXPECT_TRUE(UsesInt8Gemm(m.w, 40));
  Weight q8w = Make({WeightFormat::kQ8, 8, 64}, rng);
  q8w.w.activations = ActivationMode::kInt8Prefill;
  EXPECT_FALSE(UsesInt8Gemm(q8w.w, 40));
}

// One token with a NaN (or an infinity) among tokens without: its outputs are NaN, the
// others' are still the reference's; the mode is refused by UsesInt8Gemm for other formats
// and for decode-sized products.
TEST(Int8GemmTest, NanInNanOutAndOnlyForPrefillOfQ8Q4) {
  if (Int8GemmFor(WeightFormat::kQ4) == Int8GemmKernel::kNone) GTEST_SKIP() << "the portable kernels: no int8 GEMM";
  std::mt19937 rng(23);
  Weight m = Make({WeightFormat::kQ4, 24, 96}, rng);
  const int64_t n = 20;
  std::vector<float> x(static_cast<size_t>(n * 96), 0.25f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  x[5 * 96 + 40] = std::numeric_limits<float>::quiet_NaN();
  x[11 * 96 + 3] = std::numeric_limits<float>::infinity();
  const Int8Input in = QuantizeForInt8(x, n, 96);
  std::vector<float> ref(static_cast<size_t>(n * 24)), got(ref.size());
  ASSERT_TRUE(LinearInt8RowsReference(m.w, in.a, ref.data(), 0, 24));
  m.w.activations = ActivationMode::kInt8DecodeInt8Prefill;
  Linear(m.w, x.data(), n, got.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < 24; ++r) {
      const float v = got[t * 24 + r];
      if (t == 5 || t == 11) ASSERT_TRUE(std::isnan(v)) << t << " " << r;
      else ASSERT_EQ(v, ref[t * 24 + r]) << t << " " << r;
    }
  EXPECT_FALSE(UsesInt8Gemm(m.w, kMaxGemvTokens));
  m.w.activations = ActivationMode::kInt8;
  EXPECT_FALSE(UsesInt8Gemm(m.w, 40));
  Weight b = Make({WeightFormat::kBF16, 8, 64}, rng);
  b.w.activations = ActivationMode::kInt8DecodeInt8Prefill;
  EXPECT_FALSE(UsesInt8Gemm(b.w, 40));
}

}  // namespace
}  // namespace m2

#include "kernels/linear_bf16.h"

namespace m2 {
namespace {

float Bf16Value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The rounding vcvtneps2bf16 does: to nearest, ties to even; subnormals to signed zero;
// infinities kept; NaN stays NaN.
TEST(Bf16ActivationsTest, RoundToBf16) {
  EXPECT_EQ(RoundToBf16(1.0f), 0x3f80);
  EXPECT_EQ(RoundToBf16(-2.5f), 0xc020);
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 256), 0x3f80);                  // a tie: to the even 1.0
  EXPECT_EQ(RoundToBf16(1.0f + 3.0f / 256), 0x3f82);                  // a tie: to the even 1 + 2/128
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);   // above the tie: up
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(RoundToBf16(-1e-40f), 0x8000);
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up past the largest bf16
  EXPECT_TRUE(std::isnan(Bf16Value(RoundToBf16(std::numeric_limits<float>::quiet_NaN()))));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  for (int i = 0; i < 1000; ++i) {  // within half a bf16 step
    const float f = nd(rng), r = Bf16Value(RoundToBf16(f));
    ASSERT_LE(std::fabs(r - f), std::fabs(f) * (1.0f / 256) + 1e-30f) << f;
  }
}

// Linear() with kBf16Prefill: for more than kMaxGemvTokens tokens, and for FP8 decode steps
// where the bf16 decode kernel runs (UsesBf16Gemv: AVX-512 BF16 + VBMI, 64-column multiples),
// the result is the exact product of the weights with x rounded to bf16 (up to fp32
// summation: the same bound as the exact kernels' tests, on the rounded x), and not the
// fp32 product; other decode steps are the exact path, bit for bit. Shapes: rows not a multiple of the
// 12-row panel, columns not a multiple of the 256-column chunk, partial FP8 blocks and an
// FP8 tail shorter than 32, token counts with tiles of 16 and 32 and chunks of 128.
TEST(Bf16ActivationsTest, PrefillIsTheProductWithBf16RoundedActivations) {
  if (!Bf16GemmAvailable()) GTEST_SKIP() << "no AVX-512 BF16 here (or M2_KERNELS forces another family): " << Cpu().Describe();
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int bf16_decodes = 0;
  for (const Case& c : std::vector<Case>{{WeightFormat::kBF16, 37, 96},
                                         {WeightFormat::kBF16, 50, 600},
                                         {WeightFormat::kFp8Block, 200, 328},
                                         {WeightFormat::kFp8Block, 13, 264},
                                         {WeightFormat::kQ8, 29, 352},
                                         {WeightFormat::kQ4, 40, 544},
                                         // shapes the AMX GEMM takes, where the CPU has it:
                                         // 32- and 16-row panels, a 7-row rest, a partial
                                         // FP8 block of 64 columns, 16- and 32-token tiles
                                         {WeightFormat::kBF16, 55, 256},
                                         {WeightFormat::kFp8Block, 183, 320}}) {
    Weight m = Make(c, rng);
    for (int64_t n : {int64_t{1}, kMaxGemvTokens, int64_t{9}, int64_t{16}, int64_t{24}, int64_t{33}, int64_t{44}, int64_t{67},
                      int64_t{150}}) {
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      std::vector<float> exact(static_cast<size_t>(n * c.rows)), got(exact.size());
      m.w.activations = ActivationMode::kExact;
      Linear(m.w, x.data(), n, exact.data());
      m.w.activations = ActivationMode::kBf16Prefill;
      Linear(m.w, x.data(), n, got.data());
      if (n <= kMaxGemvTokens && !UsesBf16Gemv(m.w, n)) {
        EXPECT_EQ(got, exact) << "n=" << n;
        continue;
      }
      EXPECT_NE(got, exact) << "n=" << n;
      if (n <= kMaxGemvTokens) ++bf16_decodes;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < c.rows; ++r) {
          long double sum = 0, mag = 0;
          for (int64_t j = 0; j < c.cols; ++j) {
            const double p = static_cast<double>(m.exact[r * c.cols + j]) *
                             Bf16Value(RoundToBf16(x[t * c.cols + j]));
            sum += p;
            mag += std::fabs(p);
          }
          const float y = got[t * c.rows + r];
          ASSERT_NEAR(y, static_cast<double>(sum), static_cast<double>(mag) * c.cols * 6e-8 + 1e-6)
              << WeightFormatName(c.format) << " " << c.rows << "x" << c.cols << " n=" << n << " t=" << t << " r=" << r;
        }
    }
  }
  // The 183 x 320 FP8 weight's decode steps (1, 8 tokens) take the bf16 decode kernel
  // where the CPU runs it.
  if (Bf16GemmAvailable() && Cpu().avx512_vbmi && Cpu().gfni && !Cpu().intel) { EXPECT_EQ(bf16_decodes, 2); }
}

// The bf16 GEMM's FP8 panels decode every code exactly: one-hot tokens (token t is 1 at
// column t) pick out single weights, so y[t][r] must be W[r][t] (value x block scale) to
// the bit. All 254 non-NaN codes,
// subnormals and both zeros among them, across two scale blocks.
TEST(Bf16ActivationsTest, Fp8PanelsDecodeEveryCodeExactly) {
  if (!Bf16GemmAvailable()) GTEST_SKIP() << "no AVX-512 BF16 (or M2_KERNELS forces another family)";
  std::mt19937 rng(37);
  const int64_t rows = 21, cols = 256;
  Weight m = Make({WeightFormat::kFp8Block, rows, cols}, rng);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      uint8_t q = static_cast<uint8_t>((r * 37 + j) & 0xff);
      if ((q & 0x7f) == 0x7f) q ^= 1;
      m.data[static_cast<size_t>(r * cols + j)] = q;
      m.exact[static_cast<size_t>(r * cols + j)] = Fp8E4M3ToF32(q) * m.fp8_scale[(j / 128)];
    }
  std::vector<float> x(static_cast<size_t>(cols * cols), 0.0f), y(static_cast<size_t>(cols * rows));
  for (int64_t t = 0; t < cols; ++t) x[static_cast<size_t>(t * cols + t)] = 1.0f;
  m.w.activations = ActivationMode::kBf16Prefill;
  ASSERT_TRUE(UsesBf16Gemm(m.w, cols));
  Linear(m.w, x.data(), cols, y.data());
  for (int64_t t = 0; t < cols; ++t)
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(y[static_cast<size_t>(t * rows + r)], m.exact[static_cast<size_t>(r * cols + t)])
          << "code 0x" << std::hex << int(m.data[static_cast<size_t>(r * cols + t)]) << std::dec << " r=" << r << " t=" << t;
}

// The bf16-activation FP8 decode kernel reads every code as documented (linear.h,
// Fp8GemvGfni): one-hot tokens pick out single weights, so y[r] must be W[r][t] (value x
// block scale) to the bit. Byte-table lookups: every code exact (but NaN, left out: a
// one-hot row's 0 x NaN is NaN). GFNI bit moves: every
// normal code exact, the subnormal ones (exponent 0) and the zeros read 0, the NaN codes
// +-480. And activations far from 1 keep their products normal (PackGemvBf16Avx512's shift):
// a one-hot 2^100 or 2^-100 gives 2^+-100 x the weight, for every code both ways read
// exactly. Both ways agree to the bit on weights without subnormal codes.
TEST(Bf16ActivationsTest, Fp8DecodeKernelReadsEveryCode) {
  if (!Bf16GemmAvailable() || !Cpu().avx512_vbmi || !Cpu().gfni)
    GTEST_SKIP() << "the bf16 FP8 decode kernel needs AVX-512 BF16, VBMI and GFNI (or M2_KERNELS forces another family): "
                 << Cpu().Describe();
  std::mt19937 rng(41);
  const int64_t rows = 21, cols = 256;
  Weight m = Make({WeightFormat::kFp8Block, rows, cols}, rng);
  const auto code = [&](int64_t r, int64_t j) { return m.data[static_cast<size_t>(r * cols + j)]; };
  ASSERT_TRUE(GemvBf16Supports(m.w, true));
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  std::vector<uint16_t> xb(x.size());
  int checked[2] = {0, 0};
  for (int gfni = 0; gfni < 2; ++gfni) {
    SetFp8GemvGfniForTesting(gfni);
    // The table's NaN codes are NaN, and 0 x NaN in a one-hot row too: codes 0x7e / 0xfe
    // for them there.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const auto q = static_cast<uint8_t>((r * 37 + j) & 0xff);
        m.data[static_cast<size_t>(r * cols + j)] = !gfni && (q & 0x7f) == 0x7f ? q ^ 1 : q;
      }
    for (const float one : {1.0f, std::ldexp(1.0f, 100), std::ldexp(1.0f, -100)}) {
      for (int64_t t = 0; t < cols; ++t) {
        std::fill(x.begin(), x.end(), 0.0f);
        x[static_cast<size_t>(t)] = one;
        const int shift = PackGemvBf16Avx512(x.data(), 1, cols, /*fp8_order=*/true, xb.data());
        ASSERT_TRUE(GemvRowsBf16Avx512(m.w, xb.data(), shift, 1, y.data(), 0, rows));
        for (int64_t r = 0; r < rows; ++r) {
          const uint8_t q = code(r, t);
          const float scale = m.fp8_scale[static_cast<size_t>(t / 128)];
          const bool nan = (q & 0x7f) == 0x7f, subnormal_or_zero = (q & 0x78) == 0;
          float want = (nan ? ((q & 0x80) ? -480.0f : 480.0f) : Fp8E4M3ToF32(q)) * scale * one;
          if (gfni && subnormal_or_zero) want = 0.0f;
          ASSERT_EQ(y[static_cast<size_t>(r)], want) << (gfni ? "GFNI" : "table") << " code 0x" << std::hex << int(q)
                                                     << std::dec << " r=" << r << " t=" << t << " x=" << one;
          ++checked[gfni];
        }
      }
    }
  }
  SetFp8GemvGfniForTesting(-1);
  EXPECT_EQ(checked[0], 3 * rows * cols);
  EXPECT_EQ(checked[1], 3 * rows * cols);

  // Random activations, codes without exponent 0 (or NaN): the two ways give the same bits.
  for (auto& q : m.data) {
    if ((q & 0x78) == 0) q |= 0x08;
    if ((q & 0x7f) == 0x7f) q ^= 1;  // no NaN either
  }
  for (auto& v : x) v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
  std::vector<float> by_table(y.size());
  for (int gfni = 0; gfni < 2; ++gfni) {
    SetFp8GemvGfniForTesting(gfni);
    const int shift = PackGemvBf16Avx512(x.data(), 1, cols, true, xb.data());
    ASSERT_TRUE(GemvRowsBf16Avx512(m.w, xb.data(), shift, 1, gfni ? y.data() : by_table.data(), 0, rows));
  }
  SetFp8GemvGfniForTesting(-1);
  EXPECT_EQ(y, by_table);
}

// The tile unit's GEMM (AMX, linear_bf16_amx.cpp) and the vector one (AVX-512 BF16) take
// the same products in different orders: their results agree to fp32 summation, for
// every panel shape (32, 16 and fewer rows), token tile (16, 32, chunks of 128) and FP8
// scale block (full and partial); and Linear() really took the tile unit (it differs from
// the vector GEMM somewhere).
TEST(Bf16ActivationsTest, AmxAgreesWithTheVectorGemm) {
  if (!AmxBf16Available()) GTEST_SKIP() << "no AMX-BF16 here (or M2_AMX=0): " << Cpu().Describe();
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : std::vector<Case>{{WeightFormat::kBF16, 96, 512},
                                         {WeightFormat::kBF16, 61, 96},
                                         {WeightFormat::kFp8Block, 256, 448},
                                         {WeightFormat::kFp8Block, 40, 128}}) {
    Weight m = Make(c, rng);
    ASSERT_TRUE(GemmAmxSupports(m.w));
    m.w.activations = ActivationMode::kBf16Prefill;
    bool differs = false;
    for (int64_t n : {int64_t{9}, int64_t{16}, int64_t{31}, int64_t{48}, int64_t{130}}) {
      std::vector<float> x(static_cast<size_t>(n * c.cols));
      for (auto& v : x) v = nd(rng);
      std::vector<float> vec(static_cast<size_t>(n * c.rows)), amx(vec.size());
      SetAmxBf16ForTesting(false);
      Linear(m.w, x.data(), n, vec.data());
      SetAmxBf16ForTesting(true);
      Linear(m.w, x.data(), n, amx.data());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < c.rows; ++r) {
          double mag = 0;
          for (int64_t j = 0; j < c.cols; ++j)
            mag += std::fabs(static_cast<double>(m.exact[r * c.cols + j]) * Bf16Value(RoundToBf16(x[t * c.cols + j])));
          const size_t i = static_cast<size_t>(t * c.rows + r);
          differs = differs || amx[i] != vec[i];
          ASSERT_NEAR(amx[i], vec[i], mag * c.cols * 1.2e-7 + 1e-6)
              << WeightFormatName(c.format) << " " << c.rows << "x" << c.cols << " n=" << n << " t=" << t << " r=" << r;
        }
    }
    EXPECT_TRUE(differs) << WeightFormatName(c.format) << " " << c.rows << "x" << c.cols
                         << ": bit for bit the vector GEMM's results; was the tile unit used?";
  }
}

// Rows of normal FP8 codes only, and rows whose 64-code lines each hold one zero or
// subnormal code among normal ones, through the decode path (8 one-hot tokens at a time: the
// bf16 decode kernel where the CPU runs it, with its table lookups) and the prefill GEMM (256
// one-hot tokens; the tile unit where the CPU has one): every weight comes out exactly (value
// x block scale, to the bit); the decode kernel's GFNI moves the same, the subnormal codes 0.
TEST(Bf16ActivationsTest, Fp8WeightsComeOutExactlyInDecodeAndPrefill) {
  if (!Bf16GemmAvailable()) GTEST_SKIP() << "no AVX-512 BF16 (or M2_KERNELS forces another family)";
  std::mt19937 rng(43);
  const int64_t rows = 48, cols = 256;
  Weight m = Make({WeightFormat::kFp8Block, rows, cols}, rng);
  const uint8_t specials[] = {0x00, 0x80, 0x01, 0x83, 0x05, 0x87};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      uint8_t q = static_cast<uint8_t>(((rng() & 1) << 7) | ((1 + rng() % 15) << 3) | (rng() & 7));
      if ((q & 0x7f) == 0x7f) q ^= 1;
      if (r % 2 == 1 && j % 64 == (r * 7) % 64) q = specials[(r + j / 64) % 6];
      m.data[static_cast<size_t>(r * cols + j)] = q;
      m.exact[static_cast<size_t>(r * cols + j)] = Fp8E4M3ToF32(q) * m.fp8_scale[(j / 128)];
    }
  m.w.activations = ActivationMode::kBf16Prefill;
  const auto check = [&](int64_t c0, int64_t n, const std::vector<float>& y) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(y[static_cast<size_t>(t * rows + r)], m.exact[static_cast<size_t>(r * cols + c0 + t)])
            << "code 0x" << std::hex << int(m.data[static_cast<size_t>(r * cols + c0 + t)]) << std::dec << " r=" << r
            << " column " << c0 + t << " of " << n << " tokens";
  };
  // Decode: the bf16 kernel's FP8 table lookups (and the exact kernels where it does not run).
  SetFp8GemvGfniForTesting(0);
  for (int64_t c0 = 0; c0 < cols; c0 += 8) {
    std::vector<float> x(static_cast<size_t>(8 * cols), 0.0f), y(static_cast<size_t>(8 * rows));
    for (int64_t t = 0; t < 8; ++t) x[static_cast<size_t>(t * cols + c0 + t)] = 1.0f;
    Linear(m.w, x.data(), 8, y.data());
    check(c0, 8, y);
  }
  SetFp8GemvGfniForTesting(-1);
  // Its GFNI bit moves, where the CPU has them: the same but for the subnormal codes, which
  // read 0 (Fp8GemvGfni, linear.h).
  if (UsesBf16Gemv(m.w, 8) && Fp8GemvGfni()) {
    for (int64_t c0 = 0; c0 < cols; c0 += 8) {
      std::vector<float> x(static_cast<size_t>(8 * cols), 0.0f), y(static_cast<size_t>(8 * rows));
      for (int64_t t = 0; t < 8; ++t) x[static_cast<size_t>(t * cols + c0 + t)] = 1.0f;
      Linear(m.w, x.data(), 8, y.data());
      for (int64_t t = 0; t < 8; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          const size_t i = static_cast<size_t>(r * cols + c0 + t);
          ASSERT_EQ(y[static_cast<size_t>(t * rows + r)], (m.data[i] & 0x78) == 0 ? 0.0f : m.exact[i])
              << "GFNI: code 0x" << std::hex << int(m.data[i]) << std::dec << " r=" << r << " column " << c0 + t;
        }
    }
  }
  std::vector<float> x(static_cast<size_t>(cols * cols), 0.0f), y(static_cast<size_t>(cols * rows));
  for (int64_t t = 0; t < cols; ++t) x[static_cast<size_t>(t * cols + t)] = 1.0f;
  ASSERT_TRUE(UsesBf16Gemm(m.w, cols));
  Linear(m.w, x.data(), cols, y.data());
  check(0, cols, y);
}

// A NaN in the input comes out as NaN in its token's outputs.
TEST(Bf16ActivationsTest, NanInNanOut) {
  if (!Bf16GemmAvailable()) GTEST_SKIP() << "no AVX-512 BF16 here";
  std::mt19937 rng(23);
  Weight m = Make({WeightFormat::kFp8Block, 24, 256}, rng);
  m.w.activations = ActivationMode::kBf16Prefill;
  std::vector<float> x(static_cast<size_t>(20 * 256), 0.25f), y(static_cast<size_t>(20 * 24));
  x[5 * 256 + 17] = std::numeric_limits<float>::quiet_NaN();
  Linear(m.w, x.data(), 20, y.data());
  for (int64_t t = 0; t < 20; ++t)
    for (int64_t r = 0; r < 24; ++r) ASSERT_EQ(std::isnan(y[t * 24 + r]), t == 5) << t << " " << r;
}

}  // namespace
}  // namespace m2
