// The generation loop on the golden tiny models: greedy ids equal transformers', prefix
// reuse gives the same tokens as a fresh run while prefilling only the new part, stop
// conditions (eos, max tokens, stop strings, cancellation), seeds, and bad input.
#include "runtime/generator.h"

#include <gtest/gtest.h>

#include "../model/golden_util.h"
#include "test_model.h"

namespace m2::runtime {
namespace {

using m2::testing::Golden;
using m2::testing::LoadGolden;

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
};

Fixture Load(const std::string& name = "tiny-f32-gqa6") {
  Fixture f;
  const std::string dir = m2::testing::MakeTestModel("gen_" + name, name);
  auto m = Model::Load(dir, {.progress = false});
  EXPECT_TRUE(m.ok()) << m.status().message();
  f.model = std::move(*m);
  auto t = text::Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status().message();
  f.tokenizer = std::move(*t);
  return f;
}

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

SamplingParams Sampling(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.95;
  p.seed = seed;
  return p;
}

GenerateOptions Opts(int64_t n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = true;
  return o;
}

TEST(Generator, GreedyIdsMatchTransformers) {
  for (const char* name : {"tiny-f32-gqa6", "tiny-bf16-sharded"}) {
    Golden g = LoadGolden(name);
    Fixture f = Load(name);
    Generator gen(*f.model, nullptr);
    Sampler s(Greedy());
    std::vector<int32_t> streamed;
    auto r = gen.Generate(g.prompt, s, Opts(16), nullptr, [&](int32_t id) { streamed.push_back(id); });
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->tokens, g.greedy) << name;
    EXPECT_EQ(streamed, g.greedy);
    EXPECT_EQ(r->stop_reason, StopReason::kMaxTokens);
    EXPECT_EQ(r->stats.prompt_tokens, static_cast<int64_t>(g.prompt.size()));
    EXPECT_EQ(r->stats.prefill_tokens, static_cast<int64_t>(g.prompt.size()));
    EXPECT_EQ(r->stats.generated_tokens, 16);
    EXPECT_EQ(r->stats.decode_steps, 15);  // the last token is sampled, never run
    // The cache holds the prompt and all generated ids but the last.
    std::vector<int32_t> want = g.prompt;
    want.insert(want.end(), g.greedy.begin(), g.greedy.end() - 1);
    EXPECT_EQ(gen.cached_ids(), want);
  }
}

TEST(Generator, PrefixReuseGivesTheSameTokensAsAFreshRun) {
  Golden g = LoadGolden("tiny-f32-gqa6");
  Fixture f = Load();
  Generator kept(*f.model, nullptr);
  Sampler s(Greedy());
  auto first = kept.Generate(g.prompt, s, Opts(6));
  ASSERT_TRUE(first.ok());
  // A second turn: the whole first exchange plus new tokens, as a chat does.
  std::vector<int32_t> turn2 = g.prompt;
  turn2.insert(turn2.end(), first->tokens.begin(), first->tokens.end());
  for (int32_t t : {7, 100, 42}) turn2.push_back(t);
  auto second = kept.Generate(turn2, s, Opts(8));
  ASSERT_TRUE(second.ok());
  // All cached ids were reused: prompt + 5 of the 6 generated (the 6th was never run).
  EXPECT_EQ(second->stats.reused_tokens, static_cast<int64_t>(g.prompt.size() + 5));
  EXPECT_EQ(second->stats.prefill_tokens, 4);

  Generator fresh(*f.model, nullptr);
  auto want = fresh.Generate(turn2, s, Opts(8));
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(want->stats.reused_tokens, 0);
  EXPECT_EQ(second->tokens, want->tokens);

  // A prompt that diverges early truncates the cache to the common prefix.
  std::vector<int32_t> edited = g.prompt;
  edited[3] = (edited[3] + 1) % 300;
  auto third = kept.Generate(edited, s, Opts(4));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->stats.reused_tokens, 3);
  Generator fresh2(*f.model, nullptr);
  auto want3 = fresh2.Generate(edited, s, Opts(4));
  ASSERT_TRUE(want3.ok());
  EXPECT_EQ(third->tokens, want3->tokens);

  // The same prompt again: everything but its last token is reused.
  auto again = kept.Generate(edited, s, Opts(4));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->stats.reused_tokens, static_cast<int64_t>(edited.size() - 1));
  EXPECT_EQ(again->tokens, want3->tokens);
}

TEST(Generator, SameSeedSameTokens) {
  Golden g = LoadGolden("tiny-f32-gqa6");
  Fixture f = Load();
  auto run = [&](uint64_t seed) {
    Generator gen(*f.model, nullptr);
    Sampler s(Sampling(seed));
    auto r = gen.Generate(g.prompt, s, Opts(24));
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  };
  const auto a = run(11);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(a, run(11));
  EXPECT_NE(a, run(12));
}

TEST(Generator, StopsAtEosWithoutShowingIt) {
  Golden g = LoadGolden("tiny-f32-gqa6");
  Fixture f = Load();
  Generator gen(*f.model, f.tokenizer.get());
  Sampler s(Greedy());
  GenerateOptions o = Opts(16);
  o.ignore_eos = false;
  o.eos_ids = {g.greedy[4]};
  // The first occurrence of that id in the greedy run ends it.
  size_t stop_at = 0;
  while (g.greedy[stop_at] != g.greedy[4]) ++stop_at;
  auto r = gen.Generate(g.prompt, s, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, StopReason::kEos);
  EXPECT_EQ(r->tokens, std::vector<int32_t>(g.greedy.begin(), g.greedy.begin() + stop_at + 1));
  EXPECT_EQ(r->text, f.tokenizer->Decode(std::vector<int32_t>(g.greedy.begin(), g.greedy.begin() + stop_at)));
}

TEST(Generator, TextStreamsAndStopStringsCutIt) {
  Fixture f = Load();
  const std::vector<int32_t> prompt = f.tokenizer->Encode("Once upon a time");
  Sampler s(Greedy());
  Generator gen(*f.model, f.tokenizer.get());
  std::string streamed;
  auto full = gen.Generate(prompt, s, Opts(40), [&](std::string_view p) { streamed += p; });
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->text, f.tokenizer->Decode(full->tokens));
  EXPECT_EQ(streamed, full->text);
  ASSERT_GT(full->text.size(), 12u);

  // A stop string taken from the middle of that text (at a character boundary).
  size_t at = full->text.size() / 2;
  while (at > 0 && (static_cast<unsigned char>(full->text[at]) & 0xC0) == 0x80) --at;
  size_t len = 1;
  while (at + len < full->text.size() && (static_cast<unsigned char>(full->text[at + len]) & 0xC0) == 0x80) ++len;
  const std::string stop = full->text.substr(at, len);
  const std::string want = full->text.substr(0, full->text.find(stop));

  GenerateOptions o = Opts(40);
  o.stop_strings = {"never appears \x01", stop};
  std::vector<std::string> pieces;
  auto cut = gen.Generate(prompt, s, o, [&](std::string_view p) { pieces.emplace_back(p); });
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->stop_reason, StopReason::kStopString);
  EXPECT_EQ(cut->stop_string, stop);
  EXPECT_EQ(cut->text, want);
  std::string joined;
  for (const auto& p : pieces) joined += p;
  EXPECT_EQ(joined, want);
  EXPECT_LT(cut->tokens.size(), full->tokens.size());
}

TEST(Generator, CancelStopsWithinOneStep) {
  Golden g = LoadGolden("tiny-f32-gqa6");
  Fixture f = Load();
  Generator gen(*f.model, nullptr);
  Sampler s(Greedy());
  std::atomic<bool> cancel{true};
  GenerateOptions o = Opts(16);
  o.cancel = &cancel;
  auto before = gen.Generate(g.prompt, s, o);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->stop_reason, StopReason::kCancelled);
  EXPECT_TRUE(before->tokens.empty());

  cancel = false;
  int seen = 0;
  auto mid = gen.Generate(g.prompt, s, o, nullptr, [&](int32_t) {
    if (++seen == 5) cancel = true;  // as a Ctrl-C handler would, between steps
  });
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(mid->stop_reason, StopReason::kCancelled);
  EXPECT_EQ(mid->tokens, std::vector<int32_t>(g.greedy.begin(), g.greedy.begin() + 5));
}

TEST(Generator, BadInputIsAnError) {
  Fixture f = Load();
  Sampler s(Greedy());
  Generator gen(*f.model, nullptr);
  auto empty = gen.Generate(std::vector<int32_t>{}, s, Opts(4));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  auto big = gen.Generate(std::vector<int32_t>{1, 5000}, s, Opts(4));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("id 5000"), std::string::npos) << big.status().message();
  GenerateOptions o = Opts(4);
  o.stop_strings = {"x"};
  auto stops = gen.Generate(std::vector<int32_t>{1, 2}, s, o);
  ASSERT_FALSE(stops.ok());
  EXPECT_NE(stops.status().message().find("tokenizer"), std::string::npos);
  // After an error the generator still works, from an empty cache.
  auto ok = gen.Generate(std::vector<int32_t>{1, 2}, s, Opts(2));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->stats.reused_tokens, 0);
}

}  // namespace
}  // namespace m2::runtime
