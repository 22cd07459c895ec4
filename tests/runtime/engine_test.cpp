// The serving core: many requests at once give each the tokens it gets alone (greedy
// and seeded sampling), chunked prefill next to decoding streams, the shared prefix
// cache, a KV pool far too small for the load (queueing, preemption, every request ends,
// no block leaks), the queue limit, cancellation, non-finite logits, and a loop thread
// fed from several threads.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_model.h"

namespace m2::runtime {
namespace {

Model& Tiny() { return testing::BundledModel(); }
const text::Tokenizer& TinyTokenizer() { return testing::BundledTokenizer(); }

// Prompts of different lengths: text from the model's world, so the continuations are
// the model's usual (not random-token noise), plus random ids for length.
std::vector<std::vector<int32_t>> Prompts(int count, uint32_t seed) {
  const char* texts[] = {"def parse(self, text):\n    ", "What is 17 times 23?", "import os\nimport sys\n\n",
                         "class Stack:\n    def push(self, x):", "The capital of France is"};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, 8000);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p;
    const int extra = (i * 37) % 90;
    for (int j = 0; j < extra; ++j) p.push_back(tok(rng));
    auto t = TinyTokenizer().Encode(texts[i % 5], false);
    p.insert(p.end(), t.begin(), t.end());
    out.push_back(p);
  }
  return out;
}

Request MakeRequest(std::vector<int32_t> prompt, int64_t max_new, SamplingParams sp) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling = sp;
  r.options.max_new_tokens = max_new;
  r.options.ignore_eos = true;
  return r;
}

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

SamplingParams Seeded(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.9;
  p.top_k = 50;
  p.seed = seed;
  return p;
}

std::vector<int32_t> Solo(const Request& r, EngineOptions o = {}) {
  o.prefix_cache = false;
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  EXPECT_TRUE(e.ok());
  auto out = (*e)->Generate(r);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out->tokens : std::vector<int32_t>{};
}

struct Collected {
  std::map<uint64_t, GenerationResult> results;
  std::map<uint64_t, Status> errors;
  std::mutex mu;
};

// Submits all, steps until every one is done; checks the step count stays bounded.
void RunAll(Engine& e, std::vector<Request> reqs, Collected& c, std::vector<uint64_t>& ids) {
  for (auto& r : reqs) {
    auto* cp = &c;
    auto id_slot = std::make_shared<uint64_t>(0);
    r.on_done = [cp, id_slot](const Status& st, GenerationResult& res) {
      std::lock_guard<std::mutex> lock(cp->mu);
      cp->results[*id_slot] = res;
      cp->errors[*id_slot] = st;
    };
    auto id = e.Submit(std::move(r));
    ASSERT_TRUE(id.ok()) << id.status().message();
    *id_slot = *id;
    ids.push_back(*id);
  }
  int steps = 0;
  while (e.Step()) ASSERT_LT(++steps, 100000) << "the engine does not finish";
}

TEST(Engine, SixteenConcurrentGreedyRequestsMatchSoloRuns) {
  const auto prompts = Prompts(16, 1);
  EngineOptions o;
  o.max_batch_tokens = 64;  // forces chunked prefill next to decoding streams
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  ASSERT_TRUE(e.ok());
  std::vector<Request> reqs;
  for (int i = 0; i < 16; ++i) reqs.push_back(MakeRequest(prompts[i], 20 + 3 * i, Greedy()));
  Collected c;
  std::vector<uint64_t> ids;
  RunAll(**e, reqs, c, ids);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(c.errors[ids[i]].ok());
    EXPECT_EQ(c.results[ids[i]].stop_reason, StopReason::kMaxTokens);
    EXPECT_EQ(c.results[ids[i]].tokens, Solo(reqs[i])) << "request " << i;
  }
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
  EXPECT_GT((*e)->stats().steps, 20);
}

TEST(Engine, SeededSamplingDoesNotDependOnTheBatch) {
  const auto prompts = Prompts(6, 2);
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), {});
  ASSERT_TRUE(e.ok());
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(MakeRequest(prompts[i], 30, Seeded(100 + i)));
  Collected c;
  std::vector<uint64_t> ids;
  RunAll(**e, reqs, c, ids);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.results[ids[i]].tokens, Solo(reqs[i])) << "request " << i;
  // Different seeds do give different samples (the test would pass vacuously otherwise).
  EXPECT_NE(c.results[ids[0]].tokens, Solo(MakeRequest(prompts[0], 30, Seeded(999))));
}

// A long prompt arriving while streams decode is prefilled in chunks: the streams keep
// getting a token every step.
TEST(Engine, LongPromptIsChunkedWhileOthersDecode) {
  EngineOptions o;
  o.max_batch_tokens = 32;
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  ASSERT_TRUE(e.ok());
  const auto prompts = Prompts(4, 3);
  std::vector<int64_t> tokens_seen(4, 0);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    Request r = MakeRequest(prompts[i], 200, Greedy());
    r.on_token = [&tokens_seen, i](int32_t) { ++tokens_seen[i]; };
    ids.push_back(*(*e)->Submit(std::move(r)));
  }
  for (int s = 0; s < 30; ++s) (*e)->Step();
  for (int i = 0; i < 4; ++i) ASSERT_GT(tokens_seen[i], 0) << "stream " << i << " is not decoding yet";
  std::vector<int32_t> long_prompt(600, 0);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = static_cast<int32_t>(i * 7 % 8000);
  ASSERT_TRUE((*e)->Submit(MakeRequest(long_prompt, 4, Greedy())).ok());
  // 600 tokens at 32 - 4 per step take ~22 steps; every decoding stream gains one token per step.
  for (int s = 0; s < 10; ++s) {
    const auto before = tokens_seen;
    (*e)->Step();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(tokens_seen[i], before[i] + 1) << "stream " << i << " step " << s;
  }
  for (uint64_t id : ids) (*e)->Cancel(id);
  while ((*e)->Step()) {
  }
}

// The q8 cache (kernels/attention.h: int8 rows with a scale per 32 values): a row's bytes
// depend only on its own values, so batched requests, chunked prefill and the prefix cache
// give each request the tokens it gets alone on a q8 cache; the same memory holds 64 / 36
// as many tokens as bf16 for the bundled model's rows of 32; and a model whose head_dim is
// not a multiple of 32 is refused with a reason, never run.
TEST(Engine, Q8CacheBatchesAndSharesPrefixesLikeSoloRuns) {
  const auto prompts = Prompts(6, 4);
  EngineOptions o;
  o.kv_dtype = KvDtype::kQ8;
  o.max_batch_tokens = 48;
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  ASSERT_TRUE(e.ok()) << e.status().message();
  std::vector<Request> reqs;
  std::vector<int32_t> system(40);  // a shared prefix: two whole blocks of 16
  for (size_t i = 0; i < system.size(); ++i) system[i] = static_cast<int32_t>(70 + i * 11 % 6000);
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = system;
    p.insert(p.end(), prompts[i].begin(), prompts[i].end());
    reqs.push_back(MakeRequest(p, 12 + i, Greedy()));
  }
  Collected c;
  std::vector<uint64_t> ids;
  RunAll(**e, {reqs[0]}, c, ids);
  RunAll(**e, std::vector<Request>(reqs.begin() + 1, reqs.end()), c, ids);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(c.errors[ids[i]].ok()) << c.errors[ids[i]].message();
    EXPECT_EQ(c.results[ids[i]].tokens, Solo(reqs[i], o)) << "request " << i;
  }
  EXPECT_GT((*e)->stats().prefix_hits, 0);

  EngineOptions bf16;
  bf16.kv_memory_gib = o.kv_memory_gib = 0.01;
  auto blocks_q8 = KvBudgetBlocks(Tiny().config(), o), blocks_bf16 = KvBudgetBlocks(Tiny().config(), bf16);
  ASSERT_TRUE(blocks_q8.ok() && blocks_bf16.ok());
  ASSERT_EQ(Tiny().config().head_dim, 32);
  EXPECT_NEAR(static_cast<double>(*blocks_q8) / static_cast<double>(*blocks_bf16), 64.0 / 36.0, 0.01);

  ModelConfig odd = Tiny().config();
  odd.head_dim = 48;
  auto refused = KvBudgetBlocks(odd, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("head_dim is 48"), std::string::npos) << refused.status().message();
  EXPECT_TRUE(KvBudgetBlocks(odd, bf16).ok());
}

TEST(Engine, PrefixCacheSharesFullBlocksAcrossRequests) {
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), {});
  ASSERT_TRUE(e.ok());
  std::vector<int32_t> system(100);
  for (size_t i = 0; i < system.size(); ++i) system[i] = static_cast<int32_t>(50 + i * 13 % 7000);
  auto first = (*e)->Generate(MakeRequest(system, 8, Greedy()));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->stats.reused_tokens, 0);
  // A second request that starts with the same 100 tokens: 6 full blocks of 16 reused.
  std::vector<int32_t> second = system;
  for (int t : {5, 6, 7, 8, 9}) second.push_back(t);
  auto r2 = (*e)->Generate(MakeRequest(second, 8, Greedy()));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->stats.reused_tokens, 96);
  EXPECT_EQ(r2->stats.prefill_tokens, 105 - 96);
  EXPECT_EQ(r2->tokens, Solo(MakeRequest(second, 8, Greedy())));
  // The first request's generated tokens are cached too: its prompt + 7 of its 8 ids
  // (107 positions) = 6 full blocks; a prompt equal to it reuses them all.
  std::vector<int32_t> third = system;
  third.insert(third.end(), first->tokens.begin(), first->tokens.end());
  auto r3 = (*e)->Generate(MakeRequest(third, 4, Greedy()));
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->stats.reused_tokens, 96);
  // A prompt that differs in its first token shares nothing.
  std::vector<int32_t> other = second;
  other[0] += 1;
  auto r4 = (*e)->Generate(MakeRequest(other, 4, Greedy()));
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(r4->stats.reused_tokens, 0);
  const EngineStats st = (*e)->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_GT(st.kv_blocks_cached, 0);
  EXPECT_GT(st.prefix_hits, 0);
  EXPECT_EQ(st.cached_prompt_tokens, 96 + 96);
}

// Exact prompt boundary: a prompt of exactly whole blocks, all cached, still runs its
// last token (writing into a copy of the cached block, which stays intact).
TEST(Engine, WholeBlockPromptReusesAllButTheLastToken) {
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), {});
  ASSERT_TRUE(e.ok());
  std::vector<int32_t> p(64);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(300 + i);
  auto a = (*e)->Generate(MakeRequest(p, 6, Greedy()));
  auto b = (*e)->Generate(MakeRequest(p, 6, Greedy()));
  auto c = (*e)->Generate(MakeRequest(p, 6, Greedy()));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(b->stats.reused_tokens, 63);
  EXPECT_EQ(c->stats.reused_tokens, 63);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->tokens, c->tokens);
}

// A pool of 8 blocks (128 tokens) for 12 requests needing up to ~140 tokens each: they
// queue, get preempted and recomputed; every one ends with its tokens or a clear
// reason, outputs of the completed ones equal their solo runs, and no block leaks.
TEST(Engine, TinyPoolManyRequestsAllEndNoLeaks) {
  EngineOptions o;
  o.kv_tokens = 128;
  o.max_batch_tokens = 48;
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->pool().max_blocks(), 8);
  const auto prompts = Prompts(12, 4);
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) reqs.push_back(MakeRequest(prompts[i], 10 + 5 * i, Greedy()));
  Collected c;
  std::vector<uint64_t> ids;
  RunAll(**e, reqs, c, ids);
  int completed = 0, full = 0;
  for (int i = 0; i < 12; ++i) {
    const GenerationResult& r = c.results[ids[i]];
    ASSERT_TRUE(c.errors.count(ids[i])) << "request " << i << " never ended";
    EXPECT_TRUE(c.errors[ids[i]].ok());
    if (r.stop_reason == StopReason::kMaxTokens) {
      ++completed;
      EXPECT_EQ(r.tokens, Solo(reqs[i], o)) << "request " << i;
    } else {
      // Only a request whose prompt + output outgrows the whole pool may end this way.
      EXPECT_EQ(r.stop_reason, StopReason::kCacheFull) << "request " << i;
      EXPECT_GT(prompts[i].size() + reqs[i].options.max_new_tokens, 128u - 16);
      ++full;
    }
  }
  EXPECT_GT(completed, 6);
  const EngineStats st = (*e)->stats();
  EXPECT_GT(st.preemptions, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
  EXPECT_LE((*e)->pool().blocks_allocated(), 8);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
}

TEST(Engine, PromptLargerThanThePoolAndFullQueueAreRefused) {
  EngineOptions o;
  o.kv_tokens = 32;
  o.max_queue = 2;
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  ASSERT_TRUE(e.ok());
  auto big = (*e)->Submit(MakeRequest(std::vector<int32_t>(40, 5), 4, Greedy()));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("whole KV cache"), std::string::npos) << big.status().message();
  ASSERT_TRUE((*e)->Submit(MakeRequest({1, 2, 3}, 4, Greedy())).ok());
  ASSERT_TRUE((*e)->Submit(MakeRequest({1, 2, 3}, 4, Greedy())).ok());
  auto third = (*e)->Submit(MakeRequest({1, 2, 3}, 4, Greedy()));
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("busy"), std::string::npos) << third.status().message();
  EXPECT_EQ((*e)->stats().requests_refused, 2);
  while ((*e)->Step()) {
  }
  EXPECT_TRUE((*e)->Submit(MakeRequest({1, 2, 3}, 4, Greedy())).ok());  // room again
  auto bad = (*e)->Submit(MakeRequest({1, 999999}, 4, Greedy()));
  EXPECT_FALSE(bad.ok());
  EngineOptions zero;
  zero.kv_memory_gib = 1e-9;
  EXPECT_FALSE(Engine::Create(Tiny(), nullptr, zero).ok());
  zero = {};
  zero.max_batch_tokens = 0;
  EXPECT_FALSE(Engine::Create(Tiny(), nullptr, zero).ok());
}

TEST(Engine, CancelFreesBlocksWithinOneStep) {
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), {});
  ASSERT_TRUE(e.ok());
  bool done = false;
  StopReason reason = StopReason::kEos;
  Request r = MakeRequest(Prompts(1, 5)[0], 1000, Greedy());
  r.on_done = [&](const Status&, GenerationResult& res) {
    done = true;
    reason = res.stop_reason;
  };
  auto id = (*e)->Submit(std::move(r));
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 5; ++i) (*e)->Step();
  EXPECT_GT((*e)->pool().blocks_in_use(), 0);
  (*e)->Cancel(*id);
  (*e)->Step();
  EXPECT_TRUE(done);
  EXPECT_EQ(reason, StopReason::kCancelled);
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
  EXPECT_FALSE((*e)->Step());
}

// A model whose lm_head row 0 is NaN: every logit row has a NaN, and the request ends
// with an error naming the position instead of sampling token 0.
TEST(Engine, NonFiniteLogitsEndTheRequestWithAnError) {
  namespace fs = std::filesystem;
  const std::string dir = m2::testing::MakeTestModel("engine_nan");
  const std::string st = dir + "/model.safetensors";
  std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  auto h = nlohmann::json::parse(header);
  ASSERT_TRUE(h.contains("lm_head.weight"));
  ASSERT_EQ(h["lm_head.weight"]["dtype"], "F32");
  const uint64_t begin = h["lm_head.weight"]["data_offsets"][0];
  const float nan = std::nanf("");
  f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
  for (int i = 0; i < 8; ++i) f.write(reinterpret_cast<const char*>(&nan), 4);
  f.close();
  auto m = Model::Load(dir, {.progress = false});
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto e = Engine::Create(**m, nullptr, {});
  ASSERT_TRUE(e.ok());
  auto r = (*e)->Generate(MakeRequest({1, 2, 3}, 4, Greedy()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("non-finite logit"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("position 2"), std::string::npos) << r.status().message();
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
}

// The engine's own loop thread, fed by four submitting threads; results equal solo runs.
TEST(Engine, LoopThreadServesRequestsFromManyThreads) {
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), {});
  ASSERT_TRUE(e.ok());
  (*e)->Start();
  const auto prompts = Prompts(8, 6);
  Collected c;
  std::vector<std::thread> threads;
  std::vector<uint64_t> ids(8);
  std::vector<std::string> texts(8);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < 8; i += 4) {
        Request r = MakeRequest(prompts[i], 12, Greedy());
        r.on_text = [&texts, i](std::string_view s) { texts[i] += s; };
        auto slot = std::make_shared<uint64_t>(0);
        r.on_done = [&c, slot](const Status& st, GenerationResult& res) {
          std::lock_guard<std::mutex> lock(c.mu);
          c.results[*slot] = res;
          c.errors[*slot] = st;
        };
        // The id is known only after Submit returns; the result is looked up afterwards.
        std::lock_guard<std::mutex> lock(c.mu);
        auto id = (*e)->Submit(std::move(r));
        ASSERT_TRUE(id.ok());
        *slot = *id;
        ids[i] = *id;
      }
    });
  for (auto& th : threads) th.join();
  (*e)->WaitIdle();
  (*e)->Stop();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(c.results.count(ids[i]));
    EXPECT_EQ(c.results[ids[i]].tokens, Solo(MakeRequest(prompts[i], 12, Greedy()))) << i;
    EXPECT_EQ(c.results[ids[i]].text, texts[i]);
  }
}


// --- The Lightning hybrids through the serving core.

Model& Hybrid() {
  static std::unique_ptr<Model> m = [] {
    auto r = Model::Load("testdata/golden/tiny-hybrid-m1", {.progress = false});
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::move(r).value();
  }();
  return *m;
}

std::vector<int32_t> HybridSolo(const Request& r) {
  EngineOptions o;
  o.prefix_cache = false;
  auto e = Engine::Create(Hybrid(), nullptr, o);
  EXPECT_TRUE(e.ok());
  auto out = (*e)->Generate(r);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out->tokens : std::vector<int32_t>{};
}

TEST(Engine, HybridModelBatchesSequencesLikeSoloRuns) {
  // Continuous batching with chunked prefill: each sequence's Lightning state advances by
  // its own rows only, whatever runs beside it.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, 380);
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(5 + 9 * i));
    for (auto& t : p) t = tok(rng);
    reqs.push_back(MakeRequest(p, 12 + i, Greedy()));
  }
  EngineOptions o;
  o.max_batch_tokens = 16;
  auto e = Engine::Create(Hybrid(), nullptr, o);
  ASSERT_TRUE(e.ok()) << e.status().message();
  Collected c;
  std::vector<uint64_t> ids;
  RunAll(**e, reqs, c, ids);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(c.errors[ids[i]].ok()) << c.errors[ids[i]].message();
    EXPECT_EQ(c.results[ids[i]].tokens, HybridSolo(reqs[i])) << "request " << i;
  }
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
}

TEST(Engine, HybridSessionThatDivergesStartsOverWithTheSameOutput) {
  // A kept conversation whose next prompt extends it continues from the Lightning state;
  // one that departs from it (the state cannot roll back) is prefilled from the start.
  auto e = Engine::Create(Hybrid(), nullptr, {});
  ASSERT_TRUE(e.ok());
  KvSession session;
  Request first = MakeRequest({5, 6, 7, 8, 9, 10, 11}, 6, Greedy());
  first.session = &session;
  auto a = (*e)->Generate(first);
  ASSERT_TRUE(a.ok()) << a.status().message();
  std::vector<int32_t> extended = first.prompt;
  extended.insert(extended.end(), a->tokens.begin(), a->tokens.end());
  extended.push_back(42);
  Request second = MakeRequest(extended, 6, Greedy());
  second.session = &session;
  auto b = (*e)->Generate(second);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_GT(b->stats.reused_tokens, 0);
  EXPECT_EQ(b->tokens, HybridSolo(MakeRequest(extended, 6, Greedy())));
  Request third = MakeRequest({5, 6, 7, 99, 98}, 6, Greedy());  // departs at token 3
  third.session = &session;
  auto c = (*e)->Generate(third);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->stats.reused_tokens, 0);
  EXPECT_EQ(c->tokens, HybridSolo(MakeRequest({5, 6, 7, 99, 98}, 6, Greedy())));
}

TEST(Engine, HybridLookupSpeculationIsTokenIdenticalToPlainDecoding) {
  // Lightning states cannot be truncated: a rejected draft returns the sequence to the
  // states saved before its verification pass and runs the kept tokens again. Greedy and
  // seeded outputs must equal plain decoding, with drafts both taken and rejected.
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int r = 0; r < 4; ++r)
      for (int32_t t : {5, 6, 7, 8, 9 + i, 10}) p.push_back(t + 20 * i);
    reqs.push_back(MakeRequest(p, 40, i % 2 == 0 ? Greedy() : Seeded(100 + i)));
  }
  EngineOptions spec;
  spec.spec.mode = SpecMode::kLookup;
  spec.spec.draft = 4;
  auto e = Engine::Create(Hybrid(), nullptr, spec);
  ASSERT_TRUE(e.ok()) << e.status().message();
  Collected c;
  std::vector<uint64_t> ids;
  RunAll(**e, reqs, c, ids);
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(c.errors[ids[i]].ok()) << c.errors[ids[i]].message();
    EXPECT_EQ(c.results[ids[i]].tokens, HybridSolo(reqs[i])) << "request " << i;
    drafted += c.results[ids[i]].stats.draft_tokens;
    accepted += c.results[ids[i]].stats.accepted_tokens;
  }
  EXPECT_GT(accepted, 0) << "no draft was taken: the test does not exercise acceptance";
  EXPECT_LT(accepted, drafted) << "no draft was rejected: the test does not exercise the rollback";
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
  std::printf("hybrid lookup speculation: %lld of %lld drafted tokens accepted\n", (long long)accepted,
              (long long)drafted);
}

// The Lightning models' prefix cache: states checkpointed at block boundaries.
std::vector<int32_t> RandomIds(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(3, 380);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = tok(rng);
  return p;
}

// Greedy tokens and each one's logprob (the model's own row: logits compared through it).
struct Traced {
  GenerationResult result;
  std::vector<float> logprobs;
};

Traced RunTraced(Engine& e, Request r) {
  Traced t;
  r.top_logprobs = 0;
  r.on_logprobs = [&t](const TokenLogprobs& lp) { t.logprobs.push_back(lp.logprob); };
  auto out = e.Generate(std::move(r));
  EXPECT_TRUE(out.ok()) << out.status().message();
  if (out.ok()) t.result = *out;
  return t;
}

EngineOptions HybridCacheOptions() {
  EngineOptions o;
  o.block_tokens = 8;
  o.checkpoint_interval = 16;
  return o;
}

void ExpectSameAsSolo(const Traced& got, const Request& r) {
  EngineOptions o = HybridCacheOptions();
  o.prefix_cache = false;
  auto solo = Engine::Create(Hybrid(), nullptr, o);
  ASSERT_TRUE(solo.ok());
  const Traced want = RunTraced(**solo, r);
  EXPECT_EQ(got.result.tokens, want.result.tokens);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  // The resumed states went through other chunk boundaries than the solo run's: the
  // same values up to fp32 rounding.
  for (size_t i = 0; i < want.logprobs.size(); ++i) EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 1e-4) << "token " << i;
}

TEST(Engine, HybridPrefixCacheResumesFromAStateCheckpoint) {
  // Two prompts sharing their first 40 ids (5 blocks of 8): the first keeps its states at
  // 16 and 32 (the interval) and 40 (its last full block); the second resumes from 40.
  auto e = Engine::Create(Hybrid(), nullptr, HybridCacheOptions());
  ASSERT_TRUE(e.ok()) << e.status().message();
  const std::vector<int32_t> shared = RandomIds(40, 11);
  std::vector<int32_t> pa = shared, pb = shared;
  for (int32_t t : {4, 5, 6, 7, 8}) pa.push_back(t);
  for (int32_t t : {9, 10, 11, 12, 13, 14, 15}) pb.push_back(t);
  const Traced a = RunTraced(**e, MakeRequest(pa, 10, Greedy()));
  EXPECT_EQ(a.result.stats.reused_tokens, 0);
  EXPECT_GE((*e)->pool().checkpoints(), 3);
  const Traced b = RunTraced(**e, MakeRequest(pb, 10, Greedy()));
  EXPECT_EQ(b.result.stats.reused_tokens, 40);
  ExpectSameAsSolo(b, MakeRequest(pb, 10, Greedy()));
  // A prompt that departs at id 20 resumes from the interval checkpoint at 16.
  std::vector<int32_t> pc(shared.begin(), shared.begin() + 20);
  pc.push_back(1);
  pc.push_back(2);
  const Traced c = RunTraced(**e, MakeRequest(pc, 10, Greedy()));
  EXPECT_EQ(c.result.stats.reused_tokens, 16);
  ExpectSameAsSolo(c, MakeRequest(pc, 10, Greedy()));
  // Prompts that part from the cached ones at 24 (no checkpoint there: the first resumes
  // from 16) checkpoint that branch point, and the next such prompt resumes from it.
  std::vector<int32_t> pd(shared.begin(), shared.begin() + 24), pe = pd;
  for (int32_t t : {60, 61, 62, 63, 64, 65, 66, 67, 68}) pd.push_back(t);
  for (int32_t t : {70, 71, 72}) pe.push_back(t);
  const Traced d = RunTraced(**e, MakeRequest(pd, 4, Greedy()));
  EXPECT_EQ(d.result.stats.reused_tokens, 16);
  const Traced e2 = RunTraced(**e, MakeRequest(pe, 4, Greedy()));
  EXPECT_EQ(e2.result.stats.reused_tokens, 24);
  ExpectSameAsSolo(e2, MakeRequest(pe, 4, Greedy()));
  // The same prompt again: resumes from its last checkpointed block, never past its last id.
  const Traced b2 = RunTraced(**e, MakeRequest(pb, 10, Greedy()));
  EXPECT_EQ(b2.result.stats.reused_tokens, 40);
  EXPECT_EQ(b2.result.tokens, b.result.tokens);
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
}

TEST(Engine, HybridNextTurnResumesFromTheLastBlockOfTheReply) {
  // A prompt of 21 ids and 20 generated: the cache reaches 40 while generating; those
  // states are kept when the request ends, and the next turn (prompt + reply + more)
  // starts there.
  auto e = Engine::Create(Hybrid(), nullptr, HybridCacheOptions());
  ASSERT_TRUE(e.ok());
  const std::vector<int32_t> p = RandomIds(21, 12);
  const Traced a = RunTraced(**e, MakeRequest(p, 20, Greedy()));
  ASSERT_EQ(a.result.tokens.size(), 20u);
  std::vector<int32_t> next = p;
  next.insert(next.end(), a.result.tokens.begin(), a.result.tokens.end());
  for (int32_t t : {30, 31, 32}) next.push_back(t);
  const Traced b = RunTraced(**e, MakeRequest(next, 8, Greedy()));
  EXPECT_EQ(b.result.stats.reused_tokens, 40);
  ExpectSameAsSolo(b, MakeRequest(next, 8, Greedy()));
}

TEST(Engine, HybridSessionThatDivergesResumesFromACheckpoint) {
  auto e = Engine::Create(Hybrid(), nullptr, HybridCacheOptions());
  ASSERT_TRUE(e.ok());
  KvSession session;
  const std::vector<int32_t> p = RandomIds(37, 13);
  Request first = MakeRequest(p, 6, Greedy());
  first.session = &session;
  ASSERT_TRUE((*e)->Generate(first).ok());
  // Departs at id 35: the session's cache cannot roll back; the checkpoint at 32 (the
  // interval) is taken instead of starting over.
  std::vector<int32_t> q(p.begin(), p.begin() + 35);
  q.push_back(77);
  Request second = MakeRequest(q, 6, Greedy());
  second.session = &session;
  Traced b = RunTraced(**e, second);
  EXPECT_EQ(b.result.stats.reused_tokens, 32);
  ExpectSameAsSolo(b, MakeRequest(q, 6, Greedy()));
}

TEST(Engine, HybridPrefixCacheWithSpeculationIsTokenIdentical) {
  // Lookup drafts on a repetitive prompt, run twice: the second run resumes from a
  // checkpoint and verifies drafts; both equal plain decoding.
  EngineOptions o = HybridCacheOptions();
  o.spec.mode = SpecMode::kLookup;
  o.spec.draft = 4;
  auto e = Engine::Create(Hybrid(), nullptr, o);
  ASSERT_TRUE(e.ok());
  std::vector<int32_t> p;
  for (int r = 0; r < 6; ++r)
    for (int32_t t : {50, 51, 52, 53, 54, 55}) p.push_back(t + r % 2);
  const Request req = MakeRequest(p, 40, Greedy());
  const std::vector<int32_t> want = HybridSolo(req);
  auto first = (*e)->Generate(req);
  ASSERT_TRUE(first.ok());
  auto second = (*e)->Generate(req);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->tokens, want);
  EXPECT_EQ(second->tokens, want);
  EXPECT_EQ(second->stats.reused_tokens, 32);
  EXPECT_GT(second->stats.accepted_tokens, 0);
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
}

TEST(Engine, HybridStateCacheBudgetIsCheckedAndBounded) {
  EngineOptions o = HybridCacheOptions();
  o.state_cache_gib = 1e-9;  // about one byte: holds no checkpoint
  auto bad = Engine::Create(Hybrid(), nullptr, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--state-cache-memory"), std::string::npos) << bad.status().message();
  o.checkpoint_interval = 12;  // not a multiple of the block
  EXPECT_FALSE(Engine::Create(Hybrid(), nullptr, o).ok());
  // Room for two checkpoints: many prompts keep at most two, evicting the oldest.
  o = HybridCacheOptions();
  auto probe = Engine::Create(Hybrid(), nullptr, o);
  ASSERT_TRUE(probe.ok());
  o.state_cache_gib = 2.5 * static_cast<double>((*probe)->pool().checkpoint_bytes()) / static_cast<double>(1LL << 30);
  auto e = Engine::Create(Hybrid(), nullptr, o);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ((*e)->pool().max_checkpoints(), 2);
  for (uint32_t i = 0; i < 5; ++i) ASSERT_TRUE((*e)->Generate(MakeRequest(RandomIds(34, 100 + i), 3, Greedy())).ok());
  EXPECT_EQ((*e)->pool().checkpoints(), 2);
  EXPECT_GT((*e)->stats().state_checkpoints_evicted, 0);
  // Off: the Lightning models share no prefix.
  o.state_cache_gib = 0;
  auto off = Engine::Create(Hybrid(), nullptr, o);
  ASSERT_TRUE(off.ok());
  const std::vector<int32_t> p = RandomIds(34, 5);
  ASSERT_TRUE((*off)->Generate(MakeRequest(p, 3, Greedy())).ok());
  auto again = (*off)->Generate(MakeRequest(p, 3, Greedy()));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->stats.reused_tokens, 0);
}

}  // namespace
}  // namespace m2::runtime
