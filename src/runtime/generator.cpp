#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "runtime/stop_strings.h"

namespace m2::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

bool Cancelled(const GenerateOptions& o) { return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed); }

}  // namespace

const char* StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kEos: return "eos";
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kCancelled: return "cancelled";
    case StopReason::kContextFull: return "context_full";
  }
  return "?";
}

std::string GenerationStats::Summary() const {
  std::string reused = reused_tokens > 0 ? fmt::format(", {} reused from the cache", reused_tokens) : "";
  return fmt::format("prompt {} tokens{}: prefilled {} in {:.3f} s ({:.1f} tok/s); generated {} tokens in {:.3f} s "
                     "({:.1f} tok/s)",
                     prompt_tokens, reused, prefill_tokens, prefill_seconds, prefill_tokens_per_second(),
                     generated_tokens, decode_seconds, decode_tokens_per_second());
}

Generator::Generator(Model& model, const text::Tokenizer* tokenizer) : model_(model), tokenizer_(tokenizer) {
  pool_ = std::make_unique<KvBlockPool>(model_.cache_layout());
  cache_ = std::make_unique<SequenceCache>(pool_.get());
}

void Generator::Reset() {
  cache_ = std::make_unique<SequenceCache>(pool_.get());
  cached_.clear();
}

Status Generator::Feed(std::span<const int32_t> ids, const GenerateOptions& options, std::vector<float>& logits,
                       bool* cancelled) {
  SequenceCache* caches[] = {cache_.get()};
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, options.prefill_chunk));
  for (size_t start = 0; start < ids.size(); start += chunk) {
    if (Cancelled(options)) {
      *cancelled = true;
      return Status::Ok();
    }
    const size_t end = std::min(ids.size(), start + chunk);
    ForwardBatch batch;
    for (size_t i = start; i < end; ++i) batch.Add(ids[i], 0, i + 1 == ids.size());
    logits.clear();
    M2_RETURN_IF_ERROR(model_.Forward(batch, caches, logits));
    cached_.insert(cached_.end(), ids.begin() + start, ids.begin() + end);
  }
  return Status::Ok();
}

Result<GenerationResult> Generator::Generate(std::span<const int32_t> prompt, Sampler& sampler,
                                             const GenerateOptions& options, const TextCallback& on_text,
                                             const TokenCallback& on_token) {
  const ModelConfig& cfg = model_.config();
  const int64_t V = cfg.vocab_size;
  auto fail = [this](Status s) {
    Reset();
    return s;
  };
  if (prompt.empty()) return fail(Error("the prompt is empty: generation needs at least one token"));
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= V)
      return fail(Error("prompt token {} (id {}) is outside the model's vocabulary [0, {})", i, prompt[i], V));
  if (static_cast<int64_t>(prompt.size()) > cfg.max_position_embeddings)
    return fail(Error("the prompt has {} tokens, more than the model's context of {} (max_position_embeddings)",
                      prompt.size(), cfg.max_position_embeddings));
  const bool has_stops =
      std::any_of(options.stop_strings.begin(), options.stop_strings.end(), [](const auto& s) { return !s.empty(); });
  if (has_stops && tokenizer_ == nullptr)
    return fail(Error("stop strings need a tokenizer (tokenizer.json in the model folder)"));
  if (options.max_new_tokens < 1) return fail(Error("max_new_tokens must be >= 1, found {}", options.max_new_tokens));

  GenerationResult result;
  GenerationStats& stats = result.stats;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());

  // Prefix reuse. The last prompt token is always run again, even when cached: its
  // logits are needed and the cache keeps keys and values, not logits.
  size_t common = 0;
  const size_t limit = std::min(cached_.size(), prompt.size() - 1);
  while (common < limit && cached_[common] == prompt[common]) ++common;
  if (Status st = cache_->Truncate(static_cast<int64_t>(common)); !st.ok()) {
    Reset();  // a layer that cannot roll back (recurrent state): start over
    common = 0;
  }
  cached_.resize(common);
  stats.reused_tokens = static_cast<int64_t>(common);
  stats.prefill_tokens = static_cast<int64_t>(prompt.size() - common);

  std::vector<float> logits;
  bool cancelled = false;
  const auto t0 = Clock::now();
  if (Status st = Feed(prompt.subspan(common), options, logits, &cancelled); !st.ok()) return fail(st);
  const auto t1 = Clock::now();
  stats.prefill_seconds = Seconds(t0, t1);
  if (cancelled) {
    result.stop_reason = StopReason::kCancelled;
    return result;
  }

  // The repetition penalty sees the prompt and everything generated.
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  std::unique_ptr<text::StreamDecoder> decoder;
  if (tokenizer_ != nullptr) decoder = std::make_unique<text::StreamDecoder>(*tokenizer_);
  StopStringFilter stops(options.stop_strings);
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    result.text += s;
    if (on_text) on_text(s);
  };
  auto is_eos = [&](int32_t id) {
    return !options.ignore_eos && std::find(options.eos_ids.begin(), options.eos_ids.end(), id) != options.eos_ids.end();
  };

  bool stopped_by_string = false;
  while (true) {
    const int32_t next = sampler.Sample(std::span<const float>(logits.data(), static_cast<size_t>(V)), context);
    result.tokens.push_back(next);
    context.push_back(next);
    if (on_token) on_token(next);
    if (is_eos(next)) {
      result.stop_reason = StopReason::kEos;
      break;
    }
    if (decoder) {
      StopStringFilter::Result r = stops.Push(decoder->Add(next));
      emit(r.text);
      if (r.stopped) {
        result.stop_reason = StopReason::kStopString;
        result.stop_string = r.stop;
        stopped_by_string = true;
        break;
      }
    }
    if (static_cast<int64_t>(result.tokens.size()) >= options.max_new_tokens) {
      result.stop_reason = StopReason::kMaxTokens;
      break;
    }
    if (cache_->length() >= cfg.max_position_embeddings) {
      result.stop_reason = StopReason::kContextFull;
      break;
    }
    const int32_t one[] = {next};
    if (Status st = Feed(one, options, logits, &cancelled); !st.ok()) return fail(st);
    if (cancelled) {
      result.stop_reason = StopReason::kCancelled;
      break;
    }
    ++stats.decode_steps;
  }
  if (decoder && !stopped_by_string) {
    // Bytes of an unfinished character become U+FFFD, as Decode would give them; a stop
    // string may still complete in them.
    StopStringFilter::Result r = stops.Push(decoder->Finish());
    emit(r.text);
    if (r.stopped) {
      result.stop_reason = StopReason::kStopString;
      result.stop_string = r.stop;
    } else {
      emit(stops.Flush());
    }
  }
  stats.generated_tokens = static_cast<int64_t>(result.tokens.size());
  stats.decode_seconds = Seconds(t1, Clock::now());
  return result;
}

}  // namespace m2::runtime
