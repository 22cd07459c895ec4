// The Lightning hybrids beyond the golden test: every layer's attention output against
// transformers, prefill in chunks of every size (runs of the recurrence and of the
// blocked form, block boundaries anywhere), sequences batched together, a state that does
// not grow with the context, and the clear refusals where a state cannot roll back.
#include "golden_util.h"

#include <fmt/format.h>

namespace m2::testing {
namespace {

class HybridTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    g_ = LoadGolden(GetParam());
    auto model = Model::Load(GoldenDir(GetParam()), {.progress = false});
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_ = std::move(model).value();
    V_ = model_->config().vocab_size;
    tol_ = 1e-4 * g_.logit_scale;  // as golden_test.cpp, and for the same reasons
  }
  // The prompt fed in chunks of the given sizes (cycled), logits at every position.
  std::vector<float> Chunked(const std::vector<int64_t>& sizes) {
    KvBlockPool pool(model_->cache_layout(4));
    SequenceCache c(&pool);
    SequenceCache* cs[] = {&c};
    std::vector<float> out;
    size_t i = 0;
    for (size_t k = 0; i < g_.prompt.size(); ++k) {
      ForwardBatch b;
      for (int64_t j = 0; j < sizes[k % sizes.size()] && i < g_.prompt.size(); ++j, ++i) b.Add(g_.prompt[i], 0, true);
      EXPECT_TRUE(model_->Forward(b, cs, out).ok());
    }
    return out;
  }
  Golden g_;
  std::unique_ptr<Model> model_;
  int64_t V_ = 0;
  double tol_ = 0;
};

TEST_P(HybridTest, EveryLayersAttentionOutputMatchesTransformers) {
  const ModelConfig& c = model_->config();
  ASSERT_TRUE(c.hybrid);
  ASSERT_GT(c.num_lightning_layers(), 0);
  KvBlockPool pool(model_->cache_layout(4));
  SequenceCache cache(&pool);
  SequenceCache* cs[] = {&cache};
  ForwardBatch b;
  for (int32_t id : g_.prompt) b.Add(id, 0, false);
  std::vector<float> logits;
  CollectingTracer trace;
  ASSERT_TRUE(model_->Forward(b, cs, logits, &trace).ok());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto* got = trace.Find(fmt::format("layers.{}.attn_out", l));
    ASSERT_NE(got, nullptr);
    const auto want = g_.Get(fmt::format("attn_out.{}", l));
    ASSERT_EQ(got->data.size(), want.size());
    double scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    EXPECT_LE(MaxAbsDiff(got->data.data(), want.data(), want.size()), 1e-4 * scale)
        << GetParam() << " layer " << l << " (" << LayerTypeName(c.layer_type(l)) << ")";
  }
}

TEST_P(HybridTest, ChunkedPrefillOfAnySizeMatchesTransformers) {
  // Chunks of 1..4 run the recurrence, longer ones the blocked form; with block_size 8
  // the blocks of a chunk start anywhere relative to the prompt.
  const auto want = g_.Get("prompt_logits");
  for (const std::vector<int64_t>& sizes :
       std::vector<std::vector<int64_t>>{{1}, {3}, {5}, {8}, {9}, {2, 7}, {13, 1}, {21}}) {
    const auto got = Chunked(sizes);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(MaxAbsDiff(got.data(), want.data(), want.size()), tol_)
        << GetParam() << " chunks of " << fmt::format("{}", fmt::join(sizes, ","));
  }
}

TEST_P(HybridTest, BatchedSequencesMatchSeparateRuns) {
  // Two sequences, rows interleaved: the prompt, and the prompt reversed; then a step
  // that decodes one and prefills the other.
  const auto& p = g_.prompt;
  std::vector<int32_t> r(p.rbegin(), p.rend());
  KvBlockPool pool(model_->cache_layout(4));
  SequenceCache a(&pool), b(&pool);
  SequenceCache* cs[] = {&a, &b};
  ForwardBatch first;
  for (size_t i = 0; i < 12; ++i) {
    first.Add(p[i], 0, false);
    if (i < 10) first.Add(r[i], 1, false);
  }
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(first, cs, logits).ok());
  ForwardBatch second;
  second.Add(p[12], 0, true);
  for (size_t i = 10; i < 19; ++i) second.Add(r[i], 1, i == 18);
  ASSERT_TRUE(model_->Forward(second, cs, logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(2 * V_));

  const auto alone = [&](const std::vector<int32_t>& ids) {
    KvBlockPool own(model_->cache_layout(4));
    SequenceCache c(&own);
    SequenceCache* one[] = {&c};
    ForwardBatch fb;
    for (size_t i = 0; i < ids.size(); ++i) fb.Add(ids[i], 0, i + 1 == ids.size());
    std::vector<float> out;
    EXPECT_TRUE(model_->Forward(fb, one, out).ok());
    return out;
  };
  const auto want_a = alone({p.begin(), p.begin() + 13});
  const auto want_b = alone({r.begin(), r.begin() + 19});
  EXPECT_LE(MaxAbsDiff(logits.data(), want_a.data(), V_), tol_);
  EXPECT_LE(MaxAbsDiff(logits.data() + V_, want_b.data(), V_), tol_);
}

TEST_P(HybridTest, LightningLayersKeepAFixedStateAndNoBlocks) {
  const ModelConfig& c = model_->config();
  const CacheLayout layout = model_->cache_layout(4);
  int64_t kv_layers = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto& spec = layout.layers[static_cast<size_t>(l)];
    if (c.layer_type(l) == LayerType::kLightning) {
      EXPECT_EQ(spec.kind, LayerCacheKind::kRecurrentState);
      EXPECT_EQ(spec.state_floats, c.num_attention_heads * c.head_dim * c.head_dim);
    } else {
      EXPECT_EQ(spec.kind, LayerCacheKind::kKeyValue);
      ++kv_layers;
    }
  }
  KvBlockPool pool(layout);
  // A block holds keys and values of the softmax layers only.
  EXPECT_EQ(pool.block_floats(), kv_layers * 2 * 4 * c.num_key_value_heads * c.head_dim);
  SequenceCache cache(&pool);
  SequenceCache* cs[] = {&cache};
  ForwardBatch b;
  for (int32_t id : g_.prompt) b.Add(id, 0, false);
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(b, cs, logits).ok());
  // The state moved (the prompt was absorbed) and a rollback is refused, clearly.
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_type(l) != LayerType::kLightning) continue;
    const float* st = cache.State(l);
    double mass = 0;
    for (int64_t i = 0; i < c.lightning_state_floats(); ++i) mass += std::fabs(st[i]);
    EXPECT_GT(mass, 0.0) << "layer " << l;
  }
  const Status st = cache.Truncate(cache.length() - 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("recurrent state"), std::string::npos) << st.message();
  EXPECT_EQ(cache.length(), static_cast<int64_t>(g_.prompt.size()));
}

TEST_P(HybridTest, SavedStatesRestoreAnEarlierPosition) {
  // The speculative rollback of the Lightning models: save at position 12, run 6 more
  // tokens, restore, run different tokens: the logits equal a run that never saw the 6.
  const auto& p = g_.prompt;
  KvBlockPool pool(model_->cache_layout(4));
  SequenceCache cache(&pool), plain(&pool);
  SequenceCache* cs[] = {&cache};
  SequenceCache* ps[] = {&plain};
  const auto feed = [&](SequenceCache* const* c, std::vector<int32_t> ids, bool logits) {
    ForwardBatch b;
    for (size_t i = 0; i < ids.size(); ++i) b.Add(ids[i], 0, logits && i + 1 == ids.size());
    std::vector<float> out;
    EXPECT_TRUE(model_->Forward(b, std::span<SequenceCache* const>(c, 1), out).ok());
    return out;
  };
  feed(cs, {p.begin(), p.begin() + 12}, false);
  cache.SaveStates();
  feed(cs, {p.begin() + 12, p.begin() + 18}, false);
  ASSERT_TRUE(cache.RestoreSavedStates().ok());
  EXPECT_EQ(cache.length(), 12);
  EXPECT_FALSE(cache.RestoreSavedStates().ok());  // a save is used once
  const std::vector<int32_t> other = {p[20], p[3], p[7]};
  const auto got = feed(cs, other, true);
  std::vector<int32_t> ids(p.begin(), p.begin() + 12);
  ids.insert(ids.end(), other.begin(), other.end());
  const auto want = feed(ps, ids, true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(MaxAbsDiff(got.data(), want.data(), want.size()), tol_);
}

TEST_P(HybridTest, FullPoolLeavesCachesAsTheyWere) {
  // A pool of one block: the second sequence cannot grow. Forward fails, and the first
  // sequence's Extend is undone without touching its (recurrent) state.
  KvBlockPool pool(model_->cache_layout(4), /*max_blocks=*/1);
  SequenceCache a(&pool), b(&pool);
  SequenceCache* cs[] = {&a, &b};
  ForwardBatch fb;
  for (int i = 0; i < 3; ++i) fb.Add(g_.prompt[i], 0, false);
  for (int i = 0; i < 3; ++i) fb.Add(g_.prompt[i], 1, false);
  std::vector<float> logits;
  const Status st = model_->Forward(fb, cs, logits);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(a.length(), 0);
  EXPECT_EQ(b.length(), 0);
  EXPECT_EQ(pool.blocks_in_use(), 0);
}

INSTANTIATE_TEST_SUITE_P(Hybrids, HybridTest, ::testing::ValuesIn(HybridGoldenModels()), ModelParamName);

}  // namespace
}  // namespace m2::testing
