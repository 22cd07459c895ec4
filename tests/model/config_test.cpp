#include <gtest/gtest.h>

#include <cmath>
#include <functional>

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

namespace m2 {
namespace {

using json = nlohmann::json;

json M1Reference() {
  auto j = ReadJsonFile("testdata/reference/minimax-m1/config.json");
  EXPECT_TRUE(j.ok()) << j.status().message();
  return j.ok() ? *j : json::object();
}

TEST(HybridConfigTest, ReleasedMiniMaxM1Config) {
  auto c = ParseModelConfig(M1Reference());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->hybrid);
  EXPECT_EQ(c->architecture, "MiniMaxM1ForCausalLM");
  EXPECT_EQ(c->num_hidden_layers, 80);
  ASSERT_EQ(c->layer_types.size(), 80u);
  for (int64_t l = 0; l < 80; ++l)
    EXPECT_EQ(c->layer_type(l), (l + 1) % 8 == 0 ? LayerType::kSoftmax : LayerType::kLightning) << l;
  EXPECT_EQ(c->num_lightning_layers(), 70);
  EXPECT_EQ(c->hidden_size, 6144);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e7);
  EXPECT_EQ(c->num_local_experts, 32);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->scoring_func, "softmax");
  EXPECT_FALSE(c->use_routing_bias);
  EXPECT_FALSE(c->use_qk_norm);
  EXPECT_TRUE(c->postnorm);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->lightning_block, 256);  // not in the file: transformers' default
  EXPECT_NEAR(c->lightning_alpha, 3.5565588200778455, 1e-15);
  EXPECT_NEAR(c->softmax_alpha, 3.5565588200778455, 1e-15);
  EXPECT_NEAR(c->mlp_alpha, 3.5565588200778455, 1e-15);
  EXPECT_DOUBLE_EQ(c->lightning_beta, 1.0);
  EXPECT_TRUE(c->eos_token_ids.empty());  // null in the file: the tokenizer's end token decides
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_EQ(c->lightning_state_floats(), 64 * 128 * 128);  // 4 MiB per layer and sequence
}

TEST(HybridConfigTest, SlopesFollowTransformers) {
  auto c = ParseModelConfig(M1Reference());
  ASSERT_TRUE(c.ok()) << c.status().message();
  // get_slope_rate: (1 / 2^(8/H))^(h+1) * (1 - l / (L - 1 + 1e-5) + 1e-5), H = 64, L = 80.
  for (int64_t l : {0, 7, 40, 79})
    for (int64_t h : {0, 1, 31, 63}) {
      const double want = std::pow(std::pow(2.0, -8.0 / 64), h + 1) * (1.0 - l / (79 + 1e-5) + 1e-5);
      EXPECT_NEAR(c->lightning_slope(l, h), want, 1e-7 * want) << l << " " << h;
    }
  EXPECT_GT(c->lightning_slope(79, 0), 0.0f);  // the last layer keeps a tiny positive decay
}

TEST(HybridConfigTest, TransformersNamingAndDefaults) {
  auto c = ParseModelConfig(json{{"architectures", {"MiniMaxForCausalLM"}},
                                 {"model_type", "minimax"},
                                 {"num_hidden_layers", 4},
                                 {"layer_types", {"linear_attention", "full_attention", "linear_attention", "full_attention"}},
                                 {"full_attn_alpha_factor", 1.5},
                                 {"mlp_beta_factor", 0.5},
                                 {"block_size", 64}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->layer_type(0), LayerType::kLightning);
  EXPECT_EQ(c->layer_type(1), LayerType::kSoftmax);
  EXPECT_DOUBLE_EQ(c->softmax_alpha, 1.5);
  EXPECT_DOUBLE_EQ(c->mlp_beta, 0.5);
  EXPECT_DOUBLE_EQ(c->lightning_alpha, 1.0);
  EXPECT_EQ(c->lightning_block, 64);
  EXPECT_EQ(c->head_dim, 4096 / 32);  // MiniMaxConfig: hidden_size / heads when absent
  // No schedule at all: transformers' default alternates, softmax first.
  auto d = ParseModelConfig(json{{"model_type", "minimax"}, {"num_hidden_layers", 3}});
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->layer_type(0), LayerType::kSoftmax);
  EXPECT_EQ(d->layer_type(1), LayerType::kLightning);
  EXPECT_EQ(d->layer_type(2), LayerType::kSoftmax);
  // M2 configs are all softmax.
  auto m2 = ParseModelConfig(json{{"model_type", "minimax_m2"}, {"num_hidden_layers", 2}});
  ASSERT_TRUE(m2.ok()) << m2.status().message();
  EXPECT_EQ(m2->num_lightning_layers(), 0);
  EXPECT_FALSE(m2->hybrid);
}

TEST(HybridConfigTest, BadHybridFieldsNameTheField) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* message_part;
  };
  const std::vector<Case> cases = {
      {"short schedule", [](json& j) { j["attn_type_list"] = {0, 1}; }, "attn_type_list"},
      {"bad schedule entry", [](json& j) { j["attn_type_list"][3] = 2; }, "attn_type_list"},
      {"schedules disagree",
       [](json& j) {
         j["layer_types"] = json::array();
         for (int l = 0; l < 80; ++l) j["layer_types"].push_back("linear_attention");
       },
       "different layer schedules"},
      {"postnorm false", [](json& j) { j["postnorm"] = false; }, "postnorm"},
      {"alpha names disagree", [](json& j) { j["mlp_alpha_factor"] = 2.0; }, "layernorm_mlp_alpha"},
      {"block size", [](json& j) { j["block_size"] = 0; }, "block_size"},
      {"sigmoid routing", [](json& j) { j["scoring_func"] = "sigmoid"; }, "scoring_func"},
      {"families disagree", [](json& j) { j["model_type"] = "minimax_m2"; }, "different model families"},
      {"unknown architecture", [](json& j) { j["architectures"] = {"LlamaForCausalLM"}; }, "LlamaForCausalLM"},
      {"schedule on M2",
       [](json& j) {
         j["architectures"] = {"MiniMaxM2ForCausalLM"};
         j["model_type"] = "minimax_m2";
       },
       "attn_type_list"},
  };
  for (const auto& bc : cases) {
    json j = M1Reference();
    bc.edit(j);
    auto c = ParseModelConfig(j);
    ASSERT_FALSE(c.ok()) << bc.what;
    EXPECT_NE(c.status().message().find(bc.message_part), std::string::npos)
        << bc.what << ": " << c.status().message();
  }
}

}  // namespace
}  // namespace m2
