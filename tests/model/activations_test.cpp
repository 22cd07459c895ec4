// --activations int8+int8 / int16+int16 on an FP8 checkpoint (ActivationMode::kInt8Prefill,
// kInt16Prefill): which weights take the integer GEMMs, what the prefill logits cost against
// exact ones, what auto gives FP8 weights, and the errors where a mode cannot apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/linear_bf16.h"
#include "kernels/linear_int16.h"
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

// Largest |a - b| over the logits, the range of a's, and how many tokens' top choices agree.
struct LogitsDiff {
  float err = 0.0f, range = 0.0f;
  int64_t same_top = 0;
};
LogitsDiff Compare(const std::vector<float>& a, const std::vector<float>& b, int64_t n, int64_t vocab) {
  EXPECT_EQ(a.size(), b.size());
  LogitsDiff d;
  if (a.size() != b.size()) return d;
  for (size_t i = 0; i < a.size(); ++i)
    d.range = std::max(d.range, std::fabs(a[i])), d.err = std::max(d.err, std::fabs(a[i] - b[i]));
  for (int64_t t = 0; t < n; ++t) {
    const float* pa = a.data() + t * vocab;
    const float* pb = b.data() + t * vocab;
    d.same_top += std::max_element(pa, pa + vocab) - pa == std::max_element(pb, pb + vocab) - pb;
  }
  return d;
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
  const LogitsDiff d = Compare(PrefillLogits(**exact, n), PrefillLogits(**int8, n), n, (*exact)->config().vocab_size);
  EXPECT_GT(d.err, 0.0f) << "int8 prefill changed nothing";
  EXPECT_LT(d.err, 0.05f * d.range);
  EXPECT_GE(d.same_top, n * 9 / 10);
}

// int16+int16: the same weights take the int16 GEMM (each group converted to int16 with a
// power-of-two step, exact within 7 binades of its largest), at a tenth of int8's error
// bound here; auto gives FP8 weights that fit the int16 GEMM where bf16 prefill is not the
// faster (and bf16 prefill where it is), exact everywhere else.
TEST(Fp8Int16Prefill, WeightsWithWholeGroupsTakeTheInt16GemmAndStayClose) {
  constexpr const char* kDir = "testdata/golden/tiny-fp8";
  auto int16 = Model::Load(kDir, {.progress = false, .activations = ActivationMode::kInt16DecodeInt16Prefill});
  if (Int16GemmLanes() == 0) {
    ASSERT_FALSE(int16.ok());
    EXPECT_NE(int16.status().message().find("avx2 or avx512"), std::string::npos) << int16.status().message();
  } else {
    ASSERT_TRUE(int16.ok()) << int16.status().message();
    const ModelWeights& w = (*int16)->weights();
    EXPECT_EQ(w.layers[0].moe.experts[1].w2.activations, ActivationMode::kInt16Prefill);  // 160 columns
    EXPECT_EQ(w.layers[1].attn.o.activations, ActivationMode::kInt16Prefill);            // 6 x 32 columns
    EXPECT_EQ(w.layers[0].moe.experts[1].w1.activations, ActivationMode::kExact);        // 200: a group split
    EXPECT_EQ(w.layers[0].moe.gate.activations, ActivationMode::kExact);
    EXPECT_EQ(w.lm_head.activations, ActivationMode::kExact);
    auto exact = Model::Load(kDir, {.progress = false});
    ASSERT_TRUE(exact.ok()) << exact.status().message();
    const int64_t n = 40;
    const LogitsDiff d = Compare(PrefillLogits(**exact, n), PrefillLogits(**int16, n), n, (*exact)->config().vocab_size);
    EXPECT_GT(d.err, 0.0f) << "int16 prefill changed nothing";
    EXPECT_LT(d.err, 0.005f * d.range);
    EXPECT_GE(d.same_top, n * 19 / 20);
  }
  auto automatic = Model::Load(kDir, {.progress = false, .activations = ActivationMode::kAuto});
  ASSERT_TRUE(automatic.ok()) << automatic.status().message();
  const ModelWeights& a = (*automatic)->weights();
  const ActivationMode fits = Bf16PrefillBeatsFp32(WeightFormat::kFp8Block) ? ActivationMode::kBf16Prefill
                              : Int16GemmLanes() > 0                       ? ActivationMode::kInt16Prefill
                                                                           : ActivationMode::kExact;
  EXPECT_EQ(a.layers[1].attn.o.activations, fits);
  EXPECT_EQ(a.layers[0].moe.experts[1].w2.activations, fits);
  EXPECT_EQ(a.layers[0].moe.experts[1].w1.activations,
            fits == ActivationMode::kInt16Prefill ? ActivationMode::kExact : fits);  // 200 columns
  EXPECT_EQ(a.layers[0].moe.gate.activations, ActivationMode::kExact);
  EXPECT_EQ(a.lm_head.activations, ActivationMode::kExact);
}

TEST(Fp8Int8Prefill, Int8DecodeAloneNeedsQuantizedWeights) {
  auto r = Model::Load("testdata/golden/tiny-fp8", {.progress = false, .activations = ActivationMode::kInt8Decode});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("q8 or q4"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace m2
