#include "model/config.h"

#include <cmath>
#include <filesystem>

#include "io/json_file.h"

namespace m2 {

namespace {

using json = nlohmann::json;

// Typed access to optional fields: absent or null keeps the default; a present field
// of the wrong type is an error naming it.
class Reader {
 public:
  explicit Reader(const json& j, std::string where = "") : j_(j), where_(std::move(where)) {}

  const json* Find(const char* key) const {
    const auto it = j_.find(key);
    return (it == j_.end() || it->is_null()) ? nullptr : &*it;
  }
  bool Has(const char* key) const { return Find(key) != nullptr; }

  Status Int(const char* key, int64_t& out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (v->is_number_integer()) {
      out = v->get<int64_t>();
      return Status::Ok();
    }
    if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() && std::fabs(v->get<double>()) < 1e15) {
      out = static_cast<int64_t>(v->get<double>());
      return Status::Ok();
    }
    return Mismatch(key, "an integer", *v);
  }
  Status Num(const char* key, double& out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_number()) return Mismatch(key, "a number", *v);
    out = v->get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool& out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_boolean()) return Mismatch(key, "true or false", *v);
    out = v->get<bool>();
    return Status::Ok();
  }
  Status Str(const char* key, std::string& out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_string()) return Mismatch(key, "a string", *v);
    out = v->get<std::string>();
    return Status::Ok();
  }
  Status OptInt(const char* key, std::optional<int64_t>& out) const {
    if (!Has(key)) {
      if (j_.contains(key)) out.reset();  // explicit null
      return Status::Ok();
    }
    int64_t v = 0;
    M2_RETURN_IF_ERROR(Int(key, v));
    out = v;
    return Status::Ok();
  }

 private:
  Status Mismatch(const char* key, const char* expected, const json& found) const {
    return Error("config field \"{}{}\": expected {}, found {}", where_, key, expected, found.dump());
  }
  const json& j_;
  std::string where_;
};

Status Positive(const char* field, int64_t v) {
  if (v <= 0) return Error("config field \"{}\": expected a positive integer, found {}", field, v);
  return Status::Ok();
}

Status ParseQuant(const json& q, QuantConfig& out) {
  if (!q.is_object()) return Error("config field \"quantization_config\": expected an object, found {}", q.dump());
  Reader r(q, "quantization_config.");
  M2_RETURN_IF_ERROR(r.Str("quant_method", out.quant_method));
  if (out.quant_method == "m2") {  // written by `m2 quantize`: q8 / q4 groups of 32
    M2_RETURN_IF_ERROR(r.Str("weight_format", out.m2_format));
    int64_t group = 32;
    M2_RETURN_IF_ERROR(r.Int("group_size", group));
    if (const json* b = r.Find("weight_block_size")) {  // blocks of fp8 tensors left as they were
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer() ||
          (*b)[0].get<int64_t>() <= 0 || (*b)[1].get<int64_t>() <= 0)
        return Error("config field \"quantization_config.weight_block_size\": expected [rows, cols], found {}",
                     b->dump());
      out.block_out = (*b)[0].get<int64_t>();
      out.block_in = (*b)[1].get<int64_t>();
    }
    if ((out.m2_format != "q8" && out.m2_format != "q4") || group != 32)
      return Error("config field \"quantization_config\": expected weight_format \"q8\" or \"q4\" with group_size "
                   "32, found \"{}\" with {}",
                   out.m2_format, group);
    return Status::Ok();
  }
  if (out.quant_method != "fp8")
    return Error("config field \"quantization_config.quant_method\": expected \"fp8\" (the scheme of the released "
                 "checkpoints) or \"m2\" (m2 quantize), found \"{}\"",
                 out.quant_method);
  out.enabled = true;
  out.fmt = "float8_e4m3fn";
  M2_RETURN_IF_ERROR(r.Str("fmt", out.fmt));
  if (out.fmt != "float8_e4m3fn" && out.fmt != "e4m3")
    return Error("config field \"quantization_config.fmt\": expected \"float8_e4m3fn\", found \"{}\"", out.fmt);
  M2_RETURN_IF_ERROR(r.Str("activation_scheme", out.activation_scheme));
  if (const json* b = r.Find("weight_block_size")) {
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer() ||
        (*b)[0].get<int64_t>() <= 0 || (*b)[1].get<int64_t>() <= 0)
      return Error("config field \"quantization_config.weight_block_size\": expected [rows, cols] of positive "
                   "integers, found {}",
                   b->dump());
    out.block_out = (*b)[0].get<int64_t>();
    out.block_in = (*b)[1].get<int64_t>();
  }
  if (const json* m = r.Find("modules_to_not_convert")) {
    if (!m->is_array()) return Error("config field \"quantization_config.modules_to_not_convert\": expected a list");
    for (const auto& s : *m) {
      if (!s.is_string())
        return Error("config field \"quantization_config.modules_to_not_convert\": expected strings, found {}",
                     s.dump());
      out.modules_to_not_convert.push_back(s.get<std::string>());
    }
  }
  return Status::Ok();
}

// One of the hybrids' residual weights under its released name (layernorm_*) or its
// transformers name (*_factor); both present must agree.
Status HybridWeight(const Reader& r, const char* released, const char* hf, double& out) {
  const bool a = r.Has(released), b = r.Has(hf);
  double x = out, y = out;
  M2_RETURN_IF_ERROR(r.Num(released, x));
  M2_RETURN_IF_ERROR(r.Num(hf, y));
  if (a && b && x != y)
    return Error("config fields \"{}\" ({}) and \"{}\" ({}) disagree (they are the same weight under its released and "
                 "its transformers name)",
                 released, x, hf, y);
  out = a ? x : y;
  if (!std::isfinite(out)) return Error("config field \"{}\": expected a finite number, found {}", a ? released : hf, out);
  return Status::Ok();
}

// The layer schedule and the residual weights of the Lightning hybrids; for MiniMax-M2,
// checks that none of their fields is set to something M2 does not do.
Status ParseHybrid(const Reader& r, ModelConfig& c) {
  const auto L = static_cast<size_t>(c.num_hidden_layers);
  if (!c.hybrid) {
    for (const char* f : {"layer_types", "attn_type_list"})
      if (r.Has(f))
        return Error("config field \"{}\": MiniMax-M2 has softmax attention in every layer; a layer schedule belongs "
                     "to the Lightning hybrids (MiniMaxForCausalLM)",
                     f);
    c.layer_types.assign(L, LayerType::kSoftmax);
    return Status::Ok();
  }
  std::vector<LayerType> from_types, from_list;
  if (const json* t = r.Find("layer_types")) {
    if (!t->is_array())
      return Error("config field \"layer_types\": expected a list of \"full_attention\" / \"linear_attention\", found {}",
                   t->dump());
    for (const auto& v : *t) {
      if (v == "full_attention") from_types.push_back(LayerType::kSoftmax);
      else if (v == "linear_attention") from_types.push_back(LayerType::kLightning);
      else
        return Error("config field \"layer_types\": expected \"full_attention\" or \"linear_attention\" for every "
                     "layer, found {}",
                     v.dump());
    }
  }
  if (const json* t = r.Find("attn_type_list")) {
    if (!t->is_array())
      return Error("config field \"attn_type_list\": expected a list of 0 (Lightning) / 1 (softmax), found {}",
                   t->dump());
    for (const auto& v : *t) {
      if (v == 1) from_list.push_back(LayerType::kSoftmax);
      else if (v == 0) from_list.push_back(LayerType::kLightning);
      else
        return Error("config field \"attn_type_list\": expected 0 (Lightning) or 1 (softmax) for every layer, found {}",
                     v.dump());
    }
  }
  if (!from_types.empty() && !from_list.empty() && from_types != from_list)
    return Error("config fields \"layer_types\" and \"attn_type_list\" give different layer schedules");
  c.layer_types = !from_types.empty() ? from_types : from_list;
  if (c.layer_types.empty()) {
    // transformers' MiniMaxConfig default: softmax at even layers, Lightning at odd ones.
    for (size_t l = 0; l < L; ++l) c.layer_types.push_back(l % 2 == 0 ? LayerType::kSoftmax : LayerType::kLightning);
  }
  if (c.layer_types.size() != L)
    return Error("config field \"{}\": expected one entry per layer (num_hidden_layers {}), found {}",
                 !from_types.empty() ? "layer_types" : "attn_type_list", L, c.layer_types.size());
  M2_RETURN_IF_ERROR(r.Int("block_size", c.lightning_block));
  if (c.lightning_block <= 0 || c.lightning_block > 4096)
    return Error("config field \"block_size\": expected a block length in [1, 4096] (Lightning prefill), found {}",
                 c.lightning_block);
  M2_RETURN_IF_ERROR(r.Bool("postnorm", c.postnorm));
  if (!c.postnorm)
    return Error("config field \"postnorm\": expected true (transformers' MiniMaxDecoderLayer adds the NORMED input "
                 "as the residual, as the released models do), found false");
  M2_RETURN_IF_ERROR(HybridWeight(r, "layernorm_full_attention_alpha", "full_attn_alpha_factor", c.softmax_alpha));
  M2_RETURN_IF_ERROR(HybridWeight(r, "layernorm_full_attention_beta", "full_attn_beta_factor", c.softmax_beta));
  M2_RETURN_IF_ERROR(HybridWeight(r, "layernorm_linear_attention_alpha", "linear_attn_alpha_factor", c.lightning_alpha));
  M2_RETURN_IF_ERROR(HybridWeight(r, "layernorm_linear_attention_beta", "linear_attn_beta_factor", c.lightning_beta));
  M2_RETURN_IF_ERROR(HybridWeight(r, "layernorm_mlp_alpha", "mlp_alpha_factor", c.mlp_alpha));
  M2_RETURN_IF_ERROR(HybridWeight(r, "layernorm_mlp_beta", "mlp_beta_factor", c.mlp_beta));
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> ParseModelConfig(const json& j) {
  if (!j.is_object()) return Error("config.json must be a JSON object, found {}", j.type_name());
  ModelConfig c;
  Reader r(j);

  // Which model this is. Either field is enough; both must name the same family.
  if (!r.Has("architectures") && !r.Has("model_type"))
    return Error("config has neither \"architectures\" nor \"model_type\"; expected a MiniMax config.json "
                 "(architectures [\"MiniMaxM2ForCausalLM\"], model_type \"minimax_m2\"; or for the Lightning hybrids "
                 "MiniMaxForCausalLM / MiniMaxText01ForCausalLM / MiniMaxM1ForCausalLM)");
  std::string arch, type;
  if (const json* a = r.Find("architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      return Error("config field \"architectures\": expected a list of class names, found {}", a->dump());
    arch = (*a)[0].get<std::string>();
  }
  M2_RETURN_IF_ERROR(r.Str("model_type", type));
  const auto family_of_arch = [](const std::string& a) {
    if (a == "MiniMaxM2ForCausalLM") return 1;
    if (a == "MiniMaxForCausalLM" || a == "MiniMaxText01ForCausalLM" || a == "MiniMaxM1ForCausalLM") return 2;
    return 0;
  };
  const auto family_of_type = [](const std::string& t) {
    if (t == "minimax_m2") return 1;
    if (t == "minimax" || t == "minimax_text_01" || t == "minimax_m1") return 2;
    return 0;
  };
  if (!arch.empty() && family_of_arch(arch) == 0)
    return Error("config field \"architectures\": expected \"MiniMaxM2ForCausalLM\" (MiniMax-M2 family) or "
                 "\"MiniMaxForCausalLM\" / \"MiniMaxText01ForCausalLM\" / \"MiniMaxM1ForCausalLM\" (the Lightning "
                 "hybrids), found \"{}\" (this engine runs MiniMax checkpoints)",
                 arch);
  if (!type.empty() && family_of_type(type) == 0)
    return Error("config field \"model_type\": expected \"minimax_m2\", \"minimax\", \"minimax_text_01\" or "
                 "\"minimax_m1\", found \"{}\"",
                 type);
  if (!arch.empty() && !type.empty() && family_of_arch(arch) != family_of_type(type))
    return Error("config fields \"architectures\" (\"{}\") and \"model_type\" (\"{}\") name different model "
                 "families",
                 arch, type);
  c.hybrid = (!arch.empty() ? family_of_arch(arch) : family_of_type(type)) == 2;
  if (c.hybrid) {
    // transformers' MiniMaxConfig defaults (MiniMax-Text-01 / M1 style) where they differ.
    c.architecture = arch.empty() ? "MiniMaxForCausalLM" : arch;
    c.model_type = type.empty() ? "minimax" : type;
    c.vocab_size = 32000;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 0;  // hidden_size / num_attention_heads unless given
    c.max_position_embeddings = 4096 * 32;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 1e6;
    c.num_local_experts = 8;
    c.num_experts_per_tok = 2;
    c.scoring_func = "softmax";
    c.use_routing_bias = false;
    c.use_qk_norm = false;
    c.postnorm = true;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
  } else {
    c.architecture = arch.empty() ? c.architecture : arch;
    c.model_type = type.empty() ? c.model_type : type;
  }

  M2_RETURN_IF_ERROR(r.Int("vocab_size", c.vocab_size));
  M2_RETURN_IF_ERROR(r.Int("hidden_size", c.hidden_size));
  M2_RETURN_IF_ERROR(r.Int("intermediate_size", c.intermediate_size));
  M2_RETURN_IF_ERROR(r.Int("num_hidden_layers", c.num_hidden_layers));
  M2_RETURN_IF_ERROR(r.Int("num_attention_heads", c.num_attention_heads));
  M2_RETURN_IF_ERROR(r.Int("num_key_value_heads", c.num_key_value_heads));
  M2_RETURN_IF_ERROR(r.Int("head_dim", c.head_dim));
  if (c.hybrid && c.head_dim == 0 && c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  M2_RETURN_IF_ERROR(r.Str("hidden_act", c.hidden_act));
  M2_RETURN_IF_ERROR(r.Int("max_position_embeddings", c.max_position_embeddings));
  M2_RETURN_IF_ERROR(r.Num("rms_norm_eps", c.rms_norm_eps));
  M2_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", c.tie_word_embeddings));
  M2_RETURN_IF_ERROR(r.Int("num_local_experts", c.num_local_experts));
  M2_RETURN_IF_ERROR(r.Int("num_experts_per_tok", c.num_experts_per_tok));
  M2_RETURN_IF_ERROR(r.Str("scoring_func", c.scoring_func));
  M2_RETURN_IF_ERROR(r.Bool("use_routing_bias", c.use_routing_bias));
  M2_RETURN_IF_ERROR(r.Int("shared_intermediate_size", c.shared_intermediate_size));
  M2_RETURN_IF_ERROR(r.Bool("use_qk_norm", c.use_qk_norm));
  M2_RETURN_IF_ERROR(r.Str("qk_norm_type", c.qk_norm_type));
  M2_RETURN_IF_ERROR(r.OptInt("sliding_window", c.sliding_window));
  M2_RETURN_IF_ERROR(r.Bool("use_mtp", c.use_mtp));
  M2_RETURN_IF_ERROR(r.Int("num_mtp_modules", c.num_mtp_modules));
  M2_RETURN_IF_ERROR(r.Int("mtp_transformer_layers", c.mtp_transformer_layers));
  M2_RETURN_IF_ERROR(r.OptInt("bos_token_id", c.bos_token_id));
  M2_RETURN_IF_ERROR(r.OptInt("pad_token_id", c.pad_token_id));
  if (c.hybrid && j.contains("eos_token_id") && j["eos_token_id"].is_null()) c.eos_token_ids.clear();  // M1: null
  if (c.hybrid && j.contains("bos_token_id") && j["bos_token_id"].is_null()) c.bos_token_id.reset();
  if (const json* e = r.Find("eos_token_id")) {
    c.eos_token_ids.clear();
    if (e->is_number_integer()) {
      c.eos_token_ids.push_back(e->get<int64_t>());
    } else if (e->is_array()) {
      for (const auto& v : *e) {
        if (!v.is_number_integer())
          return Error("config field \"eos_token_id\": expected an integer or a list of integers, found {}", e->dump());
        c.eos_token_ids.push_back(v.get<int64_t>());
      }
    } else {
      return Error("config field \"eos_token_id\": expected an integer or a list of integers, found {}", e->dump());
    }
  }
  M2_RETURN_IF_ERROR(r.Str("torch_dtype", c.torch_dtype));
  M2_RETURN_IF_ERROR(r.Str("dtype", c.torch_dtype));  // the newer spelling wins
  M2_RETURN_IF_ERROR(r.Num("initializer_range", c.initializer_range));
  M2_RETURN_IF_ERROR(r.Num("router_jitter_noise", c.router_jitter_noise));
  M2_RETURN_IF_ERROR(r.Num("router_aux_loss_coef", c.router_aux_loss_coef));
  M2_RETURN_IF_ERROR(r.Num("attention_dropout", c.attention_dropout));
  M2_RETURN_IF_ERROR(r.Bool("output_router_logits", c.output_router_logits));
  M2_RETURN_IF_ERROR(r.Bool("use_cache", c.use_cache));

  // RoPE. Priority as in transformers: rope_parameters (or rope_scaling) > top-level
  // rope_theta / partial_rotary_factor > rotary_dim / head_dim > 1.0.
  const json* rope = r.Find("rope_parameters");
  if (rope == nullptr) rope = r.Find("rope_scaling");
  M2_RETURN_IF_ERROR(r.Num("rope_theta", c.rope_theta));
  std::optional<double> factor;
  if (r.Has("partial_rotary_factor")) {
    double f = 0;
    M2_RETURN_IF_ERROR(r.Num("partial_rotary_factor", f));
    factor = f;
  }
  if (rope != nullptr) {
    if (!rope->is_object()) return Error("config field \"rope_parameters\": expected an object, found {}", rope->dump());
    Reader rr(*rope, "rope_parameters.");
    std::string type = "default";
    M2_RETURN_IF_ERROR(rr.Str("rope_type", type));
    if (type == "default" && rr.Has("type")) M2_RETURN_IF_ERROR(rr.Str("type", type));
    if (type != "default")
      return Error("config field \"rope_parameters.rope_type\": expected \"default\" (the only RoPE MiniMax-M2 uses), "
                   "found \"{}\"",
                   type);
    M2_RETURN_IF_ERROR(rr.Num("rope_theta", c.rope_theta));
    if (rr.Has("partial_rotary_factor")) {
      double f = 0;
      M2_RETURN_IF_ERROR(rr.Num("partial_rotary_factor", f));
      factor = f;
    }
  }
  M2_RETURN_IF_ERROR(Positive("head_dim", c.head_dim));
  if (r.Has("rotary_dim")) {
    int64_t rd = 0;
    M2_RETURN_IF_ERROR(r.Int("rotary_dim", rd));
    const double from_dim = static_cast<double>(rd) / static_cast<double>(c.head_dim);
    if (factor && std::fabs(*factor - from_dim) > 1e-9)
      return Error("config fields disagree: \"rotary_dim\" {} means partial_rotary_factor {} for head_dim {}, but "
                   "partial_rotary_factor is {}",
                   rd, from_dim, c.head_dim, *factor);
    if (!factor) factor = from_dim;
  }
  c.partial_rotary_factor = factor.value_or(1.0);
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  if (!(c.rope_theta > 0)) return Error("config field \"rope_theta\": expected a positive number, found {}", c.rope_theta);

  if (const json* q = r.Find("quantization_config")) M2_RETURN_IF_ERROR(ParseQuant(*q, c.quant));
  M2_RETURN_IF_ERROR(Positive("num_hidden_layers", c.num_hidden_layers));
  M2_RETURN_IF_ERROR(ParseHybrid(r, c));

  // Consistency.
  M2_RETURN_IF_ERROR(Positive("vocab_size", c.vocab_size));
  M2_RETURN_IF_ERROR(Positive("hidden_size", c.hidden_size));
  M2_RETURN_IF_ERROR(Positive("intermediate_size", c.intermediate_size));
  M2_RETURN_IF_ERROR(Positive("num_hidden_layers", c.num_hidden_layers));
  M2_RETURN_IF_ERROR(Positive("num_attention_heads", c.num_attention_heads));
  M2_RETURN_IF_ERROR(Positive("num_key_value_heads", c.num_key_value_heads));
  M2_RETURN_IF_ERROR(Positive("num_local_experts", c.num_local_experts));
  M2_RETURN_IF_ERROR(Positive("num_experts_per_tok", c.num_experts_per_tok));
  M2_RETURN_IF_ERROR(Positive("max_position_embeddings", c.max_position_embeddings));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return Error("config fields \"num_attention_heads\" ({}) and \"num_key_value_heads\" ({}): the query heads must "
                 "divide evenly among the key/value heads",
                 c.num_attention_heads, c.num_key_value_heads);
  if (c.num_experts_per_tok > c.num_local_experts)
    return Error("config field \"num_experts_per_tok\": expected at most num_local_experts ({}), found {}",
                 c.num_local_experts, c.num_experts_per_tok);
  if (c.num_experts_per_tok > kMaxExpertsPerToken)
    return Error("config field \"num_experts_per_tok\": expected at most {} (the engine's limit; MiniMax models use 8), "
                 "found {}",
                 kMaxExpertsPerToken, c.num_experts_per_tok);
  if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    return Error("config: rotary dimension head_dim * partial_rotary_factor = {} * {} = {}; expected an even number "
                 "between 2 and head_dim",
                 c.head_dim, c.partial_rotary_factor, c.rotary_dim);
  if (!(c.rms_norm_eps > 0) || c.rms_norm_eps > 1)
    return Error("config field \"rms_norm_eps\": expected a small positive number, found {}", c.rms_norm_eps);
  if (c.hidden_act != "silu")
    return Error("config field \"hidden_act\": expected \"silu\", found \"{}\"", c.hidden_act);
  if (!c.hybrid && c.scoring_func != "sigmoid")
    return Error("config field \"scoring_func\": expected \"sigmoid\" (MiniMax-M2 routing), found \"{}\"",
                 c.scoring_func);
  if (c.use_qk_norm && c.qk_norm_type != "per_layer")
    return Error("config field \"qk_norm_type\": expected \"per_layer\" (one RMSNorm over all heads), found \"{}\"",
                 c.qk_norm_type);
  if (c.hybrid && c.scoring_func != "softmax")
    return Error("config field \"scoring_func\": expected \"softmax\" (the hybrids' routing), found \"{}\"",
                 c.scoring_func);
  if (c.hybrid && (c.use_routing_bias || c.use_qk_norm))
    return Error("config fields \"use_routing_bias\" / \"use_qk_norm\": the Lightning hybrids have neither, found {} / {}",
                 c.use_routing_bias, c.use_qk_norm);
  if (c.shared_intermediate_size != 0)
    return Error("config field \"shared_intermediate_size\": shared experts are not supported yet; expected 0, found {}",
                 c.shared_intermediate_size);
  if (c.sliding_window)
    return Error("config field \"sliding_window\": expected null (no released MiniMax-M2 uses it), found {}",
                 *c.sliding_window);
  if (c.num_mtp_modules < 0 || c.mtp_transformer_layers < 0)
    return Error("config fields \"num_mtp_modules\"/\"mtp_transformer_layers\": expected non-negative, found {}/{}",
                 c.num_mtp_modules, c.mtp_transformer_layers);
  for (int64_t id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size)
      return Error("config field \"eos_token_id\": {} is outside the vocabulary [0, {})", id, c.vocab_size);
  return c;
}

Status CheckM2ChatFormat(const ModelConfig& c) {
  if (!c.hybrid) return Status::Ok();
  return Error("{} uses the MiniMax-Text-01 / M1 chat format (<beginning_of_sentence>role name=...), which this engine "
               "does not render yet (it renders MiniMax-M2's): give the model a raw prompt instead (m2 generate -p, or "
               "the server's /v1/completions)",
               c.architecture);
}

const char* LayerTypeName(LayerType t) { return t == LayerType::kSoftmax ? "softmax" : "lightning"; }

int64_t ModelConfig::num_lightning_layers() const {
  int64_t n = 0;
  for (LayerType t : layer_types) n += t == LayerType::kLightning;
  return n;
}

float ModelConfig::lightning_slope(int64_t layer, int64_t head) const {
  // In double, rounded once (transformers computes base**(h+1) on a float32 tensor, which
  // can be 3e-7 off at h = 63; either way the decays differ far below the tolerances).
  const double base = 1.0 / std::pow(2.0, 8.0 / static_cast<double>(num_attention_heads));
  const double factor = 1.0 - static_cast<double>(layer) / (static_cast<double>(num_hidden_layers) - 1 + 1e-5) + 1e-5;
  return static_cast<float>(std::pow(base, static_cast<double>(head + 1)) * factor);
}

Result<ModelConfig> LoadModelConfig(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  if (!fs::exists(file, ec)) return Error("'{}' not found: a model folder needs a config.json", file);
  M2_ASSIGN_OR_RETURN(auto j, ReadJsonFile(file));
  auto c = ParseModelConfig(j);
  if (!c.ok()) return Status(c.status()).WithContext("'" + file + "'");
  return c;
}

}  // namespace m2
