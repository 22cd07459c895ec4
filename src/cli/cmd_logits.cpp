// m2 logits: the logits at every position of a token sequence, as JSON - the tool for
// comparing this engine with other implementations. --dump also writes every named
// intermediate (see model/tracer.h) to a safetensors file.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/parallel_flags.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace m2::cli {

namespace {

struct LogitsOptions {
  std::string model;
  std::string ids;
  std::string dump;
  int threads = 0;
  std::string activations = "exact";
  std::string attention = "auto";  // exact unless --activations takes a fast path
  WeightMemory weights = WeightMemory::kAuto;  // --mmap / --no-mmap
  std::string parallel = "off";
};

int Run(const LogitsOptions& o) {
  auto ids = ParseIdList(o.ids);
  if (!ids.ok()) return Fail(ids.status());
  const LoadOptions load{.progress = false, .threads = o.threads, .activations = ActivationsOf(o.activations), .attention = AttentionOf(o.attention), .weights = o.weights};
  auto par = StartParallel(o.parallel, o.model, load);
  if (!par.ok()) return Fail(par.status());
  if (par->exit_code) return *par->exit_code;  // a rank > 0: it has followed rank 0
  auto model = LoadModel(o.model, load, *par);
  if (!model.ok()) return Fail(model.status());
  Model& m = **model;
  KvBlockPool pool(m.cache_layout());
  SequenceCache cache(&pool);
  SequenceCache* caches[] = {&cache};
  ForwardBatch batch;
  for (int32_t id : *ids) batch.Add(id, 0, true);
  std::vector<float> logits;
  CollectingTracer tracer;
  Status st = m.Forward(batch, caches, logits, o.dump.empty() ? nullptr : &tracer);
  if (!st.ok()) return Fail(st);

  if (!o.dump.empty()) {
    std::vector<SafetensorsTensorOut> out;
    for (const auto& e : tracer.entries()) out.push_back({e.name, DType::kF32, e.shape, e.data.data()});
    st = WriteSafetensors(o.dump, out, {{"ids", o.ids}});
    if (!st.ok()) return Fail(st);
    std::fprintf(stderr, "wrote %zu intermediates to %s\n", out.size(), o.dump.c_str());
  }
  const int64_t V = m.config().vocab_size;
  // Stream the JSON: shortest round-trip float text keeps every bit.
  std::printf("{\"ids\": %s, \"vocab_size\": %lld, \"logits\": [", nlohmann::json(*ids).dump().c_str(), (long long)V);
  for (size_t t = 0; t < ids->size(); ++t) {
    std::printf("%s[", t ? ", " : "");
    for (int64_t v = 0; v < V; ++v) std::printf("%s%s", v ? ", " : "", fmt::format("{}", logits[t * V + v]).c_str());
    std::printf("]");
  }
  std::printf("]}\n");
  return 0;
}

}  // namespace

void AddLogits(CLI::App& app, Runner& run) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd =
      app.add_subcommand("logits", "Print the logits at every position of the given token ids, as JSON.");
  cmd->add_option("-m,--model", o->model, "Model folder (config.json + safetensors)")->required();
  cmd->add_option("--ids", o->ids, "Token ids, comma separated (e.g. 1,2,3)")->required();
  AddThreadsFlag(cmd, o->threads);
  AddActivationsFlag(cmd, o->activations);
  AddAttentionFlag(cmd, o->attention);
  AddWeightMemoryFlags(cmd, o->weights);
  AddParallelFlag(cmd, o->parallel);
  cmd->add_option("--dump", o->dump, "Also write every named intermediate tensor to this .safetensors file");
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
