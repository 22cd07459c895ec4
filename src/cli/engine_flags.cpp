#include "cli/engine_flags.h"

#include "cli/parallel_flags.h"

namespace m2::cli {

void AddThreadsFlag(CLI::App* cmd, int& threads) {
  cmd->add_option("-t,--threads", threads, "Threads of the forward pass (default 0: one per available core)")
      ->check(CLI::Range(0, 1024));
}

void AddActivationsFlag(CLI::App* cmd, std::string& value, const std::string& name) {
  cmd->add_option(name, value,
                  "How weights meet their activations: auto (the default of generate, chat, serve and bench: "
                  "int8+int8 for q4 weights where the CPU runs the int8 kernels, as llama.cpp does for 4-bit "
                  "weights; int16 decode steps for q8 weights there, with bf16 prefill on AMD's AVX-512 BF16, else int16 prefill; bf16 "
                  "prefill for FP8 and bf16 weights where that beats fp32 (AMX, or AVX-512 BF16 on AMD, there with "
                  "bf16 FP8 decode steps too), else int16 prefill for FP8 weights on AVX2 or AVX-512 CPUs (as "
                  "int16+int16 gives them); exact for every other weight); exact (fp32 activations everywhere; the "
                  "default of perplexity and logits); int16 (q8 weights: activations quantized per 32 values to "
                  "int16, integer dot products, for decode steps (m2 perplexity: every token); each value off by at "
                  "most 2^-16 of its group's largest); int8 (q8 / q4 weights: "
                  "activations quantized per 32 values, integer dot products: faster decoding, not exact; it "
                  "applies to decode steps, prompts of more than 8 tokens are prefilled exactly, except by m2 "
                  "perplexity, which uses int8 for every token so that its KL covers them all); bf16 (bf16, FP8, q8 "
                  "and q4 weights on CPUs with AVX-512 BF16: prompts prefilled with activations rounded to bf16 and "
                  "vdpbf16ps, or on the tile unit (AMX) for bf16 and FP8 weights; on AMD FP8 decode steps with bf16 "
                  "activations too (AVX-512 VBMI and GFNI; FP8 subnormal codes, under 2^-6 of their block scale, drop out "
                  "there, M2_FP8_DECODE=table keeps them), other decode steps exact); int8+bf16 (both: int8 decode steps and "
                  "bf16 prefill for q8 / q4 weights, bf16 prefill for the others); int16+bf16 (int16 decode steps for q8 weights, bf16 prefill as bf16 gives it); int16+int16 (q8 weights on AVX2 or AVX-512 CPUs: int16 in decode steps and in prefill, there on an integer GEMM; FP8 weights: prefill on that GEMM, each 32 weights converted to int16 with a power-of-two step as it reads them (exact within 7 binades of the largest), decode steps exact); int8+int8 (q8 and q4 weights on AVX2 or "
                  "AVX-512 CPUs: int8 in decode steps and in prefill, there on an integer GEMM, 1.3-4x the fp32 one "
                  "(least for q8 on AVX2 without VNNI); FP8 weights: prefill on that GEMM, each 32 weights "
                  "requantized to int8 as it reads them, decode steps exact; other weights exact). The README gives what each costs")
      ->check(CLI::IsMember({"auto", "exact", "int8", "int16", "bf16", "int8+bf16", "int16+bf16", "int8+int8", "int16+int16"}));
}

void AddAttentionFlag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--attention", value,
                  "How attention forms its products: auto (the default: bf16 where the CPU has AVX-512 BF16, unless "
                  "--activations is exact); exact (fp32 products, the KV "
                  "cache widened exactly); bf16 (the query and the softmax weights rounded to bf16, K and V as "
                  "cached in bf16, vdpbf16ps: half the instructions per cached position, so long contexts decode "
                  "faster; needs AVX-512 BF16 and the bf16 KV cache). The README gives what it costs")
      ->check(CLI::IsMember({"auto", "exact", "bf16"}));
}

Status CheckAttentionCache(const std::string& attention, const std::string& kv_dtype) {
  if (attention == "bf16" && kv_dtype != "bf16")
    return Error("--attention bf16 reads keys and values as cached in bf16, and --kv-dtype {} caches them otherwise: "
                 "use one or the other (--attention auto computes exactly with an fp32 or q8 cache)",
                 kv_dtype);
  return Status::Ok();
}

void AddWeightMemoryFlags(CLI::App* cmd, WeightMemory& value) {
  auto* map = cmd->add_flag_callback(
      "--mmap", [&value] { value = WeightMemory::kMap; },
      "Use the weight files memory-mapped: shared with other processes through the page cache, instant to load "
      "when cached, and a model larger than memory still runs (slowly). Default: read them into memory where they "
      "fit in what is available with a tenth to spare, else map them");
  auto* read = cmd->add_flag_callback(
      "--no-mmap", [&value] { value = WeightMemory::kRead; },
      "Read the weight files into memory (2 MiB pages) even where they do not fit with room to spare: decoding "
      "reads every weight each step, and from anonymous memory it runs faster and steadier than from mapped files");
  map->excludes(read);
}

void AddEngineFlags(CLI::App* cmd, EngineFlags& f, bool serving) {
  AddThreadsFlag(cmd, f.threads);
  AddActivationsFlag(cmd, f.activations);
  AddAttentionFlag(cmd, f.attention);
  AddWeightMemoryFlags(cmd, f.weights);
  AddParallelFlag(cmd, f.parallel);
  cmd->add_option("--kv-memory", f.kv_memory,
                  "KV cache budget in GiB, taken once at start (default: one full context, at most 4 GiB)");
  cmd->add_option("--kv-tokens", f.kv_tokens, "KV cache budget in tokens (overrides --kv-memory)");
  cmd->add_option("--kv-dtype", f.kv_dtype, "How keys and values are stored: bf16 (default, half the memory), f32 (exact) or q8 (int8 in groups "
                  "of 32 values with an fp32 scale each: 56% of bf16's memory and bytes read per token, not exact; "
                  "the README gives what it costs)");
  cmd->add_option("--max-batch-tokens", f.max_batch_tokens,
                  "Most tokens per forward pass: decoding streams plus chunks of prompts being prefilled (default 512)");
  cmd->add_flag("--no-prefix-cache", f.no_prefix_cache, "Do not keep and share the KV blocks of earlier prompts");
  cmd->add_option("--state-cache-memory", f.state_cache_memory,
                  "Lightning models (MiniMax-Text-01 / M1): GiB kept for their recurrent states at block boundaries, "
                  "which a later prompt with the same start resumes from (default 4; 0: no prefix cache for them)");
  cmd->add_option("--checkpoint-interval", f.checkpoint_interval,
                  "Lightning models: also keep the states every this many prompt tokens, so prompts that share only "
                  "their start (a system prompt) find them (default 1024; a multiple of 16; 0: only at the end of "
                  "each prompt and reply)");
  cmd->add_option("--spec", f.spec,
                  "Speculative decoding: lookup (draft the continuation of the latest earlier occurrence of the last "
                  "n-gram: fast when the output copies its context, as edits and tool results do), mtp (the model's "
                  "multi-token-prediction modules draft; needs a model that has them) or off (default). The output is "
                  "the same either way");
  cmd->add_option("--draft", f.draft, "Speculative decoding: most tokens drafted per verification step (default 4)");
  cmd->add_option("--spec-ngram", f.spec_ngram, "--spec lookup: longest n-gram matched (default 3; down to 1)");
  if (serving) {
    cmd->add_option("--max-running", f.max_running, "Most sequences generating at once (default 64)");
    cmd->add_option("--max-queue", f.max_queue, "Most requests waiting; more are refused (default 1024)");
  }
}

Result<runtime::EngineOptions> ResolveEngineFlags(const EngineFlags& f, const ModelConfig& config) {
  runtime::EngineOptions o;
  M2_RETURN_IF_ERROR(CheckAttentionCache(f.attention, f.kv_dtype));
  M2_ASSIGN_OR_RETURN(o.kv_dtype, runtime::ParseKvDtype(f.kv_dtype));
  o.kv_memory_gib = f.kv_memory;
  o.kv_tokens = f.kv_tokens;
  o.max_batch_tokens = f.max_batch_tokens;
  o.max_running = f.max_running;
  o.max_queue = f.max_queue;
  o.prefix_cache = !f.no_prefix_cache;
  o.state_cache_gib = f.state_cache_memory;
  o.checkpoint_interval = f.checkpoint_interval;
  M2_ASSIGN_OR_RETURN(o.spec.mode, runtime::ParseSpecMode(f.spec));
  o.spec.draft = f.draft;
  o.spec.ngram_max = f.spec_ngram;
  M2_RETURN_IF_ERROR(runtime::KvBudgetBlocks(config, o).status());
  return o;
}

}  // namespace m2::cli
