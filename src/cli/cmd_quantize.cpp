// m2 quantize: rewrite a model's linear weights as q8 or q4 (32-column groups, f16
// scales; see WeightFormat in kernels/linear.h) into a new, mmap-able model folder.
//
// Quantized: attention q/k/v/o projections, expert w1/w2/w3, MTP eh_proj, and lm_head
// with --lm-head q8|q4. Kept as they are: embeddings, norms, the router gate and its
// bias (MODEL_SPEC: never quantized), and any matrix whose width is not a multiple of 32.
// Each quantized `X.weight` becomes I8 [rows, cols] (q8) or U8 [rows, cols/2] (q4) plus
// `X.weight_qscale` F16 [rows, cols/32]; config.json gets quantization_config
// {"quant_method": "m2", "weight_format": "q8"|"q4", "group_size": 32}; the safetensors
// metadata names the format too.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "base/progress.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "io/tensor_store.h"
#include "kernels/linear.h"
#include "kernels/quantize.h"
#include "model/config.h"

namespace m2::cli {

namespace {

namespace fs = std::filesystem;

struct QuantizeOptions {
  std::string model, out, type = "q4", lm_head = "keep";
  int threads = 0;
};

bool Quantizable(const std::string& name, const std::string& lm_head) {
  static const std::regex linear(
      R"(.*\.(self_attn\.(q|k|v|o)_proj|experts\.\d+\.w[123]|eh_proj)\.weight)");
  if (name == "lm_head.weight") return lm_head != "keep";
  return std::regex_match(name, linear);
}

WeightFormat FormatFor(const std::string& name, const QuantizeOptions& o) {
  const std::string& t = name == "lm_head.weight" ? o.lm_head : o.type;
  return t == "q8" ? WeightFormat::kQ8 : WeightFormat::kQ4;
}

int Run(const QuantizeOptions& o) {
  if (o.type != "q8" && o.type != "q4") return Fail(Error("--type: expected q8 or q4, found '{}'", o.type));
  if (o.lm_head != "keep" && o.lm_head != "q8" && o.lm_head != "q4")
    return Fail(Error("--lm-head: expected keep, q8 or q4, found '{}'", o.lm_head));
  auto cfg = LoadModelConfig(o.model);
  if (!cfg.ok()) return Fail(cfg.status());
  auto store_r = TensorStore::Open(o.model);
  if (!store_r.ok()) return Fail(store_r.status());
  const TensorStore& store = **store_r;
  std::error_code ec;
  if (fs::equivalent(o.model, o.out, ec)) return Fail(Error("--out must differ from the model folder"));
  fs::create_directories(o.out, ec);
  if (ec) return Fail(Error("cannot create '{}': {}", o.out, ec.message()));

  // Plan the output tensors.
  struct Plan {
    SafetensorsTensorSpec spec;
    std::string source;       // the tensor it comes from
    bool quantized = false;   // the packed weight of a quantized matrix
    bool scales = false;      // its weight_qscale
    WeightFormat format = WeightFormat::kQ4;
  };
  std::vector<Plan> plan;
  int64_t kept_odd = 0;
  for (const auto& name : store.Names()) {
    if (name.size() > 17 && name.compare(name.size() - 17, 17, ".weight_scale_inv") == 0) {
      const std::string w = name.substr(0, name.size() - 17) + ".weight";
      if (Quantizable(w, o.lm_head) && store.Get(w)->shape.size() == 2 && store.Get(w)->shape[1] % 32 == 0) continue;
    }
    const TensorView v = store.Get(name).value();
    if (Quantizable(name, o.lm_head) && v.shape.size() == 2) {
      if (v.shape[1] % kQuantGroup != 0) {
        ++kept_odd;
      } else {
        const WeightFormat f = FormatFor(name, o);
        const int64_t rows = v.shape[0], cols = v.shape[1];
        plan.push_back({{name, f == WeightFormat::kQ8 ? DType::kI8 : DType::kU8,
                         {rows, f == WeightFormat::kQ8 ? cols : cols / 2}}, name, true, false, f});
        plan.push_back({{name + "_qscale", DType::kF16, {rows, cols / kQuantGroup}}, name, false, true, f});
        continue;
      }
    }
    plan.push_back({{name, v.dtype, v.shape}, name, false, false, WeightFormat::kF32});
  }
  std::stable_sort(plan.begin(), plan.end(),
                   [](const Plan& a, const Plan& b) { return DTypeSize(a.spec.dtype) > DTypeSize(b.spec.dtype); });
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& p : plan) specs.push_back(p.spec);

  // The source matrix of a quantized tensor, in whatever format it is stored.
  const auto source_weight = [&](const std::string& name) {
    const TensorView v = store.Get(name).value();
    LinearWeight w;
    w.rows = v.shape[0];
    w.cols = v.shape[1];
    w.data = v.data;
    switch (v.dtype) {
      case DType::kBF16: w.format = WeightFormat::kBF16; break;
      case DType::kF16: w.format = WeightFormat::kF16; break;
      case DType::kF8E4M3: {
        w.format = WeightFormat::kFp8Block;
        w.block_rows = cfg->quant.block_out;
        w.block_cols = cfg->quant.block_in;
        auto s = store.Get(name + "_scale_inv", {DType::kF32}, {w.scale_rows(), w.scale_cols()});
        w.scale = s.ok() ? s->data : nullptr;
        break;
      }
      default: w.format = WeightFormat::kF32; break;
    }
    return w;
  };

  // Quantize a whole matrix on first request; keep its two outputs until both are written.
  ThreadPool pool(o.threads);
  std::map<std::string, std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> made;
  Status failure;
  const auto produce = [&](const std::string& name, WeightFormat f) {
    if (made.count(name)) return;
    const LinearWeight w = source_weight(name);
    if (w.format == WeightFormat::kFp8Block && w.scale == nullptr) {
      failure = Error("tensor '{}' is F8_E4M3 but '{}_scale_inv' is missing or misshapen", name, name);
      return;
    }
    auto& slot = made[name];
    auto& q = slot.first;  // named references, not a structured binding: clang 14 cannot capture those
    auto& s = slot.second;
    const int64_t qrow = f == WeightFormat::kQ8 ? w.cols : w.cols / 2, groups = w.cols / kQuantGroup;
    q.resize(static_cast<size_t>(w.rows * qrow));
    s.resize(static_cast<size_t>(w.rows * groups * 2));
    pool.ParallelFor(w.rows, 16, [&](int64_t r0, int64_t r1, int) {
      std::vector<float> row(static_cast<size_t>(w.cols));
      for (int64_t r = r0; r < r1; ++r) {
        DequantizeRow(w, r, row.data());
        uint16_t* sc = reinterpret_cast<uint16_t*>(s.data()) + r * groups;
        if (f == WeightFormat::kQ8) QuantizeRowQ8(row.data(), w.cols, reinterpret_cast<int8_t*>(&q[r * qrow]), sc);
        else QuantizeRowQ4(row.data(), w.cols, &q[r * qrow], sc);
      }
    });
  };
  const auto fill = [&](size_t i, uint64_t offset, uint8_t* buf, size_t n) {
    const Plan& p = plan[i];
    if (!p.quantized && !p.scales) {
      std::memcpy(buf, store.Get(p.source)->data + offset, n);
      return;
    }
    produce(p.source, p.format);
    auto it = made.find(p.source);
    if (it == made.end()) {
      std::memset(buf, 0, n);
      return;
    }
    const auto& bytes = p.quantized ? it->second.first : it->second.second;
    std::memcpy(buf, bytes.data() + offset, n);
    if (offset + n == bytes.size()) {
      // Forget the matrix once both of its tensors are fully written.
      auto& done = p.quantized ? it->second.first : it->second.second;
      done.clear();
      done.shrink_to_fit();
      if (it->second.first.empty() && it->second.second.empty()) made.erase(it);
    }
  };
  uint64_t total = 0;
  for (const auto& s : specs) {
    uint64_t b = DTypeSize(s.dtype);
    for (int64_t d : s.shape) b *= static_cast<uint64_t>(d);
    total += b;
  }
  const std::string out_file = (fs::path(o.out) / "model.safetensors").string();
  {
    Progress progress("quantizing to " + o.type + " -> " + out_file, total, "bytes");
    Status st = WriteSafetensorsStreaming(out_file, specs,
                                          {{"format", "pt"}, {"m2.quantization", o.type}, {"m2.group_size", "32"},
                                           {"m2.lm_head", o.lm_head}},
                                          fill, [&](uint64_t b) { progress.Update(b); });
    if (!st.ok()) return Fail(st);
    if (!failure.ok()) return Fail(failure);
  }

  // config.json with the new quantization_config; other small files copied.
  auto j = ReadJsonFile((fs::path(o.model) / "config.json").string());
  if (!j.ok()) return Fail(j.status());
  (*j)["quantization_config"] = {{"quant_method", "m2"}, {"weight_format", o.type}, {"group_size", 32},
                                 {"lm_head", o.lm_head},
                                 {"weight_block_size", {cfg->quant.block_out, cfg->quant.block_in}}};
  std::ofstream(fs::path(o.out) / "config.json") << j->dump(2) << "\n";
  for (const auto& e : fs::directory_iterator(o.model, ec)) {
    const std::string f = e.path().filename().string();
    if (!e.is_regular_file() || f == "config.json" || f == "model.safetensors.index.json" ||
        e.path().extension() == ".safetensors")
      continue;
    fs::copy_file(e.path(), fs::path(o.out) / f, fs::copy_options::overwrite_existing, ec);
  }
  std::printf("wrote %s (%.1f MiB)%s\n", o.out.c_str(), total / double(1 << 20),
              kept_odd ? fmt::format("; {} matrices kept unquantized (width not a multiple of 32)", kept_odd).c_str()
                       : "");
  return 0;
}

}  // namespace

void AddQuantize(CLI::App& app, Runner& run) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Write a copy of a model with 8-bit or 4-bit group-quantized linear weights (mmap-able safetensors).");
  cmd->add_option("-m,--model", o->model, "Source model folder")->required();
  cmd->add_option("-o,--out", o->out, "Output folder")->required();
  AddThreadsFlag(cmd, o->threads);
  cmd->add_option("--type", o->type, "q8 or q4 (32 columns per f16 scale)");
  cmd->add_option("--lm-head", o->lm_head, "keep (default), q8 or q4");
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
