// m2 inspect: what a model folder holds, without running it.
#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "base/progress.h"
#include "cli/commands.h"
#include "model/config.h"
#include "model/weights.h"
#include "runtime/engine.h"

namespace m2::cli {

namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
  bool verify = false;
};

// Layer index in "model.layers.N.*", or -1.
int64_t LayerOf(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  return std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool IsScale(const std::string& name) { return EndsWith(name, ".weight_scale_inv"); }

// Tensors that are not parameters: transformers' save_pretrained of MiniMaxForCausalLM
// writes the Lightning decay tables (recomputed from the config, not read).
bool IsBuffer(const std::string& name) {
  for (const char* b : {".slope_rate", ".query_decay", ".key_decay", ".diagonal_decay"})
    if (EndsWith(name, b)) return true;
  return false;
}

std::string Bytes(double b) {
  if (b < 1024) return fmt::format("{:.0f} B", b);
  if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

std::string Human(double v) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 4) v /= 1000, ++u;
  return fmt::format("{:.2f}{}", v, units[u]);
}

int Run(const InspectOptions& o) {
  auto cfg = LoadModelConfig(o.model);
  if (!cfg.ok()) return Fail(cfg.status());
  std::unique_ptr<Progress> shard_progress;
  auto store = TensorStore::Open(o.model, [&](size_t i, size_t n) {
    if (!shard_progress) shard_progress = std::make_unique<Progress>("reading headers", n, "files", n > 1);
    shard_progress->Update(i);
  });
  shard_progress.reset();
  if (!store.ok()) return Fail(store.status());
  // Binding the weights checks every tensor's name, dtype and shape against the config.
  auto weights = LoadModelWeights(*cfg, **store);
  if (!weights.ok()) return Fail(weights.status());

  const ModelConfig& c = *cfg;
  const int64_t mtp_modules = static_cast<int64_t>(weights->mtp.size());
  uint64_t total = 0, expert = 0, extra = 0, mtp = 0, mtp_expert = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  uint64_t total_bytes = 0;
  for (const auto& name : (*store)->Names()) {
    TensorView v = (*store)->Get(name).value();
    bytes_by_dtype[std::string(DTypeName(v.dtype))] += v.nbytes;
    total_bytes += v.nbytes;
    if (IsScale(name) || IsBuffer(name)) continue;
    const uint64_t numel = static_cast<uint64_t>(v.numel());
    const int64_t layer = LayerOf(name);
    if (layer >= c.num_hidden_layers && layer < c.num_hidden_layers + mtp_modules) {
      mtp += numel;  // a loaded MTP module
      if (name.find(".experts.") != std::string::npos) mtp_expert += numel;
      continue;
    }
    if (layer >= c.num_hidden_layers) {
      extra += numel;  // past the trunk and not a loaded MTP module (released files reserve 62..64)
      continue;
    }
    total += numel;
    if (name.find(".experts.") != std::string::npos) expert += numel;
  }
  const uint64_t active = total - expert + expert * c.num_experts_per_tok / c.num_local_experts;
  // One module runs per drafted token: its share of the MTP parameters, experts top-k.
  const uint64_t mtp_active_per_module =
      mtp_modules == 0 ? 0
                       : (mtp - mtp_expert + mtp_expert * c.num_experts_per_tok / c.num_local_experts) /
                             static_cast<uint64_t>(mtp_modules);

  uint64_t nan_count = 0;
  if (o.verify) {
    Progress p("verifying tensor data", total_bytes, "bytes");
    for (const auto& name : (*store)->Names()) {
      TensorView v = (*store)->Get(name).value();
      for (int64_t i = 0; i < v.numel(); ++i) {
        float f = 0;
        switch (v.dtype) {
          case DType::kF32: f = v.as<float>()[i]; break;
          case DType::kBF16: f = Bf16ToF32(v.as<uint16_t>()[i]); break;
          case DType::kF16: f = F16ToF32(v.as<uint16_t>()[i]); break;
          case DType::kF8E4M3: f = Fp8E4M3ToF32(v.data[i]); break;
          default: break;
        }
        nan_count += !std::isfinite(f);
      }
      p.Advance(v.nbytes);
    }
  }

  // Memory of a sequence's cache: keys and values per token in the softmax layers, a
  // fixed fp32 state per sequence in the Lightning layers (whatever the context length).
  const int64_t softmax_layers = c.num_hidden_layers - c.num_lightning_layers();
  const int64_t kv_f32 = runtime::KvBytesPerToken(c, KvDtype::kF32), kv_bf16 = runtime::KvBytesPerToken(c, KvDtype::kBf16);
  // q8 rows need head_dim to be a multiple of their group (runtime::CheckKvDtype); 0: not possible.
  const int64_t kv_q8 = runtime::CheckKvDtype(c, KvDtype::kQ8).ok() ? runtime::KvBytesPerToken(c, KvDtype::kQ8) : 0;
  const int64_t state_bytes = c.lightning_state_bytes();
  std::string schedule;  // "softmax at 7, 15, ..." for the hybrids
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.layer_type(l) == LayerType::kSoftmax) schedule += (schedule.empty() ? "" : ", ") + std::to_string(l);

  if (o.json) {
    nlohmann::json types = nlohmann::json::array();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) types.push_back(LayerTypeName(c.layer_type(l)));
    nlohmann::json j = {
        {"architecture", c.architecture},
        {"layers", c.num_hidden_layers},
        {"hidden_size", c.hidden_size},
        {"attention_heads", c.num_attention_heads},
        {"kv_heads", c.num_key_value_heads},
        {"head_dim", c.head_dim},
        {"rotary_dim", c.rotary_dim},
        {"experts", c.num_local_experts},
        {"experts_per_token", c.num_experts_per_tok},
        {"expert_width", c.intermediate_size},
        {"vocab_size", c.vocab_size},
        {"parameters_total", total},
        {"parameters_active_per_token", active},
        {"parameters_extra_layers", extra},
        {"bytes_by_dtype", bytes_by_dtype},
        {"files", (*store)->num_files()},
        {"fp8", c.quant.enabled},
        {"moe_layout", weights->moe_layout},
        {"mtp_modules", mtp_modules},
        {"mtp_parameters", mtp},
        {"mtp_parameters_active_per_module", mtp_active_per_module},
        {"mtp_status", weights->mtp_status},
        {"layer_types", types},
        {"lightning_layers", c.num_lightning_layers()},
        {"kv_bytes_per_token_f32", kv_f32},
        {"kv_bytes_per_token_bf16", kv_bf16},
        {"kv_bytes_per_token_q8", kv_q8},
        {"lightning_state_bytes_per_sequence", state_bytes},
    };
    if (c.hybrid) {
      j["lightning_block"] = c.lightning_block;
      j["residual"] = {{"softmax_alpha", c.softmax_alpha}, {"softmax_beta", c.softmax_beta},
                       {"lightning_alpha", c.lightning_alpha}, {"lightning_beta", c.lightning_beta},
                       {"mlp_alpha", c.mlp_alpha}, {"mlp_beta", c.mlp_beta}};
    }
    if (o.verify) j["non_finite_values"] = nan_count;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model          %s\n", o.model.c_str());
  std::printf("architecture   %s (%s)\n", c.architecture.c_str(), c.model_type.c_str());
  std::printf("layers         %lld, hidden %lld, vocab %lld\n", (long long)c.num_hidden_layers, (long long)c.hidden_size,
              (long long)c.vocab_size);
  if (c.hybrid)
    std::printf("schedule       %lld Lightning layers (block %lld), %lld softmax at layer%s %s\n",
                (long long)c.num_lightning_layers(), (long long)c.lightning_block, (long long)softmax_layers,
                softmax_layers == 1 ? "" : "s", schedule.empty() ? "(none)" : schedule.c_str());
  std::printf("attention      %lld query heads, %lld kv heads (GQA %lld:1), head_dim %lld, rotary %lld, theta %g\n",
              (long long)c.num_attention_heads, (long long)c.num_key_value_heads, (long long)c.kv_group(),
              (long long)c.head_dim, (long long)c.rotary_dim, c.rope_theta);
  std::printf("experts        %lld of width %lld, top-%lld, %s routing%s\n", (long long)c.num_local_experts,
              (long long)c.intermediate_size, (long long)c.num_experts_per_tok, c.scoring_func.c_str(),
              c.use_routing_bias ? " with selection bias" : "");
  std::printf("moe layout     %s\n", weights->moe_layout.c_str());
  std::printf("cache          %s per token of context (f32 keys and values; %s as bf16%s)%s\n",
              Bytes(static_cast<double>(kv_f32)).c_str(), Bytes(static_cast<double>(kv_bf16)).c_str(),
              kv_q8 > 0 ? fmt::format(", {} as q8", Bytes(static_cast<double>(kv_q8))).c_str() : "",
              state_bytes > 0 ? fmt::format(", plus {} of fp32 Lightning state per sequence whatever its length",
                                            Bytes(static_cast<double>(state_bytes)))
                                    .c_str()
                              : "");
  std::printf("quantization   %s\n",
              c.quant.enabled ? fmt::format("fp8 e4m3, {}x{} block scales", c.quant.block_out, c.quant.block_in).c_str()
                              : "none");
  std::printf("parameters     %s total, %s active per token (%llu / %llu)\n", Human(total).c_str(),
              Human(active).c_str(), (unsigned long long)total, (unsigned long long)active);
  std::printf("mtp            %s\n", weights->mtp_status.c_str());
  if (mtp_modules > 0)
    std::printf("mtp parameters %s in all (%llu), %s per module, %s active per module and token\n", Human(mtp).c_str(),
                (unsigned long long)mtp, Human(static_cast<double>(mtp) / mtp_modules).c_str(),
                Human(mtp_active_per_module).c_str());
  if (extra) std::printf("extra layers   %s parameters past layer %lld (not used)\n", Human(extra).c_str(),
                         (long long)(c.num_hidden_layers + mtp_modules - 1));
  std::printf("files          %zu\n", (*store)->num_files());
  for (const auto& [dt, b] : bytes_by_dtype)
    std::printf("  %-8s     %.2f MiB\n", dt.c_str(), static_cast<double>(b) / (1 << 20));
  if (o.verify) std::printf("non-finite     %llu values\n", (unsigned long long)nan_count);
  return 0;
}

}  // namespace

void AddInspect(CLI::App& app, Runner& run) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Describe a model folder: architecture, parameter counts (total and active per token), bytes by dtype.");
  cmd->add_option("-m,--model", o->model, "Model folder (config.json + safetensors)")->required();
  cmd->add_flag("--json", o->json, "Print machine-readable JSON");
  cmd->add_flag("--verify", o->verify, "Also read every tensor and count non-finite values (reads the whole model)");
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
