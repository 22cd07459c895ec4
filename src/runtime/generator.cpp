#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "base/check.h"
#include "runtime/engine.h"

namespace m2::runtime {

const char* StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kEos: return "eos";
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kCancelled: return "cancelled";
    case StopReason::kContextFull: return "context_full";
    case StopReason::kCacheFull: return "kv_cache_full";
    case StopReason::kError: return "error";
  }
  return "?";
}

std::string GenerationStats::Summary() const {
  std::string reused = reused_tokens > 0 ? fmt::format(", {} reused from the cache", reused_tokens) : "";
  return fmt::format("prompt {} tokens{}: prefilled {} in {:.3f} s ({:.1f} tok/s); generated {} tokens in {:.3f} s "
                     "({:.1f} tok/s)",
                     prompt_tokens, reused, prefill_tokens, prefill_seconds, prefill_tokens_per_second(),
                     generated_tokens, decode_seconds, decode_tokens_per_second()) +
         (draft_tokens > 0 ? fmt::format("; speculative: {} of {} drafted tokens accepted ({:.1f} tokens per step)",
                                         accepted_tokens, draft_tokens,
                                         decode_steps > 0 ? static_cast<double>(generated_tokens - 1) / decode_steps : 0.0)
                           : "");
}

Generator::Generator(Model& model, const text::Tokenizer* tokenizer)
    : Generator(model, tokenizer, EngineOptions{}) {}

Generator::Generator(Model& model, const text::Tokenizer* tokenizer, const EngineOptions& options)
    : model_(model), tokenizer_(tokenizer) {
  auto e = Engine::Create(model_, tokenizer_, options);
  M2_CHECK(e.ok(), "engine options: {}", e.status().message());
  engine_ = std::move(*e);
  session_ = std::make_unique<KvSession>();
}

Generator::~Generator() { session_.reset(); }

const std::vector<int32_t>& Generator::cached_ids() const { return session_->ids(); }

void Generator::Reset() { session_->Clear(); }

Result<GenerationResult> Generator::Generate(std::span<const int32_t> prompt, Sampler& sampler,
                                             const GenerateOptions& options, const TextCallback& on_text,
                                             const TokenCallback& on_token) {
  Request r;
  r.prompt.assign(prompt.begin(), prompt.end());
  r.sampler = &sampler;
  r.options = options;
  r.session = session_.get();
  r.on_text = tokenizer_ != nullptr ? on_text : nullptr;
  r.on_token = on_token;
  auto out = engine_->Generate(std::move(r));
  if (!out.ok()) Reset();
  return out;
}

}  // namespace m2::runtime
