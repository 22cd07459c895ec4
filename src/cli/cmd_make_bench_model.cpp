// m2 make-bench-model: a random-weight slice of a real model's per-layer dimensions in
// the released FP8 layout, but few layers and experts so it fits a small machine. For
// `m2 bench`; made on demand, never committed.
//  --arch m2 (default): MiniMax-M2 (hidden 3072, 48 query / 8 KV heads of 128, rotary 64,
//     experts of width 1536 with top-8, vocab 200064).
//  --arch minimax-text-01: MiniMax-Text-01 / M1 (hidden 6144, 64 heads of 128, 8 KV heads
//     in the softmax layers, rotary 64, experts of width 9216 with top-2, vocab 200064),
//     Lightning layers with a softmax layer every 8th (the released 7:1 schedule).
//  --arch minimax-text-01-softmax: the same sizes with softmax attention in every layer,
//     the baseline the hybrid is compared with.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "base/progress.h"
#include "cli/commands.h"
#include "io/safetensors.h"

namespace m2::cli {

namespace {

struct MakeOptions {
  std::string out;
  std::string arch = "m2";
  int layers = 0;   // 0: the arch's default
  int experts = 0;
  int top_k = 0;
  uint64_t seed = 1;
};

struct ArchSizes {
  bool hybrid;      // a Lightning hybrid (Text-01 / M1 naming and residual)
  bool lightning;   // with Lightning layers (7 of every 8)
  int64_t H, V, Hq, KVh, D, I, rotary;
  double theta, eps;
  int layers, experts, top_k;  // defaults
};

Result<ArchSizes> SizesOf(const std::string& arch) {
  if (arch == "m2") return ArchSizes{false, false, 3072, 200064, 48, 8, 128, 1536, 64, 5e6, 1e-6, 4, 64, 8};
  if (arch == "minimax-text-01")
    return ArchSizes{true, true, 6144, 200064, 64, 8, 128, 9216, 64, 1e7, 1e-5, 8, 4, 2};
  if (arch == "minimax-text-01-softmax")
    return ArchSizes{true, false, 6144, 200064, 64, 8, 128, 9216, 64, 1e7, 1e-5, 8, 4, 2};
  return Error("--arch: expected m2, minimax-text-01 or minimax-text-01-softmax, found '{}'", arch);
}

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int Run(const MakeOptions& opts) {
  namespace fs = std::filesystem;
  auto sizes = SizesOf(opts.arch);
  if (!sizes.ok()) return Fail(sizes.status());
  const ArchSizes& a = *sizes;
  MakeOptions o = opts;
  if (o.layers == 0) o.layers = a.layers;
  if (o.experts == 0) o.experts = a.experts;
  if (o.top_k == 0) o.top_k = a.top_k;
  const int64_t H = a.H, V = a.V, Hq = a.Hq, KVh = a.KVh, D = a.D, I = a.I, E = o.experts;
  if (o.top_k > o.experts) return Fail(Error("--top-k {} is larger than --experts {}", o.top_k, o.experts));
  // The released hybrids' schedule: softmax at layers 7, 15, ... (attn_type_list 1).
  std::vector<int> softmax_layer(static_cast<size_t>(o.layers), 1);
  if (a.lightning)
    for (int l = 0; l < o.layers; ++l) softmax_layer[l] = (l + 1) % 8 == 0 ? 1 : 0;
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) return Fail(Error("cannot create '{}': {}", o.out, ec.message()));

  const nlohmann::json quant = {{"quant_method", "fp8"}, {"fmt", "float8_e4m3fn"}, {"activation_scheme", "dynamic"},
                                {"weight_block_size", {128, 128}},
                                {"modules_to_not_convert", {"gate", "e_score_correction_bias", "lm_head"}}};
  nlohmann::json cfg;
  if (!a.hybrid) {
    cfg = {{"architectures", {"MiniMaxM2ForCausalLM"}}, {"model_type", "minimax_m2"}, {"hidden_size", H},
           {"intermediate_size", I}, {"num_hidden_layers", o.layers}, {"num_attention_heads", Hq},
           {"num_key_value_heads", KVh}, {"head_dim", D}, {"rotary_dim", a.rotary}, {"partial_rotary_factor", 0.5},
           {"rope_theta", a.theta}, {"num_local_experts", E}, {"num_experts_per_tok", o.top_k},
           {"scoring_func", "sigmoid"}, {"use_routing_bias", true}, {"use_qk_norm", true},
           {"qk_norm_type", "per_layer"}, {"rms_norm_eps", a.eps}, {"hidden_act", "silu"}, {"vocab_size", V},
           {"max_position_embeddings", 196608}, {"tie_word_embeddings", false}, {"bos_token_id", 200034},
           {"eos_token_id", 200020}, {"torch_dtype", "bfloat16"}, {"quantization_config", quant}};
  } else {
    const double alpha = std::pow(2.0 * o.layers, 0.25);  // the released (2 L)^(1/4)
    cfg = {{"architectures", {"MiniMaxText01ForCausalLM"}}, {"model_type", "minimax_text_01"}, {"hidden_size", H},
           {"intermediate_size", I}, {"num_hidden_layers", o.layers}, {"num_attention_heads", Hq},
           {"num_key_value_heads", KVh}, {"head_dim", D}, {"rotary_dim", a.rotary}, {"rope_theta", a.theta},
           {"num_local_experts", E}, {"num_experts_per_tok", o.top_k}, {"attn_type_list", softmax_layer},
           {"postnorm", true}, {"layernorm_full_attention_alpha", alpha}, {"layernorm_full_attention_beta", 1.0},
           {"layernorm_linear_attention_alpha", alpha}, {"layernorm_linear_attention_beta", 1.0},
           {"layernorm_mlp_alpha", alpha}, {"layernorm_mlp_beta", 1.0}, {"rms_norm_eps", a.eps},
           {"hidden_act", "silu"}, {"vocab_size", V}, {"max_position_embeddings", 10240000},
           {"tie_word_embeddings", false}, {"bos_token_id", 200034}, {"eos_token_id", 200020},
           {"shared_intermediate_size", 0}, {"torch_dtype", "bfloat16"}, {"quantization_config", quant}};
  }
  std::ofstream(fs::path(o.out) / "config.json") << cfg.dump(2) << "\n";

  // Tensors in alignment order: f32, then bf16, then fp8.
  enum class Fill { kZero, kOne, kBf16Random, kFp8Random, kScale };
  std::vector<SafetensorsTensorSpec> specs;
  std::vector<Fill> fills;
  const auto add = [&](std::string name, DType t, std::vector<int64_t> shape, Fill f) {
    specs.push_back({std::move(name), t, std::move(shape)});
    fills.push_back(f);
  };
  const auto blocks = [](int64_t n) { return (n + 127) / 128; };
  struct Lin { std::string name; int64_t rows, cols; };
  std::vector<Lin> fp8;
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    if (softmax_layer[l]) {
      fp8.push_back({p + ".self_attn.q_proj", Hq * D, H});
      fp8.push_back({p + ".self_attn.k_proj", KVh * D, H});
      fp8.push_back({p + ".self_attn.v_proj", KVh * D, H});
      fp8.push_back({p + ".self_attn.o_proj", H, Hq * D});
    } else {
      fp8.push_back({p + ".self_attn.qkv_proj", 3 * Hq * D, H});
      fp8.push_back({p + ".self_attn.output_gate", Hq * D, H});
      fp8.push_back({p + ".self_attn.out_proj", H, Hq * D});
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + ".block_sparse_moe.experts." + std::to_string(e);
      fp8.push_back({x + ".w1", I, H});
      fp8.push_back({x + ".w3", I, H});
      fp8.push_back({x + ".w2", H, I});
    }
  }
  for (const auto& f : fp8) add(f.name + ".weight_scale_inv", DType::kF32, {blocks(f.rows), blocks(f.cols)}, Fill::kScale);
  if (!a.hybrid)
    for (int l = 0; l < o.layers; ++l)
      add("model.layers." + std::to_string(l) + ".block_sparse_moe.e_score_correction_bias", DType::kF32, {E},
          Fill::kZero);
  add("model.embed_tokens.weight", DType::kBF16, {V, H}, Fill::kBf16Random);
  add("lm_head.weight", DType::kBF16, {V, H}, Fill::kBf16Random);
  add("model.norm.weight", DType::kBF16, {H}, Fill::kOne);
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    add(p + ".input_layernorm.weight", DType::kBF16, {H}, Fill::kOne);
    add(p + ".post_attention_layernorm.weight", DType::kBF16, {H}, Fill::kOne);
    if (!a.hybrid) {
      add(p + ".self_attn.q_norm.weight", DType::kBF16, {Hq * D}, Fill::kOne);
      add(p + ".self_attn.k_norm.weight", DType::kBF16, {KVh * D}, Fill::kOne);
    } else if (!softmax_layer[l]) {
      add(p + ".self_attn.norm.weight", DType::kBF16, {Hq * D}, Fill::kOne);
    }
    add(p + ".block_sparse_moe.gate.weight", DType::kBF16, {E, H}, Fill::kBf16Random);
  }
  for (const auto& f : fp8) add(f.name + ".weight", DType::kF8E4M3, {f.rows, f.cols}, Fill::kFp8Random);

  uint64_t total = 0;
  for (const auto& s : specs) {
    uint64_t n = DTypeSize(s.dtype);
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    total += n;
  }
  Progress progress("writing " + (fs::path(o.out) / "model.safetensors").string(), total, "bytes");
  // FP8 weights drawn as a checkpoint's are distributed (about normal, the largest of a
  // block near 448), not uniformly over the 254 codes: uniform codes made 1 in 16 a zero or
  // subnormal code, which real weights hardly have and which a decode kernel could treat
  // apart, so that the benchmark would misjudge it.
  const std::vector<uint8_t> fp8_codes = GaussianFp8Codes(100.0f);
  const auto fill = [&](size_t t, uint64_t offset, uint8_t* buf, size_t n) {
    uint64_t state = o.seed * 1000003 + t * 7919 + offset;
    switch (fills[t]) {
      case Fill::kZero: std::memset(buf, 0, n); break;
      case Fill::kOne:
        for (size_t i = 0; i + 1 < n; i += 2) buf[i] = 0x80, buf[i + 1] = 0x3f;  // bf16 1.0
        break;
      case Fill::kScale:  // fp32 1e-4: the fp8 codes have rms ~ 100, so weights ~ 0.01
        for (size_t i = 0; i + 3 < n; i += 4) {
          const float s = 1e-4f;
          std::memcpy(buf + i, &s, 4);
        }
        break;
      case Fill::kBf16Random:
        for (size_t i = 0; i + 1 < n; i += 2) {
          const uint64_t r = SplitMix(state);
          const float v = (static_cast<float>(r & 0xffff) / 32768.0f - 1.0f) * 0.05f;
          const uint16_t b = F32ToBf16(v);
          std::memcpy(buf + i, &b, 2);
        }
        break;
      case Fill::kFp8Random:
        for (size_t i = 0; i < n; i += 4) {
          uint64_t r = SplitMix(state);
          for (size_t j = 0; j < 4 && i + j < n; ++j, r >>= 16) buf[i + j] = fp8_codes[r & 0xffff];
        }
        break;
    }
  };
  Status st = WriteSafetensorsStreaming((fs::path(o.out) / "model.safetensors").string(), specs, {{"format", "pt"}},
                                        fill, [&](uint64_t b) { progress.Update(b); });
  progress.Finish();
  if (!st.ok()) return Fail(st);
  int lightning = 0;
  for (int t : softmax_layer) lightning += t == 0;
  std::printf("wrote %s: %s, %d layers (%d Lightning), %d experts (top-%d), %.2f GiB\n", o.out.c_str(),
              o.arch.c_str(), o.layers, lightning, o.experts, o.top_k, static_cast<double>(total) / (1ull << 30));
  return 0;
}

}  // namespace

void AddMakeBenchModel(CLI::App& app, Runner& run) {
  auto o = std::make_shared<MakeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "make-bench-model",
      "Write a random-weight model slice (real per-layer sizes, fewer layers and experts, FP8) for m2 bench.");
  cmd->add_option("-o,--out", o->out, "Output folder")->required();
  cmd->add_option("--arch", o->arch,
                  "m2 (MiniMax-M2, default), minimax-text-01 (the Lightning hybrid, softmax every 8th layer) or "
                  "minimax-text-01-softmax (the same sizes, softmax everywhere)");
  cmd->add_option("--layers", o->layers, "Decoder layers (default: 4 for m2, 8 for the Text-01 slices)")
      ->check(CLI::Range(1, 80));
  cmd->add_option("--experts", o->experts, "Experts per layer (default: 64 for m2, 4 for Text-01)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--top-k", o->top_k, "Experts per token (default: 8 for m2, 2 for Text-01)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--seed", o->seed, "Random seed");
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
