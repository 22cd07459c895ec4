// A model split over ranks (model/parallel.h), with the ranks as threads of this process
// (dist/comm.h, MakeThreadComms): the same code as under MPI except the transport.
//  - Logits bit-identical to the single-process model for R = 2 and 4 on the golden tiny
//    models and the bundled model, through prefill, batched decode, forks with
//    copy-on-write, truncation and the MTP modules.
//  - The serving core on rank 0: batched greedy and seeded requests, prefix cache, MTP and
//    lookup speculation with rollback: tokens identical to the single-process engine.
//  - Models that cannot be split that way are errors saying why.
#include "model/parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "dist/comm.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "test_model.h"

namespace m2 {
namespace {

const bool kSanitized = std::getenv("M2_SANITIZED") != nullptr;

// Loads `dir` split over `ranks` thread ranks; ranks > 0 follow; fn runs on rank 0's model.
// Returns the load error of rank 0, if any.
Status RunSplit(const std::string& dir, int ranks, const std::function<void(Model&)>& fn) {
  auto comms = MakeThreadComms(ranks);
  std::vector<std::thread> followers;
  for (int r = 1; r < ranks; ++r) {
    followers.emplace_back([&, r] {
      auto m = Model::Load(dir, {.progress = false, .threads = 1, .comm = comms[static_cast<size_t>(r)].get()});
      if (!m.ok()) return;  // rank 0 fails the same way (the plan is the same on every rank)
      const Status st = (*m)->Follow();
      EXPECT_TRUE(st.ok()) << st.message();
    });
  }
  Status result = Status::Ok();
  {
    auto m = Model::Load(dir, {.progress = false, .threads = 1, .comm = comms[0].get()});
    if (m.ok()) fn(**m);
    else result = m.status();
  }  // rank 0's model goes: the followers return
  for (auto& t : followers) t.join();
  return result;
}

// A fixed script of forward passes, every logit they return appended in order: two
// prompts in one batch, a fork that shares blocks (copy-on-write on its first write),
// batched decode steps, a truncation (a rejected draft), and the MTP modules when the
// model has them.
std::vector<float> Script(Model& m) {
  const int64_t V = m.config().vocab_size, Hd = m.config().hidden_size;
  std::vector<float> logits, hidden;
  KvBlockPool pool(m.cache_layout(/*block_tokens=*/4));
  std::vector<SequenceCache> caches;
  caches.emplace_back(&pool);
  caches.emplace_back(&pool);
  const auto run = [&](const ForwardBatch& b) {
    std::vector<SequenceCache*> cs;
    for (auto& c : caches) cs.push_back(&c);
    const Status st = m.Forward(b, cs, logits, hidden);
    EXPECT_TRUE(st.ok()) << st.message();
  };
  const auto tok = [&](int64_t i) { return static_cast<int32_t>((i * 37 + 11) % V); };
  ForwardBatch prompt;
  for (int64_t i = 0; i < 9; ++i) prompt.Add(tok(i), 0, true, true);
  for (int64_t i = 0; i < 6; ++i) prompt.Add(tok(i + 50), 1, i == 5, true);
  run(prompt);
  caches.push_back(caches[0].Fork());  // shares sequence 0's blocks, the last one partly filled
  for (int step = 0; step < 4; ++step) {
    ForwardBatch d;
    for (int32_t s = 0; s < 3; ++s) d.Add(tok(100 + step * 3 + s), s, true, true);
    run(d);
  }
  EXPECT_TRUE(caches[1].Truncate(7).ok());
  ForwardBatch again;
  again.Add(tok(200), 1, true);
  again.Add(tok(201), 1, true);
  run(again);
  if (m.num_mtp_modules() > 0) {
    // Module 0 over sequence 0's positions 0..7 (hidden rows 0..7 of the prompt pass),
    // then module 1 on module 0's output.
    std::vector<float> h1;
    MtpBatch b;
    for (int64_t i = 0; i < 8; ++i) b.Add(tok(i + 1), 0, i, true);
    std::vector<SequenceCache*> cs{&caches[0]};
    std::vector<float> h0(hidden.begin(), hidden.begin() + 8 * Hd);
    const Status st = m.ForwardMtp(0, b, h0, cs, logits, h1);
    EXPECT_TRUE(st.ok()) << st.message();
    if (m.num_mtp_modules() > 1) {
      MtpBatch b1;
      std::vector<float> h2;
      for (int64_t i = 0; i < 7; ++i) b1.Add(tok(i + 2), 0, i, true);
      h1.resize(static_cast<size_t>(7 * Hd));
      const Status st1 = m.ForwardMtp(1, b1, h1, cs, logits, h2);
      EXPECT_TRUE(st1.ok()) << st1.message();
    }
  }
  logits.insert(logits.end(), hidden.begin(), hidden.end());
  return logits;
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t differ = 0, first = a.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " values differ, the first at " << first
                        << " (" << a[first] << " vs " << b[first] << ")";
}

TEST(Parallel, LogitsAreBitIdenticalForEveryRankCount) {
  const std::vector<std::pair<std::string, std::vector<int>>> models = {
      {"models/m2-tiny", {2, 4}},
      {"testdata/golden/tiny-bf16-sharded", {2, 4}},
      {"testdata/golden/tiny-mtp", {2, 4}},
      {"testdata/golden/tiny-f32-gqa6", {2, 3, 6}},  // one KV head: every rank computes it
  };
  for (const auto& [dir, rank_counts] : models) {
    auto whole = Model::Load(dir, {.progress = false, .threads = 1});
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    const std::vector<float> want = Script(**whole);
    ASSERT_GT(want.size(), 0u);
    for (int ranks : rank_counts) {
      std::vector<float> got;
      const Status st = RunSplit(dir, ranks, [&](Model& m) {
        EXPECT_EQ(m.ranks(), ranks);
        got = Script(m);
      });
      ASSERT_TRUE(st.ok()) << dir << " over " << ranks << " ranks: " << st.message();
      ExpectSameBits(got, want, dir + " over " + std::to_string(ranks) + " ranks");
    }
  }
}

TEST(Parallel, EachRankHoldsItsSliceAndReportsIt) {
  const Status st = RunSplit("models/m2-tiny", 2, [&](Model& m) {
    const ShardPlan* p = m.shard_plan();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->expert_first, (std::vector<int64_t>{0, 8, 16}));
    EXPECT_EQ(p->q_first, (std::vector<int64_t>{0, 6, 12}));
    EXPECT_EQ(p->kv_count, (std::vector<int64_t>{1, 1}));
    EXPECT_EQ(m.cache_layout().layers[0].kv_heads, 1);
    Script(m);
    const std::vector<RankStats> stats = m.GatherRankStats();
    ASSERT_EQ(stats.size(), 2u);
    for (const RankStats& s : stats) {
      EXPECT_GT(s.forwards, 0);
      EXPECT_EQ(s.forwards, stats[0].forwards);  // every pass ran on both
      EXPECT_GT(s.comm.bytes_sent, 0);
      EXPECT_GT(s.weight_bytes, 0);
    }
    // Each rank reads about half the weights (the embedding-sized lm_head is split too).
    auto whole = Model::Load("models/m2-tiny", {.progress = false, .threads = 1});
    ASSERT_TRUE(whole.ok());
    const int64_t all = (*whole)->GatherRankStats()[0].weight_bytes;
    for (const RankStats& s : stats) {
      EXPECT_LT(s.weight_bytes, all * 6 / 10);
      EXPECT_GT(s.weight_bytes, all * 4 / 10);
    }
  });
  ASSERT_TRUE(st.ok()) << st.message();
}

TEST(Parallel, ModelsThatCannotBeSplitThatWayAreErrorsSayingWhy) {
  const auto error = [](const std::string& dir, int ranks) {
    const Status st = RunSplit(dir, ranks, [](Model&) { ADD_FAILURE() << "loaded"; });
    return st.ok() ? std::string("ok") : st.message();
  };
  EXPECT_NE(error("testdata/golden/tiny-f32-gqa6", 4).find("query heads"), std::string::npos);
  EXPECT_NE(error("testdata/golden/tiny-fp8", 2).find("FP8"), std::string::npos);
  EXPECT_NE(error("testdata/golden/tiny-hybrid-m1", 2).find("Lightning"), std::string::npos);
  EXPECT_NE(error("models/m2-tiny", 3).find("KV heads"), std::string::npos);
}

// The serving core on a split model: batched requests (greedy, seeded, MTP and lookup
// drafts, a pool small enough to preempt, the prefix cache on) give the tokens of the
// single-process engine.
TEST(Parallel, ServingCoreGivesTheSameTokens) {
  using namespace runtime;
  const auto& tok = testing::BundledTokenizer();
  const char* texts[] = {
      "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
      "What is 17 times 23? Let me think.",
      "for i in range(10):\n    print(i)\nfor j in range(10):\n",
      "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n",
  };
  const auto requests = [&] {
    std::vector<Request> reqs;
    for (size_t i = 0; i < 8; ++i) {
      Request r;
      r.prompt = tok.Encode(texts[i % 4], false);
      r.options.max_new_tokens = kSanitized ? 12 : 32;
      r.options.ignore_eos = true;
      r.sampling.temperature = i % 2 ? 1.0 : 0.0;
      r.sampling.top_k = 40;
      r.sampling.seed = 7 + i;
      if (i % 3 == 1) r.spec = {.mode = SpecMode::kMtp, .draft = 3};
      if (i % 3 == 2) r.spec = {.mode = SpecMode::kLookup, .draft = 4};
      reqs.push_back(std::move(r));
    }
    return reqs;
  };
  const auto run = [&](Model& m) {
    EngineOptions o;
    o.kv_tokens = 256;
    o.max_batch_tokens = 40;
    o.spec = {.mode = SpecMode::kMtp, .draft = 3};
    auto e = Engine::Create(m, &tok, o);
    EXPECT_TRUE(e.ok()) << e.status().message();
    std::map<size_t, std::vector<int32_t>> out;
    auto reqs = requests();
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].on_done = [&out, i](const Status& st, GenerationResult& r) {
        EXPECT_TRUE(st.ok()) << st.message();
        out[i] = r.tokens;
      };
      EXPECT_TRUE((*e)->Submit(std::move(reqs[i])).ok());
    }
    int steps = 0;
    while ((*e)->Step()) EXPECT_LT(++steps, 100000);
    EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
    return out;
  };
  auto whole = Model::Load("models/m2-tiny", {.progress = false, .threads = 1});
  ASSERT_TRUE(whole.ok());
  const auto want = run(**whole);
  ASSERT_EQ(want.size(), 8u);
  std::map<size_t, std::vector<int32_t>> got;
  const Status st = RunSplit("models/m2-tiny", 2, [&](Model& m) { got = run(m); });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace m2
