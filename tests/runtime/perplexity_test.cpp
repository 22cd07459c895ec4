// Perplexity against an independent computation: for every scored token, a fresh forward
// pass over exactly the window the documented rule gives it, and log-softmax in long double.
#include "runtime/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_model.h"

namespace m2::runtime {
namespace {

std::unique_ptr<Model> LoadModel() {
  auto m = Model::Load("testdata/golden/tiny-f32-gqa6", {.progress = false});
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(*m);
}

std::vector<int32_t> Ids(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + 11) % 320);
  return ids;
}

// -log p(ids[t] | ids[begin..t-1]) from a fresh cache, in long double.
long double DirectNll(Model& model, const std::vector<int32_t>& ids, int64_t begin, int64_t t) {
  KvBlockPool pool(model.cache_layout());
  SequenceCache cache(&pool);
  SequenceCache* caches[] = {&cache};
  ForwardBatch b;
  for (int64_t i = begin; i < t; ++i) b.Add(ids[i], 0, i + 1 == t);
  std::vector<float> logits;
  EXPECT_TRUE(model.Forward(b, caches, logits).ok());
  long double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<long double>(l));
  return std::log(sum) - logits[ids[t]];
}

TEST(Perplexity, OneWindowEqualsTheDirectComputation) {
  auto model = LoadModel();
  const auto ids = Ids(20);
  auto r = ComputePerplexity(*model, ids, {.context = 64, .stride = 32});
  ASSERT_TRUE(r.ok()) << r.status().message();
  long double sum = 0;
  for (int t = 1; t < 20; ++t) sum += DirectNll(*model, ids, 0, t);
  EXPECT_EQ(r->scored_tokens, 19);
  EXPECT_EQ(r->windows, 1);
  // Short windows go through the decode kernels, longer ones through prefill: fp32 sums
  // in different orders (relative differences ~1e-8).
  EXPECT_NEAR(r->mean_nll, static_cast<double>(sum / 19), 1e-6);
  EXPECT_NEAR(r->perplexity, std::exp(static_cast<double>(sum / 19)), 1e-6 * r->perplexity);
  // A random model over 320 tokens: perplexity is in the hundreds, not 1 or 1e9.
  EXPECT_GT(r->perplexity, 20);
  EXPECT_LT(r->perplexity, 5000);
}

TEST(Perplexity, StridedWindowsScoreEachTokenOnceWithItsWindowsContext) {
  auto model = LoadModel();
  const auto ids = Ids(23);
  const int64_t context = 8, stride = 3;
  auto r = ComputePerplexity(*model, ids, {.context = context, .stride = stride});
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Windows [0,8) [3,11) [6,14) [9,17) [12,20) [15,23): window k scores [prev end, end).
  long double sum = 0;
  int scored = 0;
  int64_t done = 1;
  for (int64_t begin = 0;; begin += stride) {
    const int64_t end = std::min<int64_t>(23, begin + context);
    for (int64_t t = std::max(done, begin + 1); t < end; ++t, ++scored) sum += DirectNll(*model, ids, begin, t);
    done = end;
    if (end == 23) break;
  }
  EXPECT_EQ(scored, 22);
  EXPECT_EQ(r->scored_tokens, 22);
  EXPECT_EQ(r->windows, 6);
  EXPECT_EQ(r->evaluated_tokens, 8 * 6);
  // Batched prefill and one-by-one runs round differently in the last bits.
  EXPECT_NEAR(r->mean_nll, static_cast<double>(sum / 22), 1e-5);

  // Disjoint windows: the first token of each later window has no context and is skipped.
  auto disjoint = ComputePerplexity(*model, ids, {.context = 8, .stride = 8});
  ASSERT_TRUE(disjoint.ok());
  EXPECT_EQ(disjoint->windows, 3);
  EXPECT_EQ(disjoint->scored_tokens, 7 + 7 + 6);
}

TEST(Perplexity, BadInputIsAnError) {
  auto model = LoadModel();
  const auto ids = Ids(10);
  auto one = ComputePerplexity(*model, std::vector<int32_t>{5}, {});
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("at least 2 tokens"), std::string::npos);
  auto stride = ComputePerplexity(*model, ids, {.context = 8, .stride = 9});
  ASSERT_FALSE(stride.ok());
  EXPECT_NE(stride.status().message().find("stride"), std::string::npos);
  auto ctx = ComputePerplexity(*model, ids, {.context = 100000, .stride = 9});
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.status().message().find("max_position_embeddings"), std::string::npos);
  auto vocab = ComputePerplexity(*model, std::vector<int32_t>{1, 2, 999}, {.context = 8, .stride = 4});
  ASSERT_FALSE(vocab.ok());
  EXPECT_NE(vocab.status().message().find("id 999"), std::string::npos);
}

TEST(Perplexity, NllOfAKnownRow) {
  // softmax([0, ln 3]) = [1/4, 3/4].
  const std::vector<float> row = {0.f, static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(NegativeLogLikelihood(row, 0), std::log(4.0), 1e-7);
  EXPECT_NEAR(NegativeLogLikelihood(row, 1), std::log(4.0 / 3.0), 1e-7);
  // Large logits do not overflow.
  const std::vector<float> big = {1000.f, 1000.f};
  EXPECT_NEAR(NegativeLogLikelihood(big, 1), std::log(2.0), 1e-12);
}

TEST(Perplexity, KlOfKnownRows) {
  // p = softmax([0, ln 3]) = [1/4, 3/4], q = uniform: KL = 1/4 ln(1/2) + 3/4 ln(3/2).
  const std::vector<float> p = {0.f, static_cast<float>(std::log(3.0))};
  const std::vector<float> q = {5.f, 5.f};
  EXPECT_NEAR(KlDivergence(p, q), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_EQ(KlDivergence(p, p), 0.0);
  // Shifting every logit changes nothing.
  const std::vector<float> p_shift = {100.f, 100.f + static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(KlDivergence(p_shift, q), KlDivergence(p, q), 1e-5);
}

TEST(Perplexity, ReferenceModelComparison) {
  auto model = LoadModel();
  const auto ids = Ids(30);
  // Against itself: same perplexity, KL 0, same top tokens.
  auto self_ref = LoadModel();
  auto same = ComputePerplexity(*model, ids, {.context = 16, .stride = 8, .reference = self_ref.get()});
  ASSERT_TRUE(same.ok()) << same.status().message();
  ASSERT_TRUE(same->has_reference);
  EXPECT_DOUBLE_EQ(same->reference.perplexity, same->perplexity);
  EXPECT_EQ(same->reference.mean_kl, 0.0);
  EXPECT_EQ(same->reference.top1_agreement, 1.0);

  // Against a different model: see RuntimeCli.PerplexityAgainstAReference (a q4 copy).
}

TEST(Perplexity, ReferenceWithAnotherVocabularyIsAnError) {
  auto model = LoadModel();
  auto fp8 = Model::Load("testdata/golden/tiny-fp8", {.progress = false});
  ASSERT_TRUE(fp8.ok()) << fp8.status().message();
  ASSERT_NE((*fp8)->config().vocab_size, model->config().vocab_size);
  auto r = ComputePerplexity(*model, Ids(10), {.context = 8, .stride = 4, .reference = fp8->get()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("vocabulary size"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace m2::runtime
