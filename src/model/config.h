// config.json of a MiniMax-M2 checkpoint (MiniMaxM2ForCausalLM, model_type minimax_m2),
// read with the defaults of transformers' MiniMaxM2Config. MODEL_SPEC.md section 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace m2 {

// quantization_config of the released checkpoints: fp8 e4m3 weights, one fp32 scale
// per [block_out x block_in] block (weight_scale_inv; it multiplies).
struct QuantConfig {
  bool enabled = false;
  std::string quant_method;  // "fp8"
  std::string fmt;           // "float8_e4m3fn" (or "e4m3")
  std::string activation_scheme;
  int64_t block_out = 128, block_in = 128;
  std::vector<std::string> modules_to_not_convert;
  std::string m2_format;  // quant_method "m2" (m2 quantize): "q8" or "q4"
};

// The most experts a token may be routed to (num_experts_per_tok); MiniMax models use 8.
inline constexpr int64_t kMaxExpertsPerToken = 64;

struct ModelConfig {
  std::string architecture = "MiniMaxM2ForCausalLM";
  std::string model_type = "minimax_m2";

  int64_t vocab_size = 200064;
  int64_t hidden_size = 3072;
  int64_t intermediate_size = 1536;  // width of one expert
  int64_t num_hidden_layers = 62;
  int64_t num_attention_heads = 48;
  int64_t num_key_value_heads = 8;
  int64_t head_dim = 128;
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 196608;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;

  // RoPE: NeoX pairing on the first rotary_dim channels of each head.
  double rope_theta = 5e6;
  double partial_rotary_factor = 1.0;
  int64_t rotary_dim = 128;  // = int(head_dim * partial_rotary_factor)

  // MoE
  int64_t num_local_experts = 256;
  int64_t num_experts_per_tok = 8;
  std::string scoring_func = "sigmoid";
  bool use_routing_bias = true;
  int64_t shared_intermediate_size = 0;

  bool use_qk_norm = true;
  std::string qk_norm_type = "per_layer";
  std::optional<int64_t> sliding_window;

  // Multi-token prediction modules (MODEL_SPEC "MTP").
  bool use_mtp = false;
  int64_t num_mtp_modules = 0;
  int64_t mtp_transformer_layers = 1;

  std::optional<int64_t> bos_token_id = 200034;
  std::vector<int64_t> eos_token_ids = {200020};
  std::optional<int64_t> pad_token_id;
  std::string torch_dtype = "bfloat16";

  // Training-only fields, kept so the whole file is represented.
  double initializer_range = 0.02;
  double router_jitter_noise = 0.0;
  double router_aux_loss_coef = 0.001;
  double attention_dropout = 0.0;
  bool output_router_logits = false;
  bool use_cache = true;

  QuantConfig quant;

  int64_t kv_group() const { return num_attention_heads / num_key_value_heads; }
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
};

// Parses and validates. Errors name the field, what was expected and what was found.
Result<ModelConfig> ParseModelConfig(const nlohmann::json& j);
// Reads DIR/config.json (or the file itself when `path` is a .json file).
Result<ModelConfig> LoadModelConfig(const std::string& path);

}  // namespace m2
