// m2 perplexity: how well the model predicts a text file (runtime/perplexity.h explains
// the windowing).
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/progress.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/parallel_flags.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/perplexity.h"
#include "text/tokenizer.h"

namespace m2::cli {

namespace {

struct PerplexityOptions {
  std::string model;
  std::string file;
  int64_t context = 0;
  int64_t stride = 0;
  std::string reference;
  bool special = false;
  bool json = false;
  std::string kv_dtype = "f32", reference_kv_dtype = "f32";
  int threads = 0;
  std::string activations = "exact", reference_activations = "exact";
  std::string attention = "auto";  // exact unless --activations takes a fast path (the reference: its own)
  WeightMemory weights = WeightMemory::kAuto;  // --mmap / --no-mmap (both models)
  std::string parallel = "off";
};

int Run(const PerplexityOptions& o) {
  const LoadOptions load{.progress = !o.json, .activations = ActivationsOf(o.activations, /*everywhere=*/true), .attention = AttentionOf(o.attention), .weights = o.weights};
  if (o.parallel != "off" && !o.reference.empty())
    return Fail(Error("--reference cannot be combined with --parallel: compare two models in one process"));
  auto par = StartParallel(o.parallel, o.model, {.progress = false, .threads = o.threads, .activations = load.activations, .attention = load.attention});
  if (!par.ok()) return Fail(par.status());
  if (par->exit_code) return *par->exit_code;  // a rank > 0: it has followed rank 0
  auto kv_dtype = runtime::ParseKvDtype(o.kv_dtype);
  if (!kv_dtype.ok()) return Fail(Status(kv_dtype.status()).WithContext("--kv-dtype"));
  auto ref_kv_dtype = runtime::ParseKvDtype(o.reference_kv_dtype);
  if (!ref_kv_dtype.ok()) return Fail(Status(ref_kv_dtype.status()).WithContext("--reference-kv-dtype"));
  if (Status st = CheckAttentionCache(o.attention, o.kv_dtype); !st.ok()) return Fail(st);
  auto text = ReadTextFile(o.file);
  if (!text.ok()) return Fail(text.status());
  // One pool for both models: they run one after the other.
  ThreadPool pool(ThreadsFor(o.threads, *par));
  LoadOptions model_load = load;
  model_load.pool = &pool;
  auto model = LoadModel(o.model, model_load, *par);
  if (!model.ok()) return Fail(model.status());
  std::unique_ptr<Model> reference;
  if (!o.reference.empty()) {
    auto ref = Model::Load(o.reference, {.progress = !o.json, .pool = &pool, .activations = ActivationsOf(o.reference_activations, /*everywhere=*/true), .weights = o.weights});
    if (!ref.ok()) return Fail(Status(ref.status()).WithContext("--reference"));
    reference = std::move(*ref);
  }
  auto tokenizer = text::Tokenizer::Load(o.model);
  if (!tokenizer.ok())
    return Fail(Status(tokenizer.status()).WithContext("m2 perplexity needs the model's tokenizer.json"));
  // By default the file is plain text: special-token strings in it are scored as the text
  // they are. --special reads them as the special tokens (chat transcripts).
  const std::vector<int32_t> ids = (*tokenizer)->Encode(*text, /*parse_special=*/o.special);

  runtime::PerplexityOptions p;
  const int64_t max_pos = (*model)->config().max_position_embeddings;
  p.context = o.context > 0 ? o.context : std::min<int64_t>(1024, max_pos);
  p.stride = o.stride > 0 ? o.stride : std::max<int64_t>(1, p.context / 2);
  // The work is about ceil(tokens / stride) windows of `context` tokens.
  const uint64_t windows = ids.size() > static_cast<size_t>(p.context)
                               ? (ids.size() - p.context + p.stride - 1) / p.stride + 1
                               : 1;
  Progress progress("perplexity", windows * std::min<uint64_t>(ids.size(), p.context), "tokens", !o.json);
  p.on_progress = [&](int64_t done) { progress.Update(static_cast<uint64_t>(done)); };
  p.reference = reference.get();
  p.kv_dtype = *kv_dtype;
  p.reference_kv_dtype = *ref_kv_dtype;
  auto r = runtime::ComputePerplexity(**model, ids, p);
  if (!r.ok()) return Fail(Status(r.status()).WithContext(o.file));
  progress.Finish();
  if (o.json) {
    nlohmann::ordered_json j = {{"perplexity", r->perplexity},
                                {"special_tokens", o.special},
                                {"mean_nll", r->mean_nll},
                                {"tokens", r->tokens},
                                {"scored_tokens", r->scored_tokens},
                                {"windows", r->windows},
                                {"context", p.context},
                                {"stride", p.stride},
                                {"activations", o.activations},
                                {"attention", AttentionName((*model)->attention_math(), *kv_dtype)},
                                {"kv_dtype", o.kv_dtype},
                                {"evaluated_tokens", r->evaluated_tokens},
                                {"seconds", r->seconds},
                                {"tokens_per_second", r->tokens_per_second()}};
    if (r->has_reference) {
      const auto& c = r->reference;
      j["reference"] = {{"model", o.reference},        {"activations", o.reference_activations},
                        {"attention", AttentionName(reference->attention_math(), *ref_kv_dtype)},
                        {"perplexity", c.perplexity}, {"mean_nll", c.mean_nll},
                        {"mean_kl", c.mean_kl},         {"kl_p99", c.kl_p99},         {"max_kl", c.max_kl},
                        {"top1_agreement", c.top1_agreement}};
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("perplexity %.4f (mean NLL %.6f nats over %lld scored tokens of %lld)\n", r->perplexity, r->mean_nll,
                static_cast<long long>(r->scored_tokens), static_cast<long long>(r->tokens));
    std::printf("%lld windows of up to %lld tokens, stride %lld: %lld tokens evaluated in %.3f s (%.1f tok/s)\n",
                static_cast<long long>(r->windows), static_cast<long long>(p.context),
                static_cast<long long>(p.stride), static_cast<long long>(r->evaluated_tokens), r->seconds,
                r->tokens_per_second());
    if (r->has_reference) {
      const auto& c = r->reference;
      std::printf("reference %s (activations %s, attention %s; this model: %s, %s): perplexity %.4f (%+.3f%% for "
                  "this model)\n",
                  o.reference.c_str(), o.reference_activations.c_str(),
                  AttentionName(reference->attention_math(), *ref_kv_dtype), o.activations.c_str(),
                  AttentionName((*model)->attention_math(), *kv_dtype), c.perplexity,
                  100.0 * (r->perplexity / c.perplexity - 1.0));
      std::printf("KL(reference || model): mean %.6f nats, 99th percentile %.6f, max %.6f; same top token %.2f%%\n",
                  c.mean_kl, c.kl_p99, c.max_kl, 100.0 * c.top1_agreement);
    }
  }
  return 0;
}

}  // namespace

void AddPerplexity(CLI::App& app, Runner& run) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of the model on a text file (sliding windows).");
  cmd->add_option("-m,--model", o->model, "Model folder (config.json + safetensors + tokenizer.json)")->required();
  cmd->add_option("-f,--file", o->file, "Text file to evaluate")->required();
  cmd->add_option("--context", o->context, "Window length in tokens (default: min(1024, the model's context))")
      ->check(CLI::PositiveNumber);
  AddThreadsFlag(cmd, o->threads);
  AddActivationsFlag(cmd, o->activations);
  AddAttentionFlag(cmd, o->attention);
  AddWeightMemoryFlags(cmd, o->weights);
  AddParallelFlag(cmd, o->parallel);
  AddActivationsFlag(cmd, o->reference_activations, "--reference-activations");
  cmd->add_option("--stride", o->stride,
                  "Tokens between window starts; each window scores only tokens no earlier window scored "
                  "(default: context / 2; = context for disjoint windows)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache storage while evaluating: f32 (default, exact), bf16 or q8");
  cmd->add_option("--reference-kv-dtype", o->reference_kv_dtype,
                  "KV cache storage of the --reference run (default f32): the same model as its own reference with "
                  "--kv-dtype bf16 measures the cost of a bf16 cache");
  cmd->add_option("--reference", o->reference,
                  "Also run this model folder (same tokenizer, e.g. the BF16 model a quantized one was made from) "
                  "over the same windows and report its perplexity, the mean KL divergence KL(reference || model) "
                  "per token and how often both pick the same top token. Both models are loaded at once.");
  cmd->add_flag("--special", o->special,
               "Read special-token strings in the file (e.g. ]~b]ai, [e~[, <think>) as the special tokens, "
               "for chat transcripts rendered with the chat template; by default they are plain text");
  cmd->add_flag("--json", o->json, "Print the result as JSON");
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
