// Speculative decoding (prompt lookup): the drafting rule, and output identical to plain
// decoding token for token - greedy and seeded sampling, alone and batched with requests
// that do not speculate, with every draft length - with rejected drafts rolled back
// (no block leaks, prefix-cache blocks hold only accepted tokens).
#include "runtime/speculative.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "runtime/engine.h"
#include "test_model.h"

namespace m2::runtime {
namespace {

std::vector<int32_t> Draft(std::vector<int32_t> ids, int max, int nmax = 3, int nmin = 1) {
  std::vector<int32_t> out{42};  // cleared by LookupDraft
  LookupDraft(ids, max, nmax, nmin, out);
  return out;
}

TEST(LookupDraft, ContinuesTheMostRecentEarlierOccurrenceOfTheLongestSuffix) {
  EXPECT_EQ(Draft({1, 2, 3, 9, 1, 2, 3}, 3), (std::vector<int32_t>{9, 1, 2}));
  // Past the end the continuation repeats (period 4 here).
  EXPECT_EQ(Draft({1, 2, 3, 9, 1, 2, 3}, 8), (std::vector<int32_t>{9, 1, 2, 3, 9, 1, 2, 3}));
  // Two occurrences of the suffix [1, 2]: the later one's continuation.
  EXPECT_EQ(Draft({1, 2, 7, 1, 2, 8, 1, 2}, 1, 2), (std::vector<int32_t>{8}));
  // The longest n-gram wins over a more recent shorter match.
  EXPECT_EQ(Draft({4, 1, 2, 5, 3, 1, 2, 6, 4, 1, 2}, 2), (std::vector<int32_t>{5, 3}));
  // Falls back to shorter n-grams, down to ngram_min.
  EXPECT_EQ(Draft({7, 8, 9, 5, 9}, 2), (std::vector<int32_t>{5, 9}));
  EXPECT_EQ(Draft({7, 8, 9, 5, 9}, 3), (std::vector<int32_t>{5, 9, 5}));
  EXPECT_TRUE(Draft({7, 8, 9, 5, 9}, 2, 3, 2).empty());
  // No earlier occurrence, too short, or no room: no draft.
  EXPECT_TRUE(Draft({1, 2, 3}, 4).empty());
  EXPECT_TRUE(Draft({5}, 4).empty());
  EXPECT_TRUE(Draft({1, 1, 1}, 0).empty());
  // A run of one id: the suffix's previous occurrence overlaps it.
  EXPECT_EQ(Draft({3, 3, 3, 3}, 4), (std::vector<int32_t>{3, 3, 3, 3}));
}

TEST(SpecOptions, BadSettingsAreErrorsNamingThem) {
  SpecOptions o;
  o.draft = 0;
  EXPECT_NE(o.Validate().message().find("--draft"), std::string::npos);
  o.draft = kMaxDraft + 1;
  EXPECT_FALSE(o.Validate().ok());
  o.draft = 4;
  o.ngram_min = 3;
  o.ngram_max = 2;
  EXPECT_FALSE(o.Validate().ok());
  EXPECT_FALSE(ParseSpecMode("medusa").ok());
  EXPECT_NE(ParseSpecMode("medusa").status().message().find("lookup"), std::string::npos);
  EXPECT_EQ(*ParseSpecMode("lookup"), SpecMode::kLookup);
}

// A sanitizer build runs ~5x slower: fewer cases there.
const bool kSanitized = std::getenv("M2_SANITIZED") != nullptr;

Model& Tiny() { return testing::BundledModel(); }
const text::Tokenizer& TinyTokenizer() { return testing::BundledTokenizer(); }

// Prompts where lookup finds matches: code that repeats itself, a file to copy with an
// edit, chat text, a tool call.
std::vector<std::vector<int32_t>> Prompts() {
  const char* texts[] = {
      "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
      "Rewrite this file with `count` renamed to `total`:\n```python\ncount = 0\nfor x in items:\n    count += x\n"
      "print(count)\n```\nHere it is:\n```python\n",
      "import os\nimport sys\nimport json\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n",
      "What is 17 times 23? Let me think. 17 times 20 is 340, 17 times 3 is 51, so",
      "<minimax:tool_call>\n<invoke name=\"read_file\">\n<parameter name=\"path\">src/main.cpp</parameter>\n"
      "</invoke>\n</minimax:tool_call>\n",
      "for i in range(10):\n    print(i)\nfor j in range(10):\n    print(j)\nfor k in range(10):\n",
  };
  std::vector<std::vector<int32_t>> out;
  for (const char* t : texts) out.push_back(TinyTokenizer().Encode(t, false));
  return out;
}

Request Make(std::vector<int32_t> prompt, int64_t max_new, SamplingParams sp, SpecOptions spec = {}) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling = sp;
  r.options.max_new_tokens = max_new;
  r.options.ignore_eos = true;
  r.spec = spec;
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
  p.top_k = 40;
  p.seed = seed;
  return p;
}

SpecOptions Lookup(int n) {
  SpecOptions s;
  s.mode = SpecMode::kLookup;
  s.draft = n;
  return s;
}

GenerationResult Solo(const Request& r) {
  EngineOptions o;
  o.prefix_cache = false;
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  EXPECT_TRUE(e.ok());
  auto out = (*e)->Generate(r);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : GenerationResult{};
}

// Runs all requests in one engine (batched), returns results in submission order.
std::vector<GenerationResult> Batched(std::vector<Request> reqs, Engine& e) {
  auto results = std::make_shared<std::map<size_t, GenerationResult>>();
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].on_done = [results, i](const Status& st, GenerationResult& r) {
      EXPECT_TRUE(st.ok()) << st.message();
      (*results)[i] = r;
    };
    auto id = e.Submit(std::move(reqs[i]));
    EXPECT_TRUE(id.ok()) << id.status().message();
  }
  int steps = 0;
  while (e.Step()) EXPECT_LT(++steps, 100000);
  std::vector<GenerationResult> out;
  for (size_t i = 0; i < reqs.size(); ++i) out.push_back((*results)[i]);
  return out;
}

TEST(Speculative, GreedyLookupIsTokenIdenticalToPlainDecodingForEveryDraftLength) {
  const auto prompts = Prompts();
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) plain.push_back(Solo(Make(p, 60, Greedy())).tokens);
  int64_t drafted = 0, accepted = 0;
  for (int n : kSanitized ? std::vector<int>{3} : std::vector<int>{1, 4, 16}) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const GenerationResult r = Solo(Make(prompts[i], 60, Greedy(), Lookup(n)));
      EXPECT_EQ(r.tokens, plain[i]) << "draft " << n << " prompt " << i;
      drafted += r.stats.draft_tokens;
      accepted += r.stats.accepted_tokens;
      EXPECT_LE(r.stats.decode_steps, 59);
    }
  }
  // The test is not vacuous: drafts were made, some accepted, some rejected.
  EXPECT_GT(accepted, kSanitized ? 10 : 40);
  EXPECT_GT(drafted, accepted);
}

TEST(Speculative, SeededSamplingGivesTheSameTokensAsPlainDecoding) {
  const auto prompts = Prompts();
  int64_t accepted = 0;
  for (uint64_t seed = 1; seed <= (kSanitized ? 3u : 8u); ++seed) {
    const auto& p = prompts[seed % prompts.size()];
    const auto plain = Solo(Make(p, 50, Seeded(seed))).tokens;
    const GenerationResult r = Solo(Make(p, 50, Seeded(seed), Lookup(4)));
    EXPECT_EQ(r.tokens, plain) << "seed " << seed;
    accepted += r.stats.accepted_tokens;
  }
  EXPECT_GT(accepted, kSanitized ? 2 : 8);
}

// Sequences with and without drafts share each verification pass; a pool small enough
// to preempt; stop strings inside an accepted run; afterwards no block is held and a
// repeated request reuses cached blocks that hold exactly its tokens.
TEST(Speculative, BatchedWithPlainRequestsNoLeaksAndPrefixCacheStaysRight) {
  const auto prompts = Prompts();
  EngineOptions o;
  o.kv_tokens = 512;
  o.max_batch_tokens = 64;
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  ASSERT_TRUE(e.ok());
  std::vector<Request> reqs;
  for (size_t i = 0; i < 9; ++i) {
    const auto& p = prompts[i % prompts.size()];
    reqs.push_back(i % 3 == 0 ? Make(p, 50, Greedy()) : Make(p, 50, i % 3 == 1 ? Greedy() : Seeded(i), Lookup(1 + i % 6)));
  }
  const auto results = Batched(reqs, **e);
  int64_t accepted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request plain = reqs[i];
    plain.spec = {};
    EXPECT_EQ(results[i].tokens, Solo(plain).tokens) << "request " << i;
    accepted += results[i].stats.accepted_tokens;
  }
  EXPECT_GT(accepted, 10);
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
  // Cached blocks hold accepted tokens only: the same request again, served from the
  // prefix cache, continues exactly as before.
  auto again = (*e)->Generate(Make(prompts[0], 50, Greedy(), Lookup(4)));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, results[0].tokens);
  std::vector<int32_t> extended = prompts[0];
  extended.insert(extended.end(), results[0].tokens.begin(), results[0].tokens.begin() + 40);
  auto cont = (*e)->Generate(Make(extended, 20, Greedy(), Lookup(4)));
  ASSERT_TRUE(cont.ok());
  EXPECT_GT(cont->stats.reused_tokens, 0);
  EXPECT_EQ(cont->tokens, Solo(Make(extended, 20, Greedy())).tokens);
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
}

TEST(Speculative, StopStringsAndMaxTokensEndWhereThePlainRunEnds) {
  const auto prompts = Prompts();
  for (size_t i = 0; i < prompts.size(); i += 2) {
    Request r = Make(prompts[i], 40, Greedy());
    const GenerationResult plain = Solo(r);
    ASSERT_GT(plain.text.size(), 12u);
    // A stop string taken from the middle of the plain output.
    r.options.stop_strings = {plain.text.substr(plain.text.size() / 2, 3)};
    const GenerationResult a = Solo(r);
    r.spec = Lookup(6);
    const GenerationResult b = Solo(r);
    EXPECT_EQ(b.tokens, a.tokens) << "prompt " << i;
    EXPECT_EQ(b.text, a.text);
    EXPECT_EQ(b.stop_reason, a.stop_reason);
    // max_new_tokens is never passed by the accepted drafts.
    for (int64_t m : {1, 7}) {
      const GenerationResult c = Solo(Make(prompts[i], m, Greedy(), Lookup(8)));
      EXPECT_EQ(static_cast<int64_t>(c.tokens.size()), m);
    }
  }
}

SpecOptions Mtp(int n) {
  SpecOptions s;
  s.mode = SpecMode::kMtp;
  s.draft = n;
  return s;
}

// An engine whose pool holds the MTP modules' caches (EngineOptions::spec = mtp).
GenerationResult SoloMtp(const Request& r, int draft) {
  EngineOptions o;
  o.prefix_cache = false;
  o.spec = Mtp(draft);
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  EXPECT_TRUE(e.ok());
  auto out = (*e)->Generate(r);
  EXPECT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
  return out.ok() ? *out : GenerationResult{};
}

// The bundled model's trained MTP modules draft; the output equals plain decoding
// (greedy and seeded) for every number of modules used, and drafts are accepted.
TEST(Speculative, MtpDraftsGiveTheSameTokensAsPlainDecoding) {
  const auto prompts = Prompts();
  int64_t drafted = 0, accepted = 0;
  for (int n : {1, 2, 3}) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (bool sampled : {false, true}) {
        if (kSanitized && (n != 3 || sampled)) continue;
        const SamplingParams sp = sampled ? Seeded(40 + i) : Greedy();
        const auto plain = Solo(Make(prompts[i], 40, sp)).tokens;
        const GenerationResult r = SoloMtp(Make(prompts[i], 40, sp, Mtp(n)), n);
        EXPECT_EQ(r.tokens, plain) << "modules " << n << " prompt " << i << (sampled ? " sampled" : " greedy");
        drafted += r.stats.draft_tokens;
        accepted += r.stats.accepted_tokens;
      }
    }
  }
  EXPECT_GT(drafted, accepted);
  EXPECT_GT(accepted, kSanitized ? 10 : 60);
}

// MTP, lookup and plain requests in one engine, batched, with a pool small enough to
// preempt: every output equals its plain run, no block leaks.
TEST(Speculative, MtpBatchedWithLookupAndPlainRequests) {
  const auto prompts = Prompts();
  EngineOptions o;
  o.kv_tokens = 384;
  o.max_batch_tokens = 48;
  o.spec = Mtp(3);
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), o);
  ASSERT_TRUE(e.ok());
  std::vector<Request> reqs;
  for (size_t i = 0; i < 9; ++i) {
    const auto& p = prompts[i % prompts.size()];
    SpecOptions none;
    reqs.push_back(i % 3 == 0 ? Make(p, 40, Greedy(), none)
                              : Make(p, 40, i % 2 ? Greedy() : Seeded(i), i % 3 == 1 ? Mtp(1 + i % 3) : Lookup(4)));
  }
  const auto results = Batched(reqs, **e);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request plain = reqs[i];
    plain.spec = SpecOptions{};
    EXPECT_EQ(results[i].tokens, Solo(plain).tokens) << "request " << i;
  }
  EXPECT_EQ((*e)->pool().blocks_in_use(), 0);
}

TEST(Speculative, MtpNeedsAnEngineStartedWithIt) {
  auto e = Engine::Create(Tiny(), &TinyTokenizer(), {});
  ASSERT_TRUE(e.ok());
  auto id = (*e)->Submit(Make(Prompts()[0], 4, Greedy(), Mtp(2)));
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("--spec mtp"), std::string::npos);
}

}  // namespace
}  // namespace m2::runtime
