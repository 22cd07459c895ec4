// A batch mixing sequences at different positions (decode of one, prefill of
// another) gives the same logits as running each alone; caches can be forked (prefix
// shared) and truncated (speculative rollback) without changing results.
#include "golden_util.h"

namespace m2::testing {
namespace {

class BatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_ = LoadGolden("tiny-bf16-sharded");
    auto model = Model::Load(GoldenDir("tiny-bf16-sharded"), {.progress = false});
    ASSERT_TRUE(model.ok()) << model.status().message();
    model_ = std::move(model).value();
    V_ = model_->config().vocab_size;
  }
  // Logits of the last token after feeding `ids` to a fresh sequence, one call.
  std::vector<float> Alone(const std::vector<int32_t>& ids) {
    KvBlockPool pool(model_->cache_layout(4));
    SequenceCache c(&pool);
    SequenceCache* cs[] = {&c};
    ForwardBatch b;
    for (size_t i = 0; i < ids.size(); ++i) b.Add(ids[i], 0, i + 1 == ids.size());
    std::vector<float> out;
    EXPECT_TRUE(model_->Forward(b, cs, out).ok());
    return out;
  }
  Golden g_;
  std::unique_ptr<Model> model_;
  int64_t V_ = 0;
};

TEST_F(BatchTest, MixedPrefillAndDecodeMatchSeparateRuns) {
  const auto& p = g_.prompt;
  KvBlockPool pool(model_->cache_layout(4));
  SequenceCache a(&pool), b(&pool);
  SequenceCache* cs[] = {&a, &b};
  ForwardBatch first;  // a gets 8 tokens, b gets 3, interleaved
  for (int i = 0; i < 8; ++i) {
    first.Add(p[i], 0, false);
    if (i < 3) first.Add(p[i], 1, false);
  }
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(first, cs, logits).ok());
  EXPECT_TRUE(logits.empty());
  EXPECT_EQ(a.length(), 8);
  EXPECT_EQ(b.length(), 3);

  ForwardBatch second;  // decode for a, prefill of 4 more for b
  second.Add(p[8], 0, true);
  for (int i = 3; i < 7; ++i) second.Add(p[i], 1, i == 6);
  ASSERT_TRUE(model_->Forward(second, cs, logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(2 * V_));

  const auto want_a = Alone({p.begin(), p.begin() + 9});
  const auto want_b = Alone({p.begin(), p.begin() + 7});
  const double tol = 1e-4 * g_.logit_scale;
  EXPECT_LE(MaxAbsDiff(logits.data(), want_a.data(), V_), tol);
  EXPECT_LE(MaxAbsDiff(logits.data() + V_, want_b.data(), V_), tol);
}

TEST_F(BatchTest, ForkSharesPrefixAndTruncateRollsBack) {
  const auto& p = g_.prompt;
  KvBlockPool pool(model_->cache_layout(4));
  SequenceCache base(&pool);
  {
    SequenceCache* cs[] = {&base};
    ForwardBatch b;
    for (int i = 0; i < 6; ++i) b.Add(p[i], 0, false);  // 6 = one full block + half of one
    std::vector<float> out;
    ASSERT_TRUE(model_->Forward(b, cs, out).ok());
  }
  const int64_t blocks_before = pool.blocks_in_use();
  SequenceCache fork = base.Fork();
  EXPECT_EQ(pool.blocks_in_use(), blocks_before);  // shared, not copied
  // Both continue differently; the shared half-full block is copied on write.
  SequenceCache* cs[] = {&base, &fork};
  ForwardBatch b;
  b.Add(p[6], 0, true);
  b.Add(p[9], 1, true);
  std::vector<float> out;
  ASSERT_TRUE(model_->Forward(b, cs, out).ok());
  const double tol = 1e-4 * g_.logit_scale;
  std::vector<int32_t> ids_a(p.begin(), p.begin() + 7);
  std::vector<int32_t> ids_b(p.begin(), p.begin() + 6);
  ids_b.push_back(p[9]);
  EXPECT_LE(MaxAbsDiff(out.data(), Alone(ids_a).data(), V_), tol);
  EXPECT_LE(MaxAbsDiff(out.data() + V_, Alone(ids_b).data(), V_), tol);

  // Roll the fork back to 4 positions and feed other tokens: as if never written.
  ASSERT_TRUE(fork.Truncate(4).ok());
  EXPECT_FALSE(fork.Truncate(5).ok());  // cannot grow by truncation
  SequenceCache* only[] = {&fork};
  ForwardBatch c;
  c.Add(p[10], 0, false);
  c.Add(p[11], 0, true);
  out.clear();
  ASSERT_TRUE(model_->Forward(c, only, out).ok());
  std::vector<int32_t> ids_c(p.begin(), p.begin() + 4);
  ids_c.push_back(p[10]);
  ids_c.push_back(p[11]);
  EXPECT_LE(MaxAbsDiff(out.data(), Alone(ids_c).data(), V_), tol);
}

TEST_F(BatchTest, BadInputIsAnErrorAndLeavesCachesUnchanged) {
  KvBlockPool pool(model_->cache_layout(4));
  SequenceCache a(&pool);
  SequenceCache* cs[] = {&a};
  std::vector<float> out;
  ForwardBatch bad_token;
  bad_token.Add(1, 0, false);
  bad_token.Add(static_cast<int32_t>(V_), 0, true);
  Status st = model_->Forward(bad_token, cs, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  EXPECT_EQ(a.length(), 0);

  ForwardBatch bad_seq;
  bad_seq.Add(1, 3, true);
  st = model_->Forward(bad_seq, cs, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("sequence 3"), std::string::npos) << st.message();

  // A full pool is an error, not a crash, and gives back what it took.
  KvBlockPool tiny(model_->cache_layout(4), /*max_blocks=*/2);
  SequenceCache t(&tiny);
  SequenceCache* ts[] = {&t};
  ForwardBatch long_batch;
  for (int i = 0; i < 9; ++i) long_batch.Add(1, 0, false);
  st = model_->Forward(long_batch, ts, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("full"), std::string::npos) << st.message();
  EXPECT_EQ(t.length(), 0);
  EXPECT_EQ(tiny.blocks_in_use(), 0);
}

}  // namespace
}  // namespace m2::testing
