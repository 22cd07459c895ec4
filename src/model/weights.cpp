#include "model/weights.h"

#include <fmt/format.h>

namespace m2 {

namespace {

WeightFormat FormatOf(DType t) {
  switch (t) {
    case DType::kBF16: return WeightFormat::kBF16;
    case DType::kF16: return WeightFormat::kF16;
    case DType::kF8E4M3: return WeightFormat::kFp8Block;
    default: return WeightFormat::kF32;
  }
}

Result<std::vector<float>> LoadVector(const TensorStore& store, const std::string& name, int64_t n) {
  M2_ASSIGN_OR_RETURN(TensorView v, store.Get(name, {DType::kF32, DType::kBF16, DType::kF16}, {n}));
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (v.dtype) {
      case DType::kF32: out[i] = v.as<float>()[i]; break;
      case DType::kBF16: out[i] = Bf16ToF32(v.as<uint16_t>()[i]); break;
      default: out[i] = F16ToF32(v.as<uint16_t>()[i]); break;
    }
  }
  return out;
}

// `prefix`.weight [rows, cols], plus `prefix`.weight_scale_inv when it is fp8.
Result<LinearWeight> LoadLinear(const ModelConfig& cfg, const TensorStore& store, const std::string& prefix,
                                int64_t rows, int64_t cols, bool allow_fp8 = true) {
  const std::string name = prefix + ".weight";
  // m2 quantize output: int8 (q8) or packed 4-bit (q4) with f16 scales per 32 columns.
  if (store.Has(prefix + ".weight_qscale")) {
    if (cols % kQuantGroup != 0)
      return Error("tensor '{}': quantized weights need a multiple of 32 columns, found {}", name, cols);
    M2_ASSIGN_OR_RETURN(TensorView s, store.Get(prefix + ".weight_qscale", {DType::kF16}, {rows, cols / kQuantGroup}));
    M2_ASSIGN_OR_RETURN(TensorView q, store.Get(name));
    LinearWeight w;
    w.rows = rows;
    w.cols = cols;
    w.scale = s.data;
    if (q.dtype == DType::kI8 && q.shape == std::vector<int64_t>{rows, cols}) {
      w.format = WeightFormat::kQ8;
    } else if (q.dtype == DType::kU8 && q.shape == std::vector<int64_t>{rows, cols / 2}) {
      w.format = WeightFormat::kQ4;
    } else {
      return Error("tensor '{}': expected I8 {} (q8) or U8 {} (q4) beside its weight_qscale, found {} {}", name,
                   ShapeString({rows, cols}), ShapeString({rows, cols / 2}), DTypeName(q.dtype),
                   ShapeString(q.shape));
    }
    w.data = q.data;
    return w;
  }
  std::initializer_list<DType> plain = {DType::kF32, DType::kBF16, DType::kF16};
  std::initializer_list<DType> any = {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3};
  M2_ASSIGN_OR_RETURN(TensorView v, store.Get(name, allow_fp8 ? any : plain, {rows, cols}));
  LinearWeight w;
  w.format = FormatOf(v.dtype);
  w.rows = rows;
  w.cols = cols;
  w.data = v.data;
  if (v.dtype == DType::kF8E4M3) {
    w.block_rows = cfg.quant.block_out;
    w.block_cols = cfg.quant.block_in;
    const std::string sname = prefix + ".weight_scale_inv";
    if (!store.Has(sname))
      return Error("tensor '{}' is F8_E4M3 but its block scales '{}' are missing", name, sname);
    M2_ASSIGN_OR_RETURN(TensorView s, store.Get(sname, {DType::kF32}, {w.scale_rows(), w.scale_cols()}));
    w.scale = s.as<float>();
  }
  return w;
}

// A [rows, cols] slice of a 3-D expert tensor [E, R, C] (transformers' fused layout).
Result<LinearWeight> SliceExpert(const TensorView& t, const std::string& name, int64_t e, int64_t row0, int64_t rows) {
  if (t.dtype == DType::kF8E4M3)
    return Error("tensor '{}': fp8 is only supported in the per-expert layout (experts.E.w1/w2/w3)", name);
  LinearWeight w;
  w.format = FormatOf(t.dtype);
  w.rows = rows;
  w.cols = t.shape[2];
  const size_t item = DTypeSize(t.dtype);
  w.data = t.data + ((e * t.shape[1] + row0) * t.shape[2]) * item;
  return w;
}

Result<MoeWeights> LoadMoe(const ModelConfig& cfg, const TensorStore& store, const std::string& layer) {
  const int64_t E = cfg.num_local_experts, H = cfg.hidden_size, I = cfg.intermediate_size;
  MoeWeights m;
  const bool released = store.Has(layer + ".block_sparse_moe.gate.weight");
  const std::string moe = layer + (released ? ".block_sparse_moe" : ".mlp");
  if (!released && !store.Has(moe + ".gate.weight"))
    return Error("router weight missing: expected '{}.block_sparse_moe.gate.weight' (released layout) or "
                 "'{}.mlp.gate.weight' (transformers layout) in '{}'",
                 layer, layer, store.source());
  M2_ASSIGN_OR_RETURN(m.gate, LoadLinear(cfg, store, moe + ".gate", E, H, /*allow_fp8=*/false));
  if (cfg.use_routing_bias) {
    M2_ASSIGN_OR_RETURN(m.bias, LoadVector(store, moe + ".e_score_correction_bias", E));
  }
  m.experts.resize(static_cast<size_t>(E));
  if (released) {
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = fmt::format("{}.experts.{}.", moe, e);
      M2_ASSIGN_OR_RETURN(m.experts[e].w1, LoadLinear(cfg, store, p + "w1", I, H));
      M2_ASSIGN_OR_RETURN(m.experts[e].w3, LoadLinear(cfg, store, p + "w3", I, H));
      M2_ASSIGN_OR_RETURN(m.experts[e].w2, LoadLinear(cfg, store, p + "w2", H, I));
    }
  } else {
    const std::string gu = moe + ".experts.gate_up_proj", dn = moe + ".experts.down_proj";
    std::initializer_list<DType> plain = {DType::kF32, DType::kBF16, DType::kF16};
    M2_ASSIGN_OR_RETURN(TensorView gate_up, store.Get(gu, plain, {E, 2 * I, H}));
    M2_ASSIGN_OR_RETURN(TensorView down, store.Get(dn, plain, {E, H, I}));
    for (int64_t e = 0; e < E; ++e) {
      M2_ASSIGN_OR_RETURN(m.experts[e].w1, SliceExpert(gate_up, gu, e, 0, I));
      M2_ASSIGN_OR_RETURN(m.experts[e].w3, SliceExpert(gate_up, gu, e, I, I));
      M2_ASSIGN_OR_RETURN(m.experts[e].w2, SliceExpert(down, dn, e, 0, H));
    }
  }
  return m;
}

// One decoder layer at `p` ("model.layers.N") with attention of `type`: norms, attention, MoE.
Result<LayerWeights> LoadDecoderLayer(const ModelConfig& cfg, const TensorStore& store, const std::string& p,
                                      LayerType type = LayerType::kSoftmax) {
  const int64_t H = cfg.hidden_size;
  LayerWeights L;
  L.type = type;
  M2_ASSIGN_OR_RETURN(L.input_norm, LoadVector(store, p + ".input_layernorm.weight", H));
  M2_ASSIGN_OR_RETURN(L.post_attention_norm, LoadVector(store, p + ".post_attention_layernorm.weight", H));
  const std::string a = p + ".self_attn";
  if (type == LayerType::kLightning) {
    if (store.Has(a + ".q_proj.weight"))
      return Error("'{}' is a Lightning layer in the config's schedule, but the checkpoint has softmax attention "
                   "weights there ({}.q_proj.weight): the schedule (layer_types / attn_type_list) does not match the "
                   "weights",
                   p, a);
    const int64_t hd = cfg.q_dim();  // heads x head_dim
    M2_ASSIGN_OR_RETURN(L.lightning.qkv, LoadLinear(cfg, store, a + ".qkv_proj", 3 * hd, H));
    M2_ASSIGN_OR_RETURN(L.lightning.gate, LoadLinear(cfg, store, a + ".output_gate", hd, H));
    M2_ASSIGN_OR_RETURN(L.lightning.out, LoadLinear(cfg, store, a + ".out_proj", H, hd));
    M2_ASSIGN_OR_RETURN(L.lightning.norm, LoadVector(store, a + ".norm.weight", hd));
    M2_ASSIGN_OR_RETURN(L.moe, LoadMoe(cfg, store, p));
    return L;
  }
  if (store.Has(a + ".qkv_proj.weight"))
    return Error("'{}' is a softmax-attention layer in the config's schedule, but the checkpoint has Lightning weights "
                 "there ({}.qkv_proj.weight): the schedule (layer_types / attn_type_list) does not match the weights",
                 p, a);
  M2_ASSIGN_OR_RETURN(L.attn.q, LoadLinear(cfg, store, a + ".q_proj", cfg.q_dim(), H));
  M2_ASSIGN_OR_RETURN(L.attn.k, LoadLinear(cfg, store, a + ".k_proj", cfg.kv_dim(), H));
  M2_ASSIGN_OR_RETURN(L.attn.v, LoadLinear(cfg, store, a + ".v_proj", cfg.kv_dim(), H));
  M2_ASSIGN_OR_RETURN(L.attn.o, LoadLinear(cfg, store, a + ".o_proj", H, cfg.q_dim()));
  if (cfg.use_qk_norm) {
    M2_ASSIGN_OR_RETURN(L.attn.q_norm, LoadVector(store, a + ".q_norm.weight", cfg.q_dim()));
    M2_ASSIGN_OR_RETURN(L.attn.k_norm, LoadVector(store, a + ".k_norm.weight", cfg.kv_dim()));
  }
  M2_ASSIGN_OR_RETURN(L.moe, LoadMoe(cfg, store, p));
  return L;
}

// The tensors only an MTP module has (the rest of it is an ordinary decoder layer).
constexpr const char* kMtpOwnTensors[] = {".hnorm.weight", ".enorm.weight", ".eh_proj.weight",
                                          ".shared_head.norm.weight"};

std::string MtpPrefix(const ModelConfig& cfg, int64_t k) {
  return fmt::format("model.layers.{}", cfg.num_hidden_layers + k);
}

// Fills w.mtp and w.mtp_status (see weights.h for when modules are bound).
Status LoadMtp(const ModelConfig& cfg, const TensorStore& store, ModelWeights& w) {
  const int64_t H = cfg.hidden_size, L = cfg.num_hidden_layers;
  const bool wanted = cfg.use_mtp && cfg.num_mtp_modules > 0;
  // Which modules' own tensors are in the checkpoint (module 0 only when none is wanted).
  std::vector<int64_t> found;
  for (int64_t k = 0; k < (wanted ? cfg.num_mtp_modules : 1); ++k)
    for (const char* t : kMtpOwnTensors)
      if (store.Has(MtpPrefix(cfg, k) + t)) {
        found.push_back(k);
        break;
      }
  if (!wanted) {
    w.mtp_status = found.empty() ? "none (config.json: use_mtp false)"
                                 : fmt::format("none: the checkpoint has MTP tensors at {}.* but config.json does not "
                                               "enable them (use_mtp {}, num_mtp_modules {}); they are not used",
                                               MtpPrefix(cfg, 0), cfg.use_mtp, cfg.num_mtp_modules);
    return Status::Ok();
  }
  if (found.empty()) {
    w.mtp_status = fmt::format("none: config.json says use_mtp with {} modules, but the checkpoint has no MTP tensors "
                               "(looked for {}{} ...); MTP disabled",
                               cfg.num_mtp_modules, MtpPrefix(cfg, 0), kMtpOwnTensors[2]);
    return Status::Ok();
  }
  if (cfg.mtp_transformer_layers != 1)
    return Error("config field \"mtp_transformer_layers\": expected 1 (one decoder layer per MTP module, the layout of "
                 "tools/train/model.py), found {}",
                 cfg.mtp_transformer_layers);
  // From here on every module must be complete: a missing or misshaped tensor is an error.
  w.mtp.resize(static_cast<size_t>(cfg.num_mtp_modules));
  for (int64_t k = 0; k < cfg.num_mtp_modules; ++k) {
    const std::string p = MtpPrefix(cfg, k);
    MtpWeights& m = w.mtp[static_cast<size_t>(k)];
    const auto bind = [&]() -> Status {
      M2_ASSIGN_OR_RETURN(m.hnorm, LoadVector(store, p + ".hnorm.weight", H));
      M2_ASSIGN_OR_RETURN(m.enorm, LoadVector(store, p + ".enorm.weight", H));
      M2_ASSIGN_OR_RETURN(m.eh_proj, LoadLinear(cfg, store, p + ".eh_proj", H, 2 * H));
      M2_ASSIGN_OR_RETURN(m.layer, LoadDecoderLayer(cfg, store, p));
      M2_ASSIGN_OR_RETURN(m.final_norm, LoadVector(store, p + ".shared_head.norm.weight", H));
      return Status::Ok();
    };
    Status st = bind();
    if (!st.ok())
      return st.WithContext(fmt::format("MTP module {} of {} (config.json: use_mtp, num_mtp_modules {}; the checkpoint "
                                        "has MTP tensors at {}.*)",
                                        k, cfg.num_mtp_modules, cfg.num_mtp_modules, MtpPrefix(cfg, found[0])));
  }
  w.mtp_status = cfg.num_mtp_modules == 1
                     ? fmt::format("1 module at model.layers.{}", L)
                     : fmt::format("{} modules at model.layers.{}..{}", cfg.num_mtp_modules, L, L + cfg.num_mtp_modules - 1);
  return Status::Ok();
}

}  // namespace

Result<ModelWeights> LoadModelWeights(const ModelConfig& cfg, const TensorStore& store,
                                      const std::function<void(int64_t, int64_t)>& on_layer) {
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  ModelWeights w;
  M2_ASSIGN_OR_RETURN(w.embed, LoadLinear(cfg, store, "model.embed_tokens", V, H));
  if (cfg.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    M2_ASSIGN_OR_RETURN(w.lm_head, LoadLinear(cfg, store, "lm_head", V, H));
  }
  M2_ASSIGN_OR_RETURN(w.final_norm, LoadVector(store, "model.norm.weight", H));
  w.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    M2_ASSIGN_OR_RETURN(w.layers[l], LoadDecoderLayer(cfg, store, fmt::format("model.layers.{}", l), cfg.layer_type(l)));
    if (on_layer) on_layer(l + 1, cfg.num_hidden_layers);
  }
  w.moe_layout = store.Has("model.layers.0.block_sparse_moe.gate.weight") ? "block_sparse_moe (released)"
                                                                          : "mlp, fused experts (transformers)";
  M2_RETURN_IF_ERROR(LoadMtp(cfg, store, w));
  return w;
}

}  // namespace m2

namespace m2 {

namespace {
void ForEachLinearOfLayer(LayerWeights& l, const std::function<void(LinearWeight&)>& fn) {
  for (LinearWeight* w : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.lightning.qkv, &l.lightning.gate,
                          &l.lightning.out, &l.moe.gate})
    if (w->valid()) fn(*w);
  for (ExpertWeights& e : l.moe.experts)
    for (LinearWeight* w : {&e.w1, &e.w3, &e.w2})
      if (w->valid()) fn(*w);
}
}  // namespace

void ForEachLinear(ModelWeights& w, const std::function<void(LinearWeight&)>& fn) {
  for (LinearWeight* m : {&w.embed, &w.lm_head})
    if (m->valid()) fn(*m);
  for (LayerWeights& l : w.layers) ForEachLinearOfLayer(l, fn);
  for (MtpWeights& m : w.mtp) {
    if (m.eh_proj.valid()) fn(m.eh_proj);
    ForEachLinearOfLayer(m.layer, fn);
  }
}

}  // namespace m2
