// --activations int8+int8 on an FP8 checkpoint (ActivationMode::kInt8Prefill): which
// weights take the int8 GEMM, what the prefill logits cost against exact ones, and the
// errors where the mode cannot apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/linear_int8.h"
#include "model/layers.h"
#include "model/model.h"

namespace m2 {
namespace {

std::vector<float> PrefillLogits(Model& m, int64_t tokens) {
  KvBlockPool pool(m.cache_layout());
  SequenceCache cache(&pool);
  SequenceCache* caches[] = {&cache};
  ForwardBatch b;
  for (int64_t i = 0; i < tokens; ++i) b.Add(static_cast<int32_t>((i * 37) % 290 + 3), 0, true);
  std::vector<float> logits;
  const Status st = m.Forward(b, caches, logits);
  EXPECT_TRUE(st.ok()) << st.message();
  return logits;
}

TEST(Fp8Int8Prefill, WeightsWithWholeGroupsTakeTheInt8GemmAndStayClose) {
  constexpr const char* kDir = "testdata/golden/tiny-fp8";  // hidden 200 (not whole groups), experts' 160
  auto int8 = Model::Load(kDir, {.progress = false, .activations = ActivationMode::kInt8DecodeInt8Prefill});
  if (Int8GemmFor(WeightFormat::kFp8Block) == Int8GemmKernel::kNone) {
    ASSERT_FALSE(int8.ok());
    EXPECT_NE(int8.status().message().find("avx2 or avx512"), std::string::npos) << int8.status().message();
    GTEST_SKIP() << "the portable kernels: no int8 GEMM";
  }
  ASSERT_TRUE(int8.ok()) << int8.status().message();
  const ModelWeights& w = (*int8)->weights();
  ASSERT_EQ(w.layers[0].moe.experts[1].w2.format, WeightFormat::kFp8Block);
  EXPECT_EQ(w.layers[0].moe.experts[1].w2.activations, ActivationMode::kInt8Prefill);  // 160 columns
  EXPECT_EQ(w.layers[1].attn.o.activations, ActivationMode::kInt8Prefill);            // 6 x 32 columns
  EXPECT_EQ(w.layers[0].moe.experts[1].w1.activations, ActivationMode::kExact);        // 200: a group split
  EXPECT_EQ(w.layers[0].attn.q.activations, ActivationMode::kExact);
  EXPECT_EQ(w.layers[0].moe.gate.activations, ActivationMode::kExact);  // routers stay exact
  EXPECT_EQ(w.lm_head.activations, ActivationMode::kExact);

  auto exact = Model::Load(kDir, {.progress = false});
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  const int64_t n = 40;  // a prefill: more than kMaxGemvTokens tokens
  const std::vector<float> a = PrefillLogits(**exact, n), b = PrefillLogits(**int8, n);
  ASSERT_EQ(a.size(), b.size());
  float range = 0.0f, err = 0.0f;
  int64_t same_top = 0;
  const int64_t vocab = (*exact)->config().vocab_size;
  for (size_t i = 0; i < a.size(); ++i) range = std::max(range, std::fabs(a[i])), err = std::max(err, std::fabs(a[i] - b[i]));
  for (int64_t t = 0; t < n; ++t) {
    const float* pa = a.data() + t * vocab;
    const float* pb = b.data() + t * vocab;
    same_top += std::max_element(pa, pa + vocab) - pa == std::max_element(pb, pb + vocab) - pb;
  }
  EXPECT_GT(err, 0.0f) << "int8 prefill changed nothing";
  EXPECT_LT(err, 0.05f * range);
  EXPECT_GE(same_top, n * 9 / 10);
}

TEST(Fp8Int8Prefill, Int8DecodeAloneNeedsQuantizedWeights) {
  auto r = Model::Load("testdata/golden/tiny-fp8", {.progress = false, .activations = ActivationMode::kInt8Decode});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("q8 or q4"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace m2
