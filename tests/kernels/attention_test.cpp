// The SIMD attention kernels against the portable one, over group sizes that do and do
// not fill the register tiles, head dims, lengths that end inside a block, and block
// sizes. Tolerance: the kernels differ only in summation order and in the vectorised
// exp (relative error < 2e-7), so outputs (convex mixes of V rows of size ~1) agree to
// a few float ulps of the largest |V|; 2e-5 leaves room without hiding a wrong row.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "kernels/attention.h"

namespace m2 {
namespace {

using Kernel = std::function<void(const float*, int64_t, int64_t, const KvHeadView&, float, float*, float*)>;

void Check(const char* name, const Kernel& kernel) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t D : {32, 64, 128})
    for (int64_t group : {1, 2, 5, 6, 7, 8, 13, 16})
      for (int64_t bt : {16, 64})
        for (int64_t len : {1, 17, 64, 200}) {
          const int64_t kv_heads = 2, blocks = (len + bt - 1) / bt;
          // Head-major blocks [kv_heads][bt][D]; the view reads head 1.
          std::vector<std::vector<float>> kdata(blocks), vdata(blocks);
          std::vector<const float*> kp(blocks), vp(blocks);
          for (int64_t b = 0; b < blocks; ++b) {
            kdata[b].resize(kv_heads * bt * D), vdata[b].resize(kv_heads * bt * D);
            for (auto& f : kdata[b]) f = nd(rng);
            for (auto& f : vdata[b]) f = nd(rng);
            kp[b] = kdata[b].data(), vp[b] = vdata[b].data();
          }
          KvHeadView kv;
          kv.k_blocks = kp.data(), kv.v_blocks = vp.data();
          kv.head_offset = bt * D, kv.block_tokens = bt, kv.row_stride = D, kv.length = len;
          std::vector<float> q(group * D), scratch(group * len), want(group * D), got(group * D, NAN);
          for (auto& f : q) f = 2.0f * nd(rng);  // peaked enough that the softmax matters
          const float scale = 1.0f / std::sqrt(static_cast<float>(D));
          AttendGroupPortable(q.data(), group, D, kv, scale, scratch.data(), want.data());
          kernel(q.data(), group, D, kv, scale, scratch.data(), got.data());
          for (int64_t i = 0; i < group * D; ++i)
            ASSERT_NEAR(got[i], want[i], 2e-5f) << name << ": D " << D << " group " << group << " block " << bt
                                                << " length " << len << " element " << i;
        }
}

TEST(AttentionKernels, Avx512MatchesPortable) {
  if (!Cpu().has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  Check("avx512", AttendGroupAvx512);
}

TEST(AttentionKernels, Avx2MatchesPortable) {
  if (!Cpu().has_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  Check("avx2", AttendGroupAvx2);
}

}  // namespace
}  // namespace m2
