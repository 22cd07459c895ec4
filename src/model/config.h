// config.json of a MiniMax checkpoint, read with the defaults of transformers' config
// class of its family:
//  - MiniMax-M2 (MiniMaxM2ForCausalLM, model_type minimax_m2; MiniMaxM2Config), MODEL_SPEC.md
//    section 1;
//  - the Lightning-attention hybrids MiniMax-Text-01 and MiniMax-M1 (MODEL_SPEC.md section 2):
//    transformers' MiniMaxForCausalLM (model_type minimax; MiniMaxConfig) and the released
//    MiniMaxText01ForCausalLM (minimax_text_01) / MiniMaxM1ForCausalLM (minimax_m1) configs.
//    What is accepted for them is listed at ParseModelConfig.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

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

// The attention of one decoder layer.
enum class LayerType : uint8_t {
  kSoftmax,    // full softmax attention with a KV cache ("full_attention", attn_type_list 1)
  kLightning,  // Lightning linear attention with a fixed-size state ("linear_attention", 0)
};
const char* LayerTypeName(LayerType t);

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

  // --- The Lightning hybrids (hybrid = true). For MiniMax-M2 every layer is kSoftmax, the
  // residual is the plain pre-norm one (alpha = beta = 1, postnorm false).
  bool hybrid = false;
  std::vector<LayerType> layer_types;  // [num_hidden_layers]
  int64_t lightning_block = 256;       // block_size: tokens per block of the blocked prefill
  // Decoder layer: n = rmsnorm(h); h' = r * alpha + branch(n) * beta, where r is n itself
  // when postnorm (the hybrids, as transformers computes them) and h otherwise (M2).
  bool postnorm = false;
  double softmax_alpha = 1, softmax_beta = 1;      // layernorm_full_attention_* / full_attn_*_factor
  double lightning_alpha = 1, lightning_beta = 1;  // layernorm_linear_attention_* / linear_attn_*_factor
  double mlp_alpha = 1, mlp_beta = 1;              // layernorm_mlp_* / mlp_*_factor
  // RMSNorm of the Lightning output (transformers: MiniMaxRMSNorm's default, not rms_norm_eps).
  double lightning_norm_eps = 1e-6;

  int64_t kv_group() const { return num_attention_heads / num_key_value_heads; }
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  LayerType layer_type(int64_t l) const { return layer_types[static_cast<size_t>(l)]; }
  int64_t num_lightning_layers() const;
  // fp32 floats of one sequence's Lightning state in one layer: heads x head_dim^2.
  int64_t lightning_state_floats() const { return num_attention_heads * head_dim * head_dim; }
  // Bytes of one sequence's states over all Lightning layers (fixed, whatever its length).
  int64_t lightning_state_bytes() const { return num_lightning_layers() * lightning_state_floats() * 4; }
  // The decay slope of Lightning head `head` in layer `layer` (transformers:
  // MiniMaxLightningAttention.get_slope_rate): 2^(-8(h+1)/H) * (1 - l / (L - 1 + 1e-5) + 1e-5)
  // (the released code and vLLM: L - 1 without the 1e-5; a 1e-7 relative difference).
  float lightning_slope(int64_t layer, int64_t head) const;
};

// Whether prompts for this model can be written in the MiniMax-M2 chat format (the one
// src/chat renders): an error for the Lightning hybrids, whose chat format
// (<beginning_of_sentence>role name=...) is not implemented yet, saying what to use instead.
Status CheckM2ChatFormat(const ModelConfig& c);

// Parses and validates. Errors name the field, what was expected and what was found.
Result<ModelConfig> ParseModelConfig(const nlohmann::json& j);
// Reads DIR/config.json (or the file itself when `path` is a .json file).
Result<ModelConfig> LoadModelConfig(const std::string& path);

}  // namespace m2
