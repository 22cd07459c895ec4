// The SIMD attention kernels against the portable one, over group sizes that do and do
// not fill the register tiles, head dims, lengths that end inside a block, block sizes
// and both KV storage types. Tolerance: the kernels differ only in summation order and
// in the vectorised exp (relative error < 2e-7), so outputs (convex mixes of V rows of
// size ~1) agree to a few float ulps of the largest |V|; 2e-5 leaves room without hiding
// a wrong row. Blocks are taken from the arena in a shuffled order and the view reads
// head 1 of 2, so a wrong block or head address changes the result.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "kernels/attention.h"

namespace m2 {
namespace {

using Kernel = std::function<void(const float*, int64_t, int64_t, const KvHeadView&, float, float*, float*)>;

// One layer's K and V arenas of head-major blocks [kv_heads][bt][row] in `dtype` (a row:
// KvRowElems(dtype, D) elements), filled row by row from fp32 values, and a view of head
// `head` over `len` positions whose block ids are a shuffled pick of the arena's (a few more
// blocks than needed).
struct Arena {
  std::vector<uint8_t> k, v;
  std::vector<int32_t> ids;
  KvHeadView view;
  int64_t row = 0;  // elements of a row

  Arena(int64_t D, int64_t bt, int64_t len, int64_t kv_heads, int64_t head, KvDtype dtype, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t need = (len + bt - 1) / bt, total = need + 3;
    row = KvRowElems(dtype, D);
    const int64_t stride = kv_heads * bt * row, rows = total * kv_heads * bt, rb = KvRowBytes(dtype, D);
    std::vector<float> src(D);
    k.resize(rows * rb), v.resize(rows * rb);
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& f : src) f = nd(rng);
      StoreKv(src.data(), D, dtype, k.data() + r * rb);
      for (auto& f : src) f = nd(rng);
      StoreKv(src.data(), D, dtype, v.data() + r * rb);
    }
    ids.resize(total);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(need);
    view.k_base = k.data(), view.v_base = v.data(), view.blocks = ids.data();
    view.block_stride = stride, view.head_offset = head * bt * row, view.block_tokens = bt, view.row_stride = row;
    view.length = len, view.dtype = dtype;
  }
};

void Check(const char* name, const Kernel& kernel, KvDtype dtype) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t D : {32, 64, 128})
    for (int64_t group : {1, 2, 5, 6, 7, 8, 13, 16})
      for (int64_t bt : {16, 64})
        for (int64_t len : {1, 17, 64, 200}) {
          const Arena a(D, bt, len, 2, 1, dtype, rng);
          std::vector<float> q(group * D), scratch(group * len), want(group * D), got(group * D, NAN);
          for (auto& f : q) f = 2.0f * nd(rng);  // peaked enough that the softmax matters
          const float scale = 1.0f / std::sqrt(static_cast<float>(D));
          AttendGroupPortable(q.data(), group, D, a.view, scale, scratch.data(), want.data());
          kernel(q.data(), group, D, a.view, scale, scratch.data(), got.data());
          for (int64_t i = 0; i < group * D; ++i)
            ASSERT_NEAR(got[i], want[i], 2e-5f) << name << " " << KvDtypeName(dtype) << ": D " << D << " group "
                                                << group << " block " << bt << " length " << len << " element " << i;
        }
}

TEST(AttentionKernels, Avx512MatchesPortable) {
  if (!Cpu().has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  Check("avx512", AttendGroupAvx512, KvDtype::kF32);
  Check("avx512", AttendGroupAvx512, KvDtype::kBf16);
  Check("avx512", AttendGroupAvx512, KvDtype::kQ8);
}

TEST(AttentionKernels, Avx2MatchesPortable) {
  if (!Cpu().has_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  Check("avx2", AttendGroupAvx2, KvDtype::kF32);
  Check("avx2", AttendGroupAvx2, KvDtype::kBf16);
  Check("avx2", AttendGroupAvx2, KvDtype::kQ8);
}

float FromBits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// The SIMD kernels score K rows in pairs and a block's odd row alone, in the same order
// of summation, and tensor parallelism gives a rank part of a group (parallel.h): a head's
// output must be the same bits whether it is attended with its whole group or in parts,
// and whatever the block size (one row per block: every row scored alone).
void CheckSameBits(const char* name, const Kernel& kernel, bool per_row = true) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBf16, KvDtype::kQ8})
    for (int64_t group : {6, 8, 13})
      for (int64_t len : {1, 2, 17, 48, 201}) {
        const int64_t D = 128, bt = 16, row_bytes = KvRowBytes(dtype, D);
        const Arena a(D, bt, len, 2, 1, dtype, rng);
        // The same rows in blocks of one row each, in order.
        std::vector<uint8_t> k1(len * row_bytes), v1(len * row_bytes);
        for (int64_t j = 0; j < len; ++j) {
          const int64_t off = (a.ids[j / bt] * a.view.block_stride + a.view.head_offset + (j % bt) * a.row) * KvDtypeBytes(dtype);
          std::copy_n(a.k.data() + off, row_bytes, k1.data() + j * row_bytes);
          std::copy_n(a.v.data() + off, row_bytes, v1.data() + j * row_bytes);
        }
        std::vector<int32_t> ids(len);
        std::iota(ids.begin(), ids.end(), 0);
        KvHeadView single = a.view;
        single.k_base = k1.data(), single.v_base = v1.data(), single.blocks = ids.data();
        single.block_stride = a.row, single.head_offset = 0, single.block_tokens = 1;
        std::vector<float> q(group * D), scratch(group * len), whole(group * D), part(group * D), rows(group * D);
        for (auto& f : q) f = 2.0f * nd(rng);
        kernel(q.data(), group, D, a.view, 0.088f, scratch.data(), whole.data());
        for (int64_t h0 = 0, step = 1; h0 < group; h0 += step, step = step % 3 + 1) {  // parts of 1, 2, 3 heads
          const int64_t n = std::min(step, group - h0);
          kernel(q.data() + h0 * D, n, D, a.view, 0.088f, scratch.data(), part.data() + h0 * D);
        }
        kernel(q.data(), group, D, single, 0.088f, scratch.data(), rows.data());
        for (int64_t i = 0; i < group * D; ++i) {
          ASSERT_EQ(Bits(part[i]), Bits(whole[i])) << name << " " << KvDtypeName(dtype) << ": group " << group
                                                   << " in parts, length " << len << " element " << i;
          if (per_row) {
            ASSERT_EQ(Bits(rows[i]), Bits(whole[i])) << name << " " << KvDtypeName(dtype) << ": group " << group
                                                   << " one row per block, length " << len << " element " << i;
          }
        }
      }
}

// AttentionMath::kBf16 through the dispatcher (exact where the CPU lacks AVX-512 BF16).
void AttendGroupBf16Math(const float* q, int64_t group, int64_t D, const KvHeadView& kv, float scale, float* scratch,
                         float* out) {
  AttendQueries(q, group * D, 1, group, D, kv, scale, scratch, out, group * D, AttentionMath::kBf16);
}
void AttendQueriesBf16Math(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t D, const KvHeadView& kv,
                           float scale, float* scratch, float* out, int64_t out_stride) {
  AttendQueries(q, q_stride, nq, group, D, kv, scale, scratch, out, out_stride, AttentionMath::kBf16);
}

TEST(AttentionKernels, SameBitsInPartsAndPerRow) {
  if (Cpu().has_avx512()) CheckSameBits("avx512", AttendGroupAvx512);
  if (Cpu().has_avx2()) CheckSameBits("avx2", AttendGroupAvx2);
  CheckSameBits("portable", AttendGroupPortable);
  // bf16 products pair rows within a block: blocks of one row fall back to exact products,
  // so only the parts are compared.
  if (AttentionBf16Available()) CheckSameBits("bf16 products", AttendGroupBf16Math, /*per_row=*/false);
}

// A prefill's tile: nq query tokens at consecutive positions attended together
// (AttendQueries) each get the bits they get attended alone (AttendGroup with their own
// length), whatever the tile's size, the group, and where the tile's last positions fall in
// the blocks; strides between queries and between outputs are honoured, and nothing
// outside a query's output is written.
using QueriesKernel = std::function<void(const float*, int64_t, int64_t, int64_t, int64_t, const KvHeadView&, float,
                                         float*, float*, int64_t)>;
void CheckQueries(const char* name, const QueriesKernel& queries, const Kernel& single) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBf16, KvDtype::kQ8})
    for (int64_t group : {1, 6, 8, 13})
      for (int64_t nq : {1, 2, 3, 4, 5})
        for (int64_t len0 : {1, 14, 15, 16, 17, 40}) {
          const int64_t D = 64, bt = 16, len = len0 + nq - 1;
          const Arena a(D, bt, len, 2, 1, dtype, rng);
          const int64_t q_stride = group * D + 8, out_stride = group * D + 16;
          std::vector<float> q(nq * q_stride), out(nq * out_stride, NAN), scratch(nq * group * len, NAN);
          for (auto& f : q) f = 2.0f * nd(rng);
          KvHeadView view = a.view;
          view.length = len0;
          queries(q.data(), q_stride, nq, group, D, view, 0.125f, scratch.data(), out.data(), out_stride);
          for (int64_t j = 0; j < nq; ++j) {
            KvHeadView one = a.view;
            one.length = len0 + j;
            std::vector<float> want(group * D), s(group * one.length);
            single(q.data() + j * q_stride, group, D, one, 0.125f, s.data(), want.data());
            for (int64_t i = 0; i < group * D; ++i)
              ASSERT_EQ(Bits(out[j * out_stride + i]), Bits(want[i]))
                  << name << " " << KvDtypeName(dtype) << ": group " << group << ", " << nq << " queries from length "
                  << len0 << ", query " << j << " element " << i;
            for (int64_t i = group * D; i < out_stride && j + 1 < nq; ++i)
              ASSERT_TRUE(std::isnan(out[j * out_stride + i])) << name << ": written past query " << j << "'s output";
          }
        }
}

TEST(AttentionKernels, QueriesTogetherGetTheirOwnBits) {
  if (Cpu().has_avx512()) CheckQueries("avx512", AttendQueriesAvx512, AttendGroupAvx512);
  if (Cpu().has_avx2()) CheckQueries("avx2", AttendQueriesAvx2, AttendGroupAvx2);
  CheckQueries("portable", AttendQueriesPortable, AttendGroupPortable);
  if (AttentionBf16Available()) CheckQueries("bf16 products", AttendQueriesBf16Math, AttendGroupBf16Math);
}

float RoundBf16(float f) {  // round to nearest even, as vcvtneps2bf16 (finite inputs)
  const uint32_t u = Bits(f);
  return FromBits((u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u);
}

// bf16 products (AttentionMath::kBf16) against a double-precision reference of what they
// promise: the query rounded to bf16, K and V as cached (bf16), scores and softmax in
// double, the weights rounded to bf16, their products with V summed exactly. The kernel
// forms scores and weights in fp32 in its own order (a relative 1e-6 or so from the
// double ones), which can move a weight lying that close to the middle between two bf16
// values to the other one (2^-8 of it): the reference allows that step times |V| for each
// such weight. Outputs are held to 1e-4 beyond it (the largest difference past it is
// printed, about 2e-6; V is of size 1, and a wrong row, pair or lane order is off by about
// 1). Group sizes that do and do not fill the tiles,
// odd lengths (a last pair of one row), several head dims and block sizes.
TEST(AttentionKernels, Bf16ProductsMatchARoundedReference) {
  if (!AttentionBf16Available()) GTEST_SKIP() << "this CPU (or the chosen kernels) has no AVX-512 BF16";
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double worst = 0;
  for (int64_t D : {32, 64, 128})
    for (int64_t group : {1, 5, 6, 8, 13, 16})
      for (int64_t bt : {16, 64, 256})
        for (int64_t len : {1, 2, 17, 64, 201, 333}) {
          const Arena a(D, bt, len, 2, 1, KvDtype::kBf16, rng);
          std::vector<float> q(group * D), scratch(group * len), got(group * D, NAN);
          for (auto& f : q) f = 2.0f * nd(rng);
          const float scale = 1.0f / std::sqrt(static_cast<float>(D));
          AttendQueries(q.data(), group * D, 1, group, D, a.view, scale, scratch.data(), got.data(), group * D,
                        AttentionMath::kBf16);
          std::vector<float> kr(len * D), vr(len * D);
          for (int64_t j = 0; j < len; ++j) {
            const int64_t off = a.ids[j / bt] * a.view.block_stride + a.view.head_offset + (j % bt) * D;
            LoadKv(a.k.data() + 2 * off, D, KvDtype::kBf16, kr.data() + j * D);
            LoadKv(a.v.data() + 2 * off, D, KvDtype::kBf16, vr.data() + j * D);
          }
          for (int64_t h = 0; h < group; ++h) {
            std::vector<double> s(len);
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < len; ++j) {
              double dot = 0;
              for (int64_t d = 0; d < D; ++d) dot += double{RoundBf16(q[h * D + d])} * kr[j * D + d];
              s[j] = dot * scale;
              m = std::max(m, s[j]);
            }
            for (int64_t j = 0; j < len; ++j) sum += (s[j] = std::exp(s[j] - m));
            // Each weight's bf16 value, and the step to its other neighbour where the double
            // lies within a relative 1e-5 of the middle between the two (0 elsewhere).
            std::vector<double> w(len), flip(len, 0.0);
            for (int64_t j = 0; j < len; ++j) {
              const double x = s[j] / sum;
              w[j] = RoundBf16(static_cast<float>(x));
              const float lo = FromBits(Bits(static_cast<float>(x)) & 0xffff0000u), hi = FromBits(Bits(lo) + 0x10000u);
              if (std::fabs(x - (double{lo} + double{hi}) / 2) <= 1e-5 * x) flip[j] = double{hi} - double{lo};
            }
            for (int64_t d = 0; d < D; ++d) {
              double want = 0, allow = 1e-4;
              for (int64_t j = 0; j < len; ++j) {
                want += w[j] * vr[j * D + d];
                allow += flip[j] * std::fabs(vr[j * D + d]);
              }
              worst = std::max(worst, std::fabs(got[h * D + d] - want) - (allow - 1e-4));
              ASSERT_NEAR(got[h * D + d], want, allow) << "D " << D << " group " << group << " block " << bt
                                                         << " length " << len << " head " << h << " element " << d;
            }
          }
        }
  std::printf("largest difference from the rounded reference, past the weights' allowed steps: %.3g\n", worst);
}

// Where bf16 products do not apply they are the exact ones, bit for bit: an fp32 cache,
// and on a CPU without AVX-512 BF16 (or with M2_KERNELS choosing other kernels) everything.
TEST(AttentionKernels, Bf16ProductsFallBackToExactBits) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBf16, KvDtype::kQ8}) {
    if (dtype == KvDtype::kBf16 && AttentionBf16Available()) continue;
    const int64_t D = 128, group = 6, len = 77;
    const Arena a(D, 16, len, 2, 1, dtype, rng);
    std::vector<float> q(group * D), scratch(group * len), want(group * D), got(group * D);
    for (auto& f : q) f = 2.0f * nd(rng);
    AttendQueries(q.data(), group * D, 1, group, D, a.view, 0.1f, scratch.data(), want.data(), group * D);
    AttendQueries(q.data(), group * D, 1, group, D, a.view, 0.1f, scratch.data(), got.data(), group * D,
                  AttentionMath::kBf16);
    for (int64_t i = 0; i < group * D; ++i) ASSERT_EQ(Bits(got[i]), Bits(want[i])) << KvDtypeName(dtype) << " " << i;
  }
}

// bf16 storage changes only the stored values: on inputs already rounded to bf16, the
// portable kernel over a shuffled bf16 arena (head 1 of 2) gives what it gives over a
// plain fp32 one (blocks in order, one head), which also checks its addressing.
TEST(AttentionKernels, PortableBf16MatchesF32OnRoundedData) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t D : {32, 128})
    for (int64_t group : {1, 6})
      for (int64_t bt : {16, 64})
        for (int64_t len : {1, 17, 200}) {
          const Arena b(D, bt, len, 2, 1, KvDtype::kBf16, rng);
          // The same positions' rows, rounded, in a single-head fp32 arena: row j at j * D.
          const int64_t nb = (len + bt - 1) / bt;
          std::vector<float> k(nb * bt * D), v(nb * bt * D);
          for (int64_t j = 0; j < len; ++j) {
            const int64_t off = b.ids[j / bt] * b.view.block_stride + b.view.head_offset + (j % bt) * D;
            LoadKv(b.k.data() + 2 * off, D, KvDtype::kBf16, k.data() + j * D);
            LoadKv(b.v.data() + 2 * off, D, KvDtype::kBf16, v.data() + j * D);
          }
          std::vector<int32_t> ids(nb);
          std::iota(ids.begin(), ids.end(), 0);
          KvHeadView f;
          f.k_base = k.data(), f.v_base = v.data(), f.blocks = ids.data(), f.block_stride = bt * D;
          f.block_tokens = bt, f.row_stride = D, f.length = len, f.dtype = KvDtype::kF32;
          std::vector<float> q(group * D), scratch(group * len), want(group * D), got(group * D, NAN);
          for (auto& x : q) x = 2.0f * nd(rng);
          const float scale = 1.0f / std::sqrt(static_cast<float>(D));
          AttendGroupPortable(q.data(), group, D, f, scale, scratch.data(), want.data());
          AttendGroupPortable(q.data(), group, D, b.view, scale, scratch.data(), got.data());
          for (int64_t i = 0; i < group * D; ++i)
            ASSERT_NEAR(got[i], want[i], 1e-6f)
                << "D " << D << " group " << group << " block " << bt << " length " << len << " element " << i;
        }
}


// q8 rows: int8 values in groups of 32, each with the fp32 scale max|x| / 127 after the row's
// values; every value reads back within half a step (max|x| / 254) of what was stored, the
// largest of each group exactly +-127 steps, an all-zero group as zeros, and a group holding a
// NaN or an infinity as NaNs (never as numbers that look right).
TEST(AttentionKernels, StoreLoadKvQ8) {
  EXPECT_STREQ(KvDtypeName(KvDtype::kQ8), "q8");
  EXPECT_EQ(KvDtypeBytes(KvDtype::kQ8), 1);
  EXPECT_EQ(KvRowElems(KvDtype::kQ8, 128), 144);
  EXPECT_EQ(KvRowBytes(KvDtype::kQ8, 128), 144);
  EXPECT_EQ(KvRowBytes(KvDtype::kBf16, 128), 256);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t D = 128;
  std::vector<float> x(D), back(D);
  std::vector<uint8_t> row(KvRowBytes(KvDtype::kQ8, D));
  for (int trial = 0; trial < 50; ++trial) {
    const float spread = std::ldexp(1.0f, trial % 20 - 10);  // groups of very different sizes
    for (int64_t i = 0; i < D; ++i) x[i] = nd(rng) * spread * (i / 32 + 1);
    if (trial % 7 == 0) x[trial % D] = 40.0f * spread;  // an outlier widens one group's steps only
    StoreKv(x.data(), D, KvDtype::kQ8, row.data());
    LoadKv(row.data(), D, KvDtype::kQ8, back.data());
    for (int64_t g = 0; g < D; g += 32) {
      float amax = 0.0f;
      for (int64_t i = g; i < g + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      float scale;
      std::memcpy(&scale, row.data() + D + g / 8, sizeof scale);
      EXPECT_EQ(scale, amax / 127.0f) << trial << " group " << g / 32;
      bool edge = false;
      for (int64_t i = g; i < g + 32; ++i) {
        EXPECT_LE(std::fabs(back[i] - x[i]), amax / 254.0f * 1.0001f) << trial << " element " << i;
        edge |= std::abs(static_cast<int8_t>(row[i])) == 127;
      }
      EXPECT_TRUE(edge) << trial << " group " << g / 32 << ": its largest value should take the full 127 steps";
    }
  }
  // Zeros stay zeros; a NaN or an infinity makes its group (and only it) NaN.
  std::fill(x.begin(), x.end(), 0.0f);
  x[40] = NAN;
  x[100] = -INFINITY;
  x[70] = 3.0f;
  StoreKv(x.data(), D, KvDtype::kQ8, row.data());
  LoadKv(row.data(), D, KvDtype::kQ8, back.data());
  for (int64_t i = 0; i < D; ++i) {
    if (i / 32 == 1 || i / 32 == 3) {
      EXPECT_TRUE(std::isnan(back[i])) << i;
    } else {
      EXPECT_EQ(back[i], i == 70 ? 3.0f : 0.0f) << i;
    }
  }
}

TEST(AttentionKernels, StoreLoadKv) {
  EXPECT_STREQ(KvDtypeName(KvDtype::kF32), "f32");
  EXPECT_STREQ(KvDtypeName(KvDtype::kBf16), "bf16");
  EXPECT_EQ(KvDtypeBytes(KvDtype::kF32), 4);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kBf16), 2);

  // fp32: bit-exact, NaN payloads and -0 included.
  const std::vector<float> f32 = {1.5f, -0.0f, INFINITY, -INFINITY, FromBits(0x7fc00001u), FromBits(0x00000001u),
                                  std::numeric_limits<float>::max()};
  std::vector<float> f32_stored(f32.size()), f32_back(f32.size());
  StoreKv(f32.data(), f32.size(), KvDtype::kF32, f32_stored.data());
  LoadKv(f32_stored.data(), f32.size(), KvDtype::kF32, f32_back.data());
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(Bits(f32_back[i]), Bits(f32[i])) << i;

  // bf16: round to nearest, ties to even.
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const std::vector<Case> cases = {
      {0x3f800000u, 0x3f80},  // 1: exact
      {0x3f808000u, 0x3f80},  // 1 + 2^-8: tie, down to even
      {0x3f818000u, 0x3f82},  // tie, up to even
      {0x3f808001u, 0x3f81},  // just above the tie
      {0x3f807fffu, 0x3f80},  // just below the tie
      {0xbf818000u, 0xbf82},  // negative tie, to even
      {0x3fffffffu, 0x4000},  // carry into the exponent
      {0x7f7fffffu, 0x7f80},  // largest float rounds to inf
      {0x00018000u, 0x0002},  // subnormal tie, up to even
      {0x80000000u, 0x8000},  // -0
      {0x7f800000u, 0x7f80},  // inf
      {0xff800000u, 0xff80},  // -inf
  };
  for (const Case& c : cases) {
    const float x = FromBits(c.in);
    uint16_t b = 0;
    float back = 0;
    StoreKv(&x, 1, KvDtype::kBf16, &b);
    EXPECT_EQ(b, c.out) << std::hex << c.in;
    LoadKv(&b, 1, KvDtype::kBf16, &back);
    EXPECT_EQ(Bits(back), static_cast<uint32_t>(c.out) << 16) << std::hex << c.in;
  }
  // NaN stays NaN, also where plain rounding would carry into inf or wrap to 0.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu}) {
    const float x = FromBits(nan);
    uint16_t b = 0;
    float back = 0;
    StoreKv(&x, 1, KvDtype::kBf16, &b);
    LoadKv(&b, 1, KvDtype::kBf16, &back);
    EXPECT_TRUE(std::isnan(back)) << std::hex << nan << " -> " << b;
    EXPECT_EQ(std::signbit(back), std::signbit(x)) << std::hex << nan;
  }

  // Every bf16 value widens exactly and stores back to itself (NaNs: quiet, same sign).
  std::vector<uint16_t> all(65536), again(65536);
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> wide(65536);
  LoadKv(all.data(), 65536, KvDtype::kBf16, wide.data());
  StoreKv(wide.data(), 65536, KvDtype::kBf16, again.data());
  for (uint32_t u = 0; u < 65536; ++u) {
    ASSERT_EQ(Bits(wide[u]), u << 16) << std::hex << u;
    if (std::isnan(wide[u]))
      ASSERT_EQ(again[u], u | 0x40) << std::hex << u;
    else
      ASSERT_EQ(again[u], u) << std::hex << u;
  }
}

}  // namespace
}  // namespace m2
