// One conversation's generation, for the CLI: prefill a prompt, then decode one token at
// a time, streaming the text as it becomes final. A Generator is a client of the serving
// core (engine.h): it owns an Engine with one KV budget and a KvSession, and each
// Generate() is one request of that session, run on the calling thread. The session
// keeps the cache between turns: the new prompt is compared with the cached ids, the
// cache truncated to their common prefix and only the rest prefilled (in a chat, the
// previous turns; after a tool call, everything but the tool result).
//
// Stopping: an end-of-sequence id (not shown as text), max_new_tokens, a stop string
// (not shown; text that may begin one is held back until decided), the cancel flag
// (checked before every forward pass, so Ctrl-C returns within one step), or the
// model's context length.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace m2::runtime {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  std::vector<int32_t> eos_ids;
  bool ignore_eos = false;
  // Needs a tokenizer.
  std::vector<std::string> stop_strings;
  // Set from another thread or a signal handler to stop (checked before every forward
  // pass, so it acts within one step); not reset by the generator.
  const std::atomic<bool>* cancel = nullptr;
};

// kCacheFull: the sequence could not grow although it had the whole KV pool to itself;
// kError: the request failed (GenerationResult holds what came before the error).
enum class StopReason { kEos, kMaxTokens, kStopString, kCancelled, kContextFull, kCacheFull, kError };
const char* StopReasonName(StopReason r);

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;   // prompt tokens whose cache entries were kept
  int64_t prefill_tokens = 0;  // prompt tokens run through the model
  double prefill_seconds = 0;
  int64_t generated_tokens = 0;
  int64_t decode_steps = 0;    // forward passes after the prefill (one per token fed back)
  double decode_seconds = 0;   // those passes plus sampling and decoding
  double queue_seconds = 0;    // from submission to the first forward pass
  int64_t preemptions = 0;     // times its cache was taken away for others (then recomputed)
  int64_t draft_tokens = 0;    // speculative decoding: tokens proposed by the drafter
  int64_t accepted_tokens = 0; //   and accepted by the model

  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0; }
  // Tokens after the first over the time after the first (a verification step with
  // speculative decoding may give several).
  double decode_tokens_per_second() const {
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0;
  }
  // "prompt 12 tokens (8 reused) in 0.010 s (400.0 tok/s); generated 16 tokens in ..."
  std::string Summary() const;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids, a final eos id included
  std::string text;             // everything streamed, without a stop string
  StopReason stop_reason = StopReason::kMaxTokens;
  std::string stop_string;      // the one that matched, for kStopString
  GenerationStats stats;
};

// Called with each piece of final text as it is produced.
using TextCallback = std::function<void(std::string_view)>;
// Called with each generated id (eos included) as soon as it is sampled.
using TokenCallback = std::function<void(int32_t)>;

class Engine;
class KvSession;
struct EngineOptions;

class Generator {
 public:
  // `tokenizer` may be null: token ids in and out only (then no text and no stop strings).
  // Both must outlive the generator. `options`: the engine's (KV budget and dtype, batch
  // tokens per forward pass, which also bound a prefill chunk); bad options abort, so
  // check them with EngineOptions::Validate first.
  Generator(Model& model, const text::Tokenizer* tokenizer);
  Generator(Model& model, const text::Tokenizer* tokenizer, const EngineOptions& options);
  ~Generator();

  // Generates a continuation of `prompt` (the whole sequence so far, at least one id).
  // Bad input (an empty prompt, ids outside the vocabulary, stop strings without a
  // tokenizer) is an error, and then the cache is left empty.
  Result<GenerationResult> Generate(std::span<const int32_t> prompt, Sampler& sampler,
                                    const GenerateOptions& options, const TextCallback& on_text = nullptr,
                                    const TokenCallback& on_token = nullptr);

  // Ids whose keys and values are in the cache: the last prompt plus all generated ids
  // but the final one (it was sampled, never run).
  const std::vector<int32_t>& cached_ids() const;
  // Forgets the cache.
  void Reset();

  Model& model() { return model_; }
  const text::Tokenizer* tokenizer() const { return tokenizer_; }
  Engine& engine() { return *engine_; }

 private:
  Model& model_;
  const text::Tokenizer* tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<KvSession> session_;  // destroyed before the engine (its cache is in the pool)
};

}  // namespace m2::runtime
