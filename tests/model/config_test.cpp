#include <gtest/gtest.h>

#include "io/json_file.h"
#include "model/config.h"

namespace m2 {
namespace {

using json = nlohmann::json;

json Reference() {
  auto j = ReadJsonFile("testdata/reference/minimax-m2/config.json");
  EXPECT_TRUE(j.ok()) << j.status().message();
  return j.ok() ? *j : json::object();
}

TEST(ConfigTest, ReferenceConfigOfTheReleasedModel) {
  auto c = ParseModelConfig(Reference());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->num_hidden_layers, 62);
  EXPECT_EQ(c->hidden_size, 3072);
  EXPECT_EQ(c->num_attention_heads, 48);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->kv_group(), 6);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_DOUBLE_EQ(c->rope_theta, 5e6);
  EXPECT_EQ(c->num_local_experts, 256);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->vocab_size, 200064);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_TRUE(c->use_mtp);
  EXPECT_EQ(c->num_mtp_modules, 3);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{200020});
  ASSERT_TRUE(c->quant.enabled);
  EXPECT_EQ(c->quant.block_out, 128);
  EXPECT_EQ(c->quant.block_in, 128);
  EXPECT_EQ(c->quant.modules_to_not_convert.size(), 3u);
}

TEST(ConfigTest, DefaultsAreTransformers) {
  // Only the identity: every size falls back to MiniMaxM2Config's defaults.
  auto c = ParseModelConfig(json{{"architectures", {"MiniMaxM2ForCausalLM"}}, {"model_type", "minimax_m2"}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rotary_dim, 128);  // no rotary_dim or partial factor: full rotation
  EXPECT_EQ(c->num_local_experts, 256);
  EXPECT_FALSE(c->quant.enabled);
}

TEST(ConfigTest, RotaryFromEachSpelling) {
  json j = Reference();
  j.erase("partial_rotary_factor");
  auto c = ParseModelConfig(j);  // rotary_dim alone
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->rotary_dim, 64);
  j.erase("rotary_dim");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.25}};
  c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->rotary_dim, 32);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e4);
}

struct BadCase {
  const char* what;
  std::function<void(json&)> edit;
  const char* message_part;
};

TEST(ConfigTest, InconsistentOrMalformedFieldsNameTheField) {
  const std::vector<BadCase> cases = {
      {"heads not divisible", [](json& j) { j["num_key_value_heads"] = 5; }, "num_key_value_heads"},
      {"top-k above experts", [](json& j) { j["num_experts_per_tok"] = 300; }, "num_experts_per_tok"},
      {"unknown architecture", [](json& j) { j["architectures"] = {"LlamaForCausalLM"}; }, "architectures"},
      {"wrong model_type", [](json& j) { j["model_type"] = "llama"; }, "model_type"},
      {"string for int", [](json& j) { j["hidden_size"] = "3072"; }, "hidden_size"},
      {"negative", [](json& j) { j["num_hidden_layers"] = -1; }, "num_hidden_layers"},
      {"zero heads", [](json& j) { j["num_attention_heads"] = 0; }, "num_attention_heads"},
      {"rotary disagreement", [](json& j) { j["rotary_dim"] = 32; }, "rotary_dim"},
      {"odd rotary", [](json& j) { j.erase("partial_rotary_factor"); j["rotary_dim"] = 63; }, "rotary"},
      {"rotary above head_dim",
       [](json& j) { j.erase("rotary_dim"); j["partial_rotary_factor"] = 2.0; }, "rotary"},
      {"softmax routing", [](json& j) { j["scoring_func"] = "softmax"; }, "scoring_func"},
      {"sliding window", [](json& j) { j["sliding_window"] = 4096; }, "sliding_window"},
      {"unknown quant", [](json& j) { j["quantization_config"]["quant_method"] = "gptq"; }, "quant_method"},
      {"bad block size", [](json& j) { j["quantization_config"]["weight_block_size"] = {128}; }, "weight_block_size"},
      {"eos outside vocab", [](json& j) { j["eos_token_id"] = 999999; }, "eos_token_id"},
      {"eos wrong type", [](json& j) { j["eos_token_id"] = "x"; }, "eos_token_id"},
      {"rope type", [](json& j) { j["rope_parameters"] = {{"rope_type", "yarn"}}; }, "rope_type"},
      {"activation", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
  };
  for (const auto& bc : cases) {
    json j = Reference();
    bc.edit(j);
    auto c = ParseModelConfig(j);
    ASSERT_FALSE(c.ok()) << bc.what;
    EXPECT_NE(c.status().message().find(bc.message_part), std::string::npos)
        << bc.what << ": " << c.status().message();
  }
  EXPECT_FALSE(ParseModelConfig(json::array()).ok());
}

TEST(ConfigTest, MissingFileIsAClearError) {
  auto c = LoadModelConfig("testdata/no-such-model");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("config.json"), std::string::npos);
}

}  // namespace
}  // namespace m2
