// generation_config.json: defaults, transformers' do_sample rule, and errors that name the
// field, what was expected and what was found.
#include "runtime/generation_config.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_model.h"

namespace m2::runtime {
namespace {

using nlohmann::json;

Result<GenerationConfig> Parse(const std::string& text) { return ParseGenerationConfig(json::parse(text), "gc"); }

TEST(GenerationConfig, ReadsTheFieldsTheEngineUses) {
  // What tools/train/export.py writes, plus extra fields that are ignored.
  auto g = Parse(R"({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": true,
                     "temperature": 1.0, "top_p": 0.95, "top_k": 40, "max_new_tokens": 256,
                     "transformers_version": "5.0", "num_beams": 1})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(g->max_new_tokens, 256);
  SamplingParams p = g->ToSamplingParams();
  EXPECT_EQ(p.temperature, 1.0);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.top_p, 0.95);
  EXPECT_EQ(p.min_p, 0.0);
  EXPECT_EQ(p.repetition_penalty, 1.0);

  auto list = Parse(R"({"eos_token_id": [200020, 200021], "min_p": 0.05, "repetition_penalty": 1.1,
                        "do_sample": true, "temperature": 0.7, "top_k": null})");
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_EQ(list->eos_token_ids, (std::vector<int32_t>{200020, 200021}));
  EXPECT_FALSE(list->top_k.has_value());  // null = unset
  EXPECT_EQ(list->ToSamplingParams().min_p, 0.05);
  EXPECT_EQ(list->ToSamplingParams().repetition_penalty, 1.1);
  EXPECT_EQ(list->ToSamplingParams().temperature, 0.7);
}

TEST(GenerationConfig, WithoutDoSampleItIsGreedyAsInTransformers) {
  auto g = Parse(R"({"temperature": 0.8, "top_p": 0.9})");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ToSamplingParams().temperature, 0.0);
  EXPECT_EQ(g->ToSamplingParams().top_p, 0.9);
  auto off = Parse(R"({"do_sample": false, "temperature": 0.8})");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->ToSamplingParams().temperature, 0.0);
  auto empty = Parse("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->ToSamplingParams().temperature, 0.0);
  EXPECT_TRUE(empty->eos_token_ids.empty());
}

TEST(GenerationConfig, BadFieldsAreErrorsNamingThem) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {R"([1, 2])", "expected a JSON object"},
      {R"({"temperature": "hot"})", "temperature: expected a number, found \"hot\""},
      {R"({"top_k": 4.5})", "top_k: expected an integer, found 4.5"},
      {R"({"top_p": 1.5})", "top_p: expected a number in (0, 1]"},
      {R"({"min_p": -0.1})", "min_p"},
      {R"({"do_sample": "yes"})", "do_sample: expected true or false"},
      {R"({"eos_token_id": "[e~["})", "eos_token_id: expected a token id"},
      {R"({"eos_token_id": [2, -1]})", "eos_token_id"},
      {R"({"max_new_tokens": 0})", "max_new_tokens: expected an integer >= 1, found 0"},
      {R"({"repetition_penalty": 0})", "repetition_penalty"},
      {R"({"temperature": -1, "do_sample": false})", "temperature"},
  };
  for (const Case& c : cases) {
    auto g = Parse(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_NE(g.status().message().find(c.want), std::string::npos) << c.text << " -> " << g.status().message();
    EXPECT_EQ(g.status().message().rfind("gc: ", 0), 0u) << g.status().message();
  }
}

TEST(GenerationConfig, LoadFromAFolder) {
  const std::string plain = testing::MakeTestModel("gc_none");
  auto none = LoadGenerationConfig(plain);
  ASSERT_TRUE(none.ok()) << none.status().message();  // no file: no defaults, no error
  EXPECT_FALSE(none->do_sample.has_value());

  const std::string broken = testing::MakeTestModel("gc_broken", "tiny-f32-gqa6", "{\"top_k\": 40,");
  auto bad = LoadGenerationConfig(broken);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("generation_config.json"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos) << bad.status().message();

  const std::string good = testing::MakeTestModel("gc_good", "tiny-f32-gqa6", R"({"do_sample": true, "top_k": 7})");
  auto ok = LoadGenerationConfig(good);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->ToSamplingParams().top_k, 7);
  EXPECT_EQ(ok->ToSamplingParams().temperature, 1.0);
}

}  // namespace
}  // namespace m2::runtime
