// Flags of the serving core (KV budget and dtype, batching), shared by every command
// that generates through runtime::Engine: generate, chat, serve (and -t, which bench,
// perplexity, logits and quantize have too).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "runtime/engine.h"

namespace m2::cli {

struct EngineFlags {
  int threads = 0;  // -t: threads of the forward pass (0: one per available core)
  std::string activations = "auto";  // --activations auto|exact|int8|bf16|int8+bf16|int8+int8
  std::string attention = "auto";    // --attention auto|exact|bf16
  double kv_memory = 0;
  int64_t kv_tokens = 0;
  std::string kv_dtype = "bf16";
  int64_t max_batch_tokens = 512;
  int64_t max_running = 64;
  int64_t max_queue = 1024;
  bool no_prefix_cache = false;
  double state_cache_memory = 4.0;
  int64_t checkpoint_interval = 1024;
  std::string spec = "off";
  int draft = 4;
  int spec_ngram = 3;
  std::string parallel = "off";  // --parallel (parallel_flags.h)
  WeightMemory weights = WeightMemory::kAuto;  // --mmap / --no-mmap
};

// -t/--threads N into `threads`: every command that runs the model has it (0, the default:
// one thread per available core).
void AddThreadsFlag(CLI::App* cmd, int& threads);

// --activations auto|exact|int8|int16|bf16|int8+bf16|int16+bf16|int8+int8|int16+int16 (or another flag name) into `value`: how
// q8 / q4 weights (int8: kernels/linear_int8.h; int16, q8 and FP8 prefill: linear_int16.h) or bf16 / FP8 weights (bf16:
// kernels/linear_bf16.h) meet
// their activations. Every command that runs the model has it.
void AddActivationsFlag(CLI::App* cmd, std::string& value, const std::string& name = "--activations");
// The mode for --activations: int8 means int8 in decode steps (ActivationMode::kInt8Decode),
// or in every product when `everywhere` (m2 perplexity: its KL then covers every token);
// int16 likewise; bf16, int8+bf16, int16+bf16 and int8+int8 are the same either way (a
// perplexity pass is all prefill).
inline ActivationMode ActivationsOf(const std::string& value, bool everywhere = false) {
  if (value == "bf16") return ActivationMode::kBf16Prefill;
  if (value == "int8+bf16") return ActivationMode::kInt8DecodeBf16Prefill;
  if (value == "int8+int8") return ActivationMode::kInt8DecodeInt8Prefill;
  if (value == "int16+bf16") return ActivationMode::kInt16DecodeBf16Prefill;
  if (value == "int16+int16") return ActivationMode::kInt16DecodeInt16Prefill;
  if (value == "int16") return everywhere ? ActivationMode::kInt16 : ActivationMode::kInt16Decode;
  if (value == "auto") return ActivationMode::kAuto;
  return value != "int8" ? ActivationMode::kExact : everywhere ? ActivationMode::kInt8 : ActivationMode::kInt8Decode;
}

// --attention auto|exact|bf16 into `value`: how attention forms its products
// (AttentionChoice, model.h). Every command that runs the model has it.
void AddAttentionFlag(CLI::App* cmd, std::string& value);
inline AttentionChoice AttentionOf(const std::string& value) {
  return value == "bf16" ? AttentionChoice::kBf16 : value == "exact" ? AttentionChoice::kExact : AttentionChoice::kAuto;
}
// --attention bf16 with --kv-dtype f32 is an error (bf16 products read the cache as bf16).
Status CheckAttentionCache(const std::string& attention, const std::string& kv_dtype);
// How attention computes with this cache: "bf16" for AttentionMath::kBf16 over a bf16
// cache, "exact" otherwise (an fp32 cache takes exact products: kernels/attention.h).
inline const char* AttentionName(AttentionMath math, KvDtype kv) {
  return math == AttentionMath::kBf16 && kv == KvDtype::kBf16 ? "bf16" : "exact";
}

// --mmap / --no-mmap into `value` (neither: kAuto): whether the weight files are mapped or
// read into anonymous memory (io/tensor_store.h). Every command that runs the model has it.
void AddWeightMemoryFlags(CLI::App* cmd, WeightMemory& value);

// `serving`: also the flags that only matter with many requests (running and queue limits).
void AddEngineFlags(CLI::App* cmd, EngineFlags& f, bool serving = false);
// Checks the options against the model too (a budget too small for one block is an error).
Result<runtime::EngineOptions> ResolveEngineFlags(const EngineFlags& f, const ModelConfig& config);

}  // namespace m2::cli
