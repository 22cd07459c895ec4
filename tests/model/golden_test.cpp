// The engine against transformers' MiniMaxM2ForCausalLM (fp32) on the tiny golden
// models made by tools/make_golden.py (and MiniMaxForCausalLM, the Lightning hybrids, by
// tools/make_golden_minimax.py): prompt logits at every position, 16 greedy
// decode steps through the KV cache, and each layer's output over the prompt.
//
// Tolerance: both sides compute in fp32 from identical fp32 weight values (bf16 and
// fp8 checkpoints are dequantized exactly), so they differ only by summation order.
// Each logit is a dot product over `hidden` terms after a chain of ~10 fp32 ops per
// layer; relative error ~ sqrt(hidden) * layers * 2^-24 ~ 1e-6. We allow 1e-4 of the
// logit scale (max |logit|), a hundred times that, and still far below the smallest
// greedy margin in the goldens (>= 2e-3 of the scale, see golden.json).
#include "golden_util.h"

namespace m2::testing {
namespace {

constexpr double kRelTol = 1e-4;

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, PromptLogitsLayersAndGreedyDecodeMatchTransformers) {
  const std::string name = GetParam();
  Golden g = LoadGolden(name);
  auto model = Model::Load(GoldenDir(name), {.progress = false});
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = **model;
  const int64_t V = m.config().vocab_size, H = m.config().hidden_size;
  ASSERT_EQ(V, g.vocab);
  const double tol = kRelTol * g.logit_scale;

  KvBlockPool pool(m.cache_layout(/*block_tokens=*/4));  // small blocks: prompts span several
  SequenceCache cache(&pool);
  SequenceCache* caches[] = {&cache};
  ForwardBatch batch;
  for (int32_t id : g.prompt) batch.Add(id, 0, true);
  std::vector<float> logits;
  CollectingTracer trace;
  ASSERT_TRUE(m.Forward(batch, caches, logits, &trace).ok());

  // Layer by layer first: a mismatch shows where it starts.
  const size_t P = g.prompt.size();
  for (int64_t l = 0; l < m.config().num_hidden_layers; ++l) {
    const auto* got = trace.Find("layers." + std::to_string(l) + ".out");
    ASSERT_NE(got, nullptr);
    const auto want = g.Get("layer_out." + std::to_string(l));
    ASSERT_EQ(want.size(), P * H);
    double scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    EXPECT_LE(MaxAbsDiff(got->data.data(), want.data(), want.size()), kRelTol * scale) << name << " layer " << l;
  }
  const auto want_prompt = g.Get("prompt_logits");
  ASSERT_EQ(logits.size(), want_prompt.size());
  double worst = 0;
  for (size_t t = 0; t < P; ++t) {
    const double d = MaxAbsDiff(&logits[t * V], &want_prompt[t * V], V);
    worst = std::max(worst, d);
    EXPECT_LE(d, tol) << name << " prompt position " << t;
  }

  // Greedy decoding, one token at a time through the cache.
  const auto want_decode = g.Get("decode_logits");
  int32_t next = Argmax(&logits[(P - 1) * V], V);
  for (size_t s = 0; s < g.greedy.size(); ++s) {
    ASSERT_EQ(next, g.greedy[s]) << name << " greedy step " << s;
    ForwardBatch step;
    step.Add(next, 0, true);
    logits.clear();
    ASSERT_TRUE(m.Forward(step, caches, logits).ok());
    const double d = MaxAbsDiff(logits.data(), &want_decode[s * V], V);
    worst = std::max(worst, d);
    EXPECT_LE(d, tol) << name << " decode step " << s;
    next = Argmax(logits.data(), V);
  }
  std::printf("%s: max |logit - reference| = %.3g over %zu prompt + %zu decode positions (tolerance %.3g)\n",
              name.c_str(), worst, P, g.greedy.size(), tol);
}

INSTANTIATE_TEST_SUITE_P(AllModels, GoldenTest, ::testing::ValuesIn(GoldenModels()), ModelParamName);
// The Lightning hybrids against transformers' MiniMaxForCausalLM: the same checks (its
// prefill runs the blocked form, its decode the recurrence, as ours do).
INSTANTIATE_TEST_SUITE_P(Hybrids, GoldenTest, ::testing::ValuesIn(HybridGoldenModels()), ModelParamName);

}  // namespace
}  // namespace m2::testing
