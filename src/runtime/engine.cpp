#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "runtime/stop_strings.h"

namespace m2::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// `idx`: scratch, kept by the caller between tokens (no V-sized allocation per token).
TokenLogprobs ComputeLogprobs(const float* logits, int64_t V, int32_t token, int top, std::vector<int32_t>& idx) {
  double m = -INFINITY;
  for (int64_t i = 0; i < V; ++i) m = std::max<double>(m, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
  const double lse = m + std::log(sum);
  TokenLogprobs out;
  out.token = token;
  out.logprob = static_cast<float>(logits[token] - lse);
  if (top > 0) {
    idx.resize(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    const auto k = static_cast<size_t>(std::min<int64_t>(top, V));
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (size_t i = 0; i < k; ++i) out.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  }
  return out;
}

}  // namespace

struct Engine::Seq {
  uint64_t id = 0;
  Request req;
  std::unique_ptr<Sampler> own_sampler;
  Sampler* sampler = nullptr;
  std::vector<int32_t> ids;  // prompt, then generated ids (the last one not yet run)
  std::vector<int32_t> draft;  // speculative tokens to verify after ids.back() this step
  int draft_len = -1;          // current draft length (adapts; -1: not started)
  // MTP speculation: trunk hidden rows h^0 for positions [hidden_from, hidden_from +
  // rows), the draft made after the last step, and the tokens the module caches read
  // beyond ids[0, mtp_read_from) (the drafts): entries that read a draft the output did
  // not take are rolled back (Model::TruncateMtp).
  bool mtp = false;
  std::vector<float> hidden;
  int64_t hidden_from = 0;
  std::vector<int32_t> mtp_draft;
  int64_t mtp_read_from = 0;
  std::vector<int32_t> mtp_read;
  std::vector<float> mtp_h;  // module k's hidden output rows, input of module k + 1
  size_t prompt_len = 0;
  std::unique_ptr<SequenceCache> cache;  // null while waiting
  int64_t registered = 0;                // leading full blocks registered in the prefix cache
  uint64_t parent_hash = 0;              // hash of the last of them
  // Lightning models: the states at the last block boundary reached while generating,
  // and that block's hash (kept in the pool when the sequence ends).
  std::vector<float> pending_states;
  uint64_t pending_hash = 0;
  // Lightning models: where the prompt parts from cached blocks deeper than the deepest
  // checkpoint (a prefix other prompts had too, e.g. a system prompt): checkpointed as well.
  int64_t branch_at = 0;
  std::unique_ptr<text::StreamDecoder> decoder;
  std::unique_ptr<StopStringFilter> stops;
  GenerationResult result;
  bool admitted_once = false, got_first = false, done = false;
  Clock::time_point submitted, admitted, first_token;

  int64_t remaining() const { return static_cast<int64_t>(ids.size()) - cache->length(); }
};

Status EngineOptions::Validate() const {
  if (kv_tokens < 0) return Error("--kv-tokens must be >= 0 (0: use --kv-memory or the default), found {}", kv_tokens);
  if (!(kv_memory_gib >= 0) || !std::isfinite(kv_memory_gib))
    return Error("--kv-memory must be a number of GiB >= 0, found {}", kv_memory_gib);
  if (block_tokens < 1 || block_tokens > 1024)
    return Error("KV block size must be in [1, 1024] tokens, found {}", block_tokens);
  if (max_batch_tokens < 1) return Error("--max-batch-tokens must be >= 1, found {}", max_batch_tokens);
  if (max_running < 1) return Error("--max-running must be >= 1, found {}", max_running);
  if (max_queue < 0) return Error("--max-queue must be >= 0, found {}", max_queue);
  if (!(state_cache_gib >= 0) || !std::isfinite(state_cache_gib))
    return Error("--state-cache-memory must be a number of GiB >= 0, found {}", state_cache_gib);
  if (checkpoint_interval < 0 || checkpoint_interval % block_tokens != 0)
    return Error("--checkpoint-interval must be a multiple of the KV block size ({} tokens) and >= 0, found {}",
                 block_tokens, checkpoint_interval);
  M2_RETURN_IF_ERROR(spec.Validate());
  return Status::Ok();
}

int64_t KvBytesPerToken(const ModelConfig& cfg, KvDtype dtype) {
  // Softmax layers only: a Lightning layer keeps a fixed state per sequence instead.
  const int64_t softmax_layers = cfg.num_hidden_layers - cfg.num_lightning_layers();
  return softmax_layers * cfg.num_key_value_heads * 2 * KvRowBytes(dtype, cfg.head_dim);
}

Result<int64_t> KvBudgetBlocks(const ModelConfig& cfg, const EngineOptions& o) {
  M2_RETURN_IF_ERROR(o.Validate());
  M2_RETURN_IF_ERROR(CheckKvDtype(cfg, o.kv_dtype));
  const int64_t bt = o.block_tokens;
  // With --spec mtp every block also holds the MTP modules' layers.
  const int64_t layers_bytes = KvBytesPerToken(cfg, o.kv_dtype) +
                               (o.spec.mode == SpecMode::kMtp && cfg.num_hidden_layers > 0
                                    ? KvBytesPerToken(cfg, o.kv_dtype) / cfg.num_hidden_layers * cfg.num_mtp_modules
                                    : 0);
  // (A model of Lightning layers only has no keys and values: count a byte per block so
  // the arithmetic below stays finite; its pool is never used.)
  const double block_bytes = std::max(1.0, static_cast<double>(layers_bytes * bt));
  if (o.kv_tokens > 0) return (o.kv_tokens + bt - 1) / bt;
  if (o.kv_memory_gib > 0) {
    const auto blocks = static_cast<int64_t>(o.kv_memory_gib * kGiB / block_bytes);
    if (blocks < 1)
      return Error("--kv-memory {} GiB holds no KV block: one block of {} tokens takes {} bytes for this model", o.kv_memory_gib,
                   bt, static_cast<int64_t>(block_bytes));
    return blocks;
  }
  const int64_t context_blocks = (cfg.max_position_embeddings + bt - 1) / bt;
  const auto mem_blocks = static_cast<int64_t>(4 * kGiB / block_bytes);
  return std::max<int64_t>(1, std::min(context_blocks, mem_blocks));
}

Status CheckKvDtype(const ModelConfig& cfg, KvDtype dtype) {
  if (dtype == KvDtype::kQ8 && cfg.head_dim % kKvQ8Group != 0)
    return Error("--kv-dtype q8 stores each head's keys and values in groups of {}: this model's head_dim is {}, "
                 "not a multiple of it (use bf16 or f32)",
                 kKvQ8Group, cfg.head_dim);
  return Status::Ok();
}

Result<KvDtype> ParseKvDtype(const std::string& s) {
  if (s == "bf16") return KvDtype::kBf16;
  if (s == "f32" || s == "fp32") return KvDtype::kF32;
  if (s == "q8" || s == "q8_0") return KvDtype::kQ8;
  return Error("unknown KV cache dtype '{}': expected bf16, f32 or q8", s);
}

Result<std::unique_ptr<Engine>> Engine::Create(Model& model, const text::Tokenizer* tokenizer, EngineOptions options) {
  M2_ASSIGN_OR_RETURN(int64_t blocks, KvBudgetBlocks(model.config(), options));
  auto e = std::unique_ptr<Engine>(new Engine(model, tokenizer, options, blocks));
  KvBlockPool& pool = *e->pool_;
  if (pool.has_recurrent() && options.state_cache_gib > 0) {
    const double bytes = options.state_cache_gib * static_cast<double>(1LL << 30);
    const auto n = static_cast<int64_t>(bytes / static_cast<double>(pool.checkpoint_bytes()));
    if (n < 1)
      return Error("--state-cache-memory {} GiB cannot hold one checkpoint of this model's Lightning states ({:.1f} MiB); "
                   "give at least {:.3f} GiB, or 0 to turn the prefix cache off for it",
                   options.state_cache_gib, static_cast<double>(pool.checkpoint_bytes()) / (1 << 20),
                   static_cast<double>(pool.checkpoint_bytes()) / (1 << 30));
    pool.set_max_checkpoints(n);
    e->stats_.state_checkpoints_max = n;
    e->shared_stats_ = e->stats_;
  }
  return e;
}

Engine::Engine(Model& model, const text::Tokenizer* tokenizer, EngineOptions options, int64_t blocks)
    : model_(model), tokenizer_(tokenizer), options_(options) {
  // The trunk's layers only: MTP modules keep caches of their own (speculative decoding).
  // With --spec mtp the pool also holds one KV layer per MTP module (their own caches).
  pool_has_mtp_ = options_.spec.mode == SpecMode::kMtp && model_.num_mtp_modules() > 0;
  pool_ = std::make_unique<KvBlockPool>(
      model_.cache_layout(options_.block_tokens, pool_has_mtp_, options_.kv_dtype), blocks);
  stats_.kv_blocks_total = blocks;
  stats_.block_tokens = options_.block_tokens;
  shared_stats_ = stats_;
}

Engine::~Engine() {
  Stop();
  std::deque<std::unique_ptr<Seq>> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rest.swap(incoming_);
  }
  for (auto& s : running_) Finish(*s, StopReason::kCancelled);
  for (auto& s : waiting_) Finish(*s, StopReason::kCancelled);
  for (auto& s : rest) Finish(*s, StopReason::kCancelled);
}

Status Engine::ValidateRequest(const Request& r) const {
  const ModelConfig& cfg = model_.config();
  if (r.prompt.empty()) return Error("the prompt is empty: generation needs at least one token");
  const SpecOptions& spec = r.spec ? *r.spec : options_.spec;
  M2_RETURN_IF_ERROR(spec.Validate());
  if (spec.mode == SpecMode::kMtp && model_.num_mtp_modules() == 0)
    return Error("--spec mtp needs a model with multi-token-prediction modules, and this one has none (the released "
                 "MiniMax-M2 checkpoints ship without their weights): use --spec lookup");
  if (spec.mode == SpecMode::kMtp && !pool_has_mtp_)
    return Error("a request asked for MTP speculation, but the engine was started without it: start it with --spec mtp "
                 "(its KV pool then holds the modules' caches)");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= cfg.vocab_size)
      return Error("prompt token {} (id {}) is outside the model's vocabulary [0, {})", i, r.prompt[i], cfg.vocab_size);
  if (static_cast<int64_t>(r.prompt.size()) > cfg.max_position_embeddings)
    return Error("the prompt has {} tokens, more than the model's context of {} (max_position_embeddings)",
                 r.prompt.size(), cfg.max_position_embeddings);
  const int64_t bt = options_.block_tokens;
  const int64_t need = (static_cast<int64_t>(r.prompt.size()) + bt - 1) / bt;
  if (need > pool_->max_blocks())
    return Error("the prompt has {} tokens, more than the whole KV cache holds ({} tokens in {} blocks): raise "
                 "--kv-memory or --kv-tokens",
                 r.prompt.size(), pool_->max_blocks() * bt, pool_->max_blocks());
  const bool has_stops =
      std::any_of(r.options.stop_strings.begin(), r.options.stop_strings.end(), [](const auto& s) { return !s.empty(); });
  if (has_stops && tokenizer_ == nullptr)
    return Error("stop strings need a tokenizer (tokenizer.json in the model folder)");
  if (r.on_text && tokenizer_ == nullptr) return Error("text output needs a tokenizer (tokenizer.json in the model folder)");
  if (r.options.max_new_tokens < 1) return Error("max_new_tokens must be >= 1, found {}", r.options.max_new_tokens);
  if (r.sampler == nullptr) M2_RETURN_IF_ERROR(r.sampling.Validate());
  return Status::Ok();
}

Result<uint64_t> Engine::Submit(Request request) {
  if (Status st = ValidateRequest(request); !st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++shared_stats_.requests_refused;
    return st;
  }
  auto s = std::make_unique<Seq>();
  s->submitted = Clock::now();
  s->ids = request.prompt;
  s->prompt_len = request.prompt.size();
  s->req = std::move(request);
  s->mtp = SpecOf(*s).mode == SpecMode::kMtp;
  if (s->req.sampler != nullptr) {
    s->sampler = s->req.sampler;
  } else {
    s->own_sampler = std::make_unique<Sampler>(s->req.sampling);
    s->sampler = s->own_sampler.get();
  }
  if (tokenizer_ != nullptr) s->decoder = std::make_unique<text::StreamDecoder>(*tokenizer_);
  s->stops = std::make_unique<StopStringFilter>(s->req.options.stop_strings);
  s->result.stats.prompt_tokens = static_cast<int64_t>(s->prompt_len);
  std::lock_guard<std::mutex> lock(mu_);
  if (s->req.session != nullptr) {
    if (s->req.session->busy_) return Error("this conversation already has a request running");
    s->req.session->busy_ = true;
  }
  if (queued_ >= options_.max_queue) {
    if (s->req.session != nullptr) s->req.session->busy_ = false;
    ++shared_stats_.requests_refused;
    return Error("the server is busy: {} requests are already waiting (--max-queue {}); try again later", queued_,
                 options_.max_queue);
  }
  s->id = next_id_++;
  const uint64_t id = s->id;
  incoming_.push_back(std::move(s));
  ++queued_;
  cv_.notify_all();
  return id;
}

void Engine::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_.insert(id);
  cv_.notify_all();
}

void Engine::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_all_ = true;
  cv_.notify_all();
}

void Engine::Admit(Seq& s) {
  const int64_t bt = options_.block_tokens;
  const auto n = static_cast<int64_t>(s.ids.size());
  int64_t reused = 0;
  KvSession* session = s.req.session;
  if (s.mtp && session != nullptr) {
    // The MTP modules need the trunk's hidden states of every position they have not
    // seen, which a kept cache does not have: start over (prefix reuse is off too).
    session->cache_.reset();
    session->ids_.clear();
  }
  if (session != nullptr && session->cache_ != nullptr) {
    // Token-exact reuse of the conversation's cache. The last id is always run again:
    // its logits are needed and the cache keeps keys and values, not logits.
    int64_t common = 0;
    const int64_t limit = std::min<int64_t>(static_cast<int64_t>(session->ids_.size()), n - 1);
    while (common < limit && session->ids_[static_cast<size_t>(common)] == s.ids[static_cast<size_t>(common)]) ++common;
    s.cache = std::move(session->cache_);
    session->ids_.clear();
    if (s.cache->Truncate(common).ok()) {
      reused = common;
    } else {
      // A Lightning layer's state cannot roll back to where the conversations part: let
      // go of the cache (its full blocks stay in the prefix cache) and take the prefix
      // cache's deepest checkpoint instead, below.
      s.cache.reset();
    }
  }
  if (s.cache == nullptr) {
    s.cache = std::make_unique<SequenceCache>(pool_.get());
    if (options_.prefix_cache && pool_->prefix_cache_supported() && !s.mtp) {
      std::vector<int32_t> blocks;
      std::vector<uint64_t> hashes;
      uint64_t h = 0;
      for (int64_t b = 0; (b + 1) * bt <= n; ++b) {
        std::span<const int32_t> toks(s.ids.data() + b * bt, static_cast<size_t>(bt));
        const uint64_t next = PrefixHash(h, toks);
        const int32_t block = pool_->LookupPrefix(next, toks);
        if (block < 0) break;
        blocks.push_back(block);
        hashes.push_back(next);
        h = next;
      }
      const std::vector<float>* states = nullptr;
      if (pool_->has_recurrent()) {
        // Only as deep as a checkpoint of the Lightning states, leaving an id to run.
        size_t use = blocks.size();
        while (use > 0 && (static_cast<int64_t>(use) * bt > n - 1 || !pool_->HasCheckpoint(hashes[use - 1]))) --use;
        if (use < blocks.size()) s.branch_at = static_cast<int64_t>(blocks.size()) * bt;
        for (size_t j = use; j < blocks.size(); ++j) pool_->Release(blocks[j]);
        blocks.resize(use);
        hashes.resize(use);
        if (use > 0) states = pool_->FindCheckpoint(hashes[use - 1]);
      }
      if (!blocks.empty()) {
        reused = std::min<int64_t>(static_cast<int64_t>(blocks.size()) * bt, n - 1);
        s.cache->AdoptPrefix(blocks, reused, model_.config().num_hidden_layers);
        if (states != nullptr) s.cache->LoadStates(*states);
        s.registered = static_cast<int64_t>(blocks.size());
        s.parent_hash = hashes.back();
      }
    }
  }
  if (!s.admitted_once) {
    s.admitted_once = true;
    s.admitted = Clock::now();
    s.result.stats.reused_tokens = reused;
    s.result.stats.prefill_tokens = static_cast<int64_t>(s.prompt_len) - reused;
    s.result.stats.queue_seconds = Seconds(s.submitted, s.admitted);
    stats_.prompt_tokens += static_cast<int64_t>(s.prompt_len);
    stats_.cached_prompt_tokens += reused;
  }
}

void Engine::Preempt(Seq& s) {
  PublishPendingCheckpoint(s);
  s.cache.reset();
  s.branch_at = 0;
  s.draft.clear();
  s.hidden.clear();
  s.hidden_from = 0;
  s.mtp_draft.clear();
  s.mtp_read.clear();
  s.registered = 0;
  s.parent_hash = 0;
  ++s.result.stats.preemptions;
  ++stats_.preemptions;
}

void Engine::RegisterFullBlocks(Seq& s) {
  // MTP sequences keep their blocks to themselves: the module layers of a block are
  // written after the trunk's (a registered block is immutable and would be copied).
  if (!options_.prefix_cache || !pool_->prefix_cache_supported() || s.mtp) return;
  const int64_t bt = options_.block_tokens;
  const int64_t full = s.cache->length() / bt;
  const auto& table = s.cache->block_table();
  for (; s.registered < full; ++s.registered) {
    std::span<const int32_t> toks(s.ids.data() + s.registered * bt, static_cast<size_t>(bt));
    s.parent_hash = pool_->Register(table[static_cast<size_t>(s.registered)], s.parent_hash, toks);
  }
}

void Engine::CheckpointStates(Seq& s) {
  if (s.cache == nullptr || !s.cache->has_recurrent() || !checkpoints_on() || s.mtp) return;
  const int64_t bt = options_.block_tokens, len = s.cache->length();
  // The states belong to the chain of registered blocks ending at len.
  if (len == 0 || len % bt != 0 || s.registered * bt != len) return;
  const auto prompt = static_cast<int64_t>(s.prompt_len);
  if (len > prompt) {  // generating: the latest boundary, kept when the sequence ends
    s.pending_hash = s.parent_hash;
    s.cache->CopyStatesTo(&s.pending_states);
    return;
  }
  const int64_t every = options_.checkpoint_interval;
  if ((every > 0 && len % every == 0) || len == prompt / bt * bt || len == s.branch_at) {
    if (pool_->FindCheckpoint(s.parent_hash) != nullptr) return;  // (kept already: now the most recent)
    std::vector<float> states;
    s.cache->CopyStatesTo(&states);
    pool_->PutCheckpoint(s.parent_hash, std::move(states));
  }
}

void Engine::PublishPendingCheckpoint(Seq& s) {
  if (s.pending_states.empty()) return;
  pool_->PutCheckpoint(s.pending_hash, std::move(s.pending_states));
  s.pending_states.clear();
  s.pending_hash = 0;
}

int64_t Engine::CutAtCheckpoint(const Seq& s, int64_t n) const {
  if (!s.cache->has_recurrent() || !checkpoints_on() || s.mtp) return n;
  const int64_t bt = options_.block_tokens, from = s.cache->length(), every = options_.checkpoint_interval;
  const int64_t last_full = static_cast<int64_t>(s.prompt_len) / bt * bt;
  int64_t cut = from + n;
  if (every > 0 && (from / every + 1) * every <= last_full) cut = std::min(cut, (from / every + 1) * every);
  if (last_full > from) cut = std::min(cut, last_full);
  if (s.branch_at > from) cut = std::min(cut, s.branch_at);
  return cut - from;
}

void Engine::Finish(Seq& s, StopReason reason, Status error) {
  if (s.done) return;
  s.done = true;
  if (error.ok()) PublishPendingCheckpoint(s);
  GenerationResult& r = s.result;
  auto emit = [&](const std::string& t) {
    if (t.empty()) return;
    r.text += t;
    if (s.req.on_text) s.req.on_text(t);
  };
  if (s.decoder && reason != StopReason::kStopString && !s.stops->stopped()) {
    // Bytes of an unfinished character become U+FFFD, as Decode would give them; a stop
    // string may still complete in them.
    StopStringFilter::Result sr = s.stops->Push(s.decoder->Finish());
    emit(sr.text);
    if (sr.stopped) {
      reason = StopReason::kStopString;
      r.stop_string = sr.stop;
    } else {
      emit(s.stops->Flush());
    }
  }
  r.stop_reason = error.ok() ? reason : StopReason::kError;
  r.stats.generated_tokens = static_cast<int64_t>(r.tokens.size());
  const auto now = Clock::now();
  if (s.got_first) r.stats.decode_seconds = Seconds(s.first_token, now);
  else if (s.admitted_once) r.stats.prefill_seconds = Seconds(s.admitted, now);
  if (KvSession* session = s.req.session) {
    // Verified drafts may leave entries for ids a stop condition cut off: drop them.
    if (error.ok() && s.cache != nullptr && s.cache->length() > static_cast<int64_t>(s.ids.size()) &&
        !s.cache->Truncate(static_cast<int64_t>(s.ids.size())).ok())
      s.cache.reset();
    if (error.ok() && s.cache != nullptr) {
      session->ids_.assign(s.ids.begin(), s.ids.begin() + s.cache->length());
      session->cache_ = std::move(s.cache);
    } else {
      session->cache_.reset();
      session->ids_.clear();
    }
    session->busy_ = false;
  }
  s.cache.reset();
  ++stats_.requests_finished;
  stats_.generated_tokens += r.stats.generated_tokens;
  if (s.req.on_done) s.req.on_done(error, r);
}

void Engine::EmitToken(Seq& s, int32_t next) {
  GenerationResult& r = s.result;
  s.ids.push_back(next);
  r.tokens.push_back(next);
  if (s.req.on_token) s.req.on_token(next);
  const GenerateOptions& o = s.req.options;
  if (!o.ignore_eos && std::find(o.eos_ids.begin(), o.eos_ids.end(), next) != o.eos_ids.end())
    return Finish(s, StopReason::kEos);
  if (s.decoder) {
    StopStringFilter::Result sr = s.stops->Push(s.decoder->Add(next));
    if (!sr.text.empty()) {
      r.text += sr.text;
      if (s.req.on_text) s.req.on_text(sr.text);
    }
    if (sr.stopped) {
      r.stop_string = sr.stop;
      return Finish(s, StopReason::kStopString);
    }
  }
  if (static_cast<int64_t>(r.tokens.size()) >= o.max_new_tokens) return Finish(s, StopReason::kMaxTokens);
  if (s.cache->length() >= model_.config().max_position_embeddings) return Finish(s, StopReason::kContextFull);
}

Status Engine::CheckFinite(const Seq& s, const float* row, int64_t pos) const {
  const int64_t V = model_.config().vocab_size;
  for (int64_t i = 0; i < V; ++i)
    if (!std::isfinite(row[i]))
      return Error("the model produced a non-finite logit ({} for token id {}) at position {} of request {}: the "
                   "weights or the input overflow; the request was ended",
                   row[i], i, pos, s.id);
  return Status::Ok();
}

int32_t Engine::SampleRow(Seq& s, float* row, TokenLogprobs* lp) {
  const int64_t V = model_.config().vocab_size;
  std::vector<float>& raw = raw_scratch_;  // logprobs are of the model's own row
  raw.clear();
  if (lp != nullptr && s.req.logits_processor) raw.assign(row, row + V);
  if (s.req.logits_processor)
    s.req.logits_processor(std::span<float>(row, static_cast<size_t>(V)),
                           std::span<const int32_t>(s.ids.data() + s.prompt_len, s.ids.size() - s.prompt_len));
  const int32_t next = s.sampler->Sample(std::span<const float>(row, static_cast<size_t>(V)), s.ids);
  if (lp != nullptr) *lp = ComputeLogprobs(raw.empty() ? row : raw.data(), V, next, s.req.top_logprobs, lp_scratch_);
  return next;
}

void Engine::AfterForward(Seq& s, float* logits) {
  RegisterFullBlocks(s);
  CheckpointStates(s);
  if (logits == nullptr) return;
  if (Status st = CheckFinite(s, logits, s.cache->length() - 1); !st.ok()) return Finish(s, StopReason::kError, st);
  const auto now = Clock::now();
  if (!s.got_first) {
    s.got_first = true;
    s.first_token = now;
    s.result.stats.prefill_seconds = Seconds(s.admitted, now);
  } else {
    ++s.result.stats.decode_steps;
  }
  const bool want_lp = s.req.top_logprobs >= 0 && s.req.on_logprobs;
  TokenLogprobs lp;
  const int32_t next = SampleRow(s, logits, want_lp ? &lp : nullptr);
  if (want_lp) s.req.on_logprobs(lp);
  EmitToken(s, next);
}

const SpecOptions& Engine::SpecOf(const Seq& s) const { return s.req.spec ? *s.req.spec : options_.spec; }

void Engine::Draft(Seq& s) {
  s.draft.clear();
  const SpecOptions& sp = SpecOf(s);
  if (sp.mode == SpecMode::kOff || s.cache == nullptr || s.remaining() != 1) return;
  // No more drafts than can be kept: the model's own token follows them, within
  // max_new_tokens and the context.
  const int64_t left = s.req.options.max_new_tokens - static_cast<int64_t>(s.result.tokens.size()) - 1;
  const int64_t room = model_.config().max_position_embeddings - s.cache->length() - 1;
  // The draft length adapts to the acceptance (AfterVerify): a draft taken whole earns
  // one more token, one rejected at its first token halves it. Rejected drafts cost
  // compute (every drafted token is run), so a sequence that keeps diverging from its
  // context (sampling at a high temperature) drafts little.
  if (s.draft_len < 0) s.draft_len = sp.draft;
  const auto most = static_cast<int>(std::clamp<int64_t>(std::min(left, room), 0, std::min(s.draft_len, sp.draft)));
  if (most == 0) return;
  if (sp.mode == SpecMode::kLookup) LookupDraft(s.ids, most, sp.ngram_max, sp.ngram_min, s.draft);
  if (sp.mode == SpecMode::kMtp)  // made after the last step (DraftMtp)
    s.draft.assign(s.mtp_draft.begin(), s.mtp_draft.begin() + std::min<int64_t>(most, s.mtp_draft.size()));
}

namespace {
int32_t Argmax(const float* row, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}
}  // namespace

void Engine::DraftMtp() {
  const int64_t H = model_.config().hidden_size, V = model_.config().vocab_size;
  const int64_t modules = model_.num_mtp_modules();
  // Per sequence: roll the module caches back to the tokens still true, then the rows
  // every module runs: positions s0..N-1 (s0 = how far the last module's cache is
  // filled; N = the trunk's length; t_N = ids.back() is chosen, not yet run).
  std::vector<int64_t>& K = mtp_k_;
  std::vector<int64_t>& s0 = mtp_s0_;
  K.assign(mtp_seqs_.size(), 0);
  s0.assign(mtp_seqs_.size(), 0);
  int64_t kmax = 0;
  for (size_t q = 0; q < mtp_seqs_.size(); ++q) {
    Seq& s = *mtp_seqs_[q];
    int64_t kept = s.mtp_read_from;
    while (kept - s.mtp_read_from < static_cast<int64_t>(s.mtp_read.size()) && kept < static_cast<int64_t>(s.ids.size()) &&
           s.mtp_read[static_cast<size_t>(kept - s.mtp_read_from)] == s.ids[static_cast<size_t>(kept)])
      ++kept;
    if (s.mtp_read.empty()) kept = static_cast<int64_t>(s.ids.size());  // nothing drafted was read
    model_.TruncateMtp(*s.cache, kept);
    const int64_t N = s.cache->length();
    // Hidden rows past the trunk's length belong to rejected drafts.
    s.hidden.resize(static_cast<size_t>(std::max<int64_t>(0, N - s.hidden_from) * H));
    s.mtp_draft.clear();
    s.mtp_read.clear();
    // Every module runs every round (a module left behind would need hidden rows long
    // gone); the adaptive draft length only limits how many drafts are verified.
    K[q] = std::min<int64_t>(SpecOf(s).draft, modules);
    s0[q] = s.cache->filled(model_.mtp_cache_layer(K[q] - 1));
    if (s0[q] < s.hidden_from || N == 0) K[q] = 0;  // (cannot happen: rows are kept from N + 1 - modules)
    kmax = std::max(kmax, K[q]);
  }
  std::vector<SequenceCache*>& caches = mtp_caches_;
  caches.clear();
  for (Seq* s : mtp_seqs_) caches.push_back(s->cache.get());
  std::vector<float>& hidden_in = mtp_in_;
  std::vector<float>& logits = mtp_logits_;
  std::vector<float>& hidden_out = mtp_out_;
  MtpBatch& b = mtp_batch_;
  for (int64_t k = 0; k < kmax; ++k) {
    b.tokens.clear(), b.seq.clear(), b.pos.clear(), b.want_logits.clear();
    hidden_in.clear();
    for (size_t q = 0; q < mtp_seqs_.size(); ++q) {
      if (K[q] <= k) continue;
      Seq& s = *mtp_seqs_[q];
      const int64_t N = s.cache->length();
      for (int64_t i = s0[q]; i < N; ++i) {
        const int64_t t = i + k + 1;  // module k at i reads t_{i+k+1}: past ids.back(), a draft of this round
        const int32_t tok = t < static_cast<int64_t>(s.ids.size()) ? s.ids[static_cast<size_t>(t)]
                                                                   : s.mtp_draft[static_cast<size_t>(t - s.ids.size())];
        b.Add(tok, static_cast<int32_t>(q), i, i + 1 == N);
      }
      const float* src = k == 0 ? s.hidden.data() + (s0[q] - s.hidden_from) * H : s.mtp_h.data();
      hidden_in.insert(hidden_in.end(), src, src + (N - s0[q]) * H);
    }
    logits.clear();
    hidden_out.clear();
    if (Status st = model_.ForwardMtp(k, b, hidden_in, caches, logits, hidden_out); !st.ok()) {
      for (size_t q = 0; q < mtp_seqs_.size(); ++q)
        if (K[q] > k) Finish(*mtp_seqs_[q], StopReason::kError, Error("the MTP draft pass failed: {}", st.message()));
      return;
    }
    size_t row = 0, hrow = 0;
    for (size_t q = 0; q < mtp_seqs_.size(); ++q) {
      if (K[q] <= k) continue;
      Seq& s = *mtp_seqs_[q];
      const int64_t rows = s.cache->length() - s0[q];
      s.mtp_h.assign(hidden_out.begin() + static_cast<std::ptrdiff_t>(hrow * H),
                     hidden_out.begin() + static_cast<std::ptrdiff_t>((hrow + rows) * H));
      hrow += static_cast<size_t>(rows);
      s.mtp_draft.push_back(Argmax(logits.data() + row * V, V));  // greedy drafts: one fixed token each
      ++row;
    }
  }
  for (size_t q = 0; q < mtp_seqs_.size(); ++q) {
    Seq& s = *mtp_seqs_[q];
    s.mtp_read_from = static_cast<int64_t>(s.ids.size());
    s.mtp_read = s.mtp_draft;
    // Keep the hidden rows a later round may start from (the last module's cache can
    // fall back at most `modules` positions behind the trunk).
    const int64_t keep_from = std::max<int64_t>(s.hidden_from, s.cache->length() - modules);
    s.hidden.erase(s.hidden.begin(), s.hidden.begin() + static_cast<std::ptrdiff_t>((keep_from - s.hidden_from) * H));
    s.hidden_from = keep_from;
  }
}

void Engine::AfterVerify(Seq& s, float* logits) {
  const int64_t V = model_.config().vocab_size;
  const auto k = static_cast<int64_t>(s.draft.size());
  const size_t old = s.ids.size();
  const int64_t first_pos = s.cache->length() - (k + 1);
  ++s.result.stats.decode_steps;
  const bool want_lp = s.req.top_logprobs >= 0 && s.req.on_logprobs;
  spec_out_.clear();
  spec_lp_.clear();
  Status error;
  // Position j's row is drawn from exactly as plain decoding would draw it there (the
  // accepted drafts are in s.ids for penalties and processors); see speculative.h.
  for (int64_t j = 0; j <= k; ++j) {
    float* row = logits + j * V;
    if (error = CheckFinite(s, row, first_pos + j); !error.ok()) break;
    TokenLogprobs lp;
    const int32_t x = SampleRow(s, row, want_lp ? &lp : nullptr);
    if (want_lp) spec_lp_.push_back(std::move(lp));
    spec_out_.push_back(x);
    s.ids.push_back(x);
    if (j == k || x != s.draft[static_cast<size_t>(j)]) break;
  }
  s.ids.resize(old);
  const auto accepted = static_cast<int64_t>(spec_out_.empty() ? 0 : spec_out_.size() - 1);
  s.result.stats.draft_tokens += k;
  s.result.stats.accepted_tokens += accepted;
  if (accepted == k) s.draft_len = std::min(s.draft_len + 1, kMaxDraft);
  else if (accepted == 0) s.draft_len = std::max(1, s.draft_len / 2);
  s.draft.clear();
  // Keep the entries of ids.back() and the accepted drafts; the rejected ones go. With
  // Lightning layers (no truncation) a rejection returns to the states saved before this
  // pass, and the next step runs ids.back(), the accepted drafts and the new token again,
  // as a chunk: the same states, at the cost of their compute (the weights are read once
  // for the step anyway).
  const int64_t keep = static_cast<int64_t>(old) + accepted;
  if (s.cache->has_recurrent() && keep < s.cache->length()) {
    if (Status st = s.cache->RestoreSavedStates(); !st.ok() && error.ok())
      error = Error("cannot roll back rejected drafts: {}", st.message());
  } else if (Status st = s.cache->Truncate(keep); !st.ok() && error.ok()) {
    error = Error("cannot roll back rejected drafts: {}", st.message());
  }
  for (size_t i = 0; i < spec_out_.size() && !s.done; ++i) {
    if (want_lp) s.req.on_logprobs(spec_lp_[i]);
    EmitToken(s, spec_out_[i]);
  }
  if (!error.ok()) return Finish(s, StopReason::kError, error);
  if (!s.done) {
    RegisterFullBlocks(s);
    CheckpointStates(s);
  }
}

int64_t Engine::FitTokens(const Seq& s, int64_t n, int64_t free_blocks) const {
  const int64_t len = s.cache->length();
  if (s.cache->BlocksToExtend(len + n) <= free_blocks) return n;
  // The most positions the table can reach with free_blocks more blocks (one of them
  // spent on copying a shared last block, if that block is written).
  const int64_t bt = options_.block_tokens;
  const int64_t copy = s.cache->BlocksToExtend(len + 1) - (len % bt == 0 ? 1 : 0);
  const int64_t table = static_cast<int64_t>(s.cache->block_table().size());
  const int64_t reach = (table + free_blocks - copy) * bt - len;
  return std::clamp<int64_t>(reach, 0, n);
}

bool Engine::Step() {
  std::unordered_set<uint64_t>& cancel = cancel_scratch_;
  cancel.clear();
  bool all = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!incoming_.empty()) {
      waiting_.push_back(std::move(incoming_.front()));
      incoming_.pop_front();
    }
    cancel.swap(cancel_);
    all = cancel_all_;
    cancel_all_ = false;
  }
  auto cancelled = [&](const Seq& s) {
    return all || cancel.count(s.id) != 0 || (s.req.options.cancel != nullptr && s.req.options.cancel->load());
  };
  for (auto& s : running_)
    if (cancelled(*s)) Finish(*s, StopReason::kCancelled);
  for (auto& s : waiting_)
    if (cancelled(*s)) Finish(*s, StopReason::kCancelled);
  auto drop_done = [&] {
    std::erase_if(running_, [](const auto& s) { return s->done; });
    std::erase_if(waiting_, [](const auto& s) { return s->done; });
  };
  drop_done();

  // Schedule. Decoding sequences first (one token each), then prefill chunks, oldest
  // first; blocks are counted before anything is allocated.
  int64_t budget = options_.max_batch_tokens, reserved = 0;
  scheduled_.clear();
  scheduled_tokens_.clear();
  std::vector<int64_t>& needs = needs_;
  std::vector<Seq*>& order = order_;
  needs.clear();
  order.clear();
  for (auto& s : running_) s->draft.clear();  // drafts are proposed again below for those scheduled
  for (auto& s : running_)
    if (s->remaining() == 1) order.push_back(s.get());
  for (auto& s : running_)
    if (s->remaining() != 1) order.push_back(s.get());
  auto unschedule = [&](Seq* v) {
    for (size_t i = 0; i < scheduled_.size(); ++i)
      if (scheduled_[i] == v) {
        budget += scheduled_tokens_[i];
        reserved -= needs[i];
        scheduled_.erase(scheduled_.begin() + static_cast<std::ptrdiff_t>(i));
        scheduled_tokens_.erase(scheduled_tokens_.begin() + static_cast<std::ptrdiff_t>(i));
        needs.erase(needs.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
  };
  for (Seq* s : order) {
    if (budget == 0) break;
    if (s->cache == nullptr) continue;  // preempted in this loop
    Draft(*s);
    // A decoding sequence runs its last id and its drafts.
    // (a prompt chunk ends at the next checkpoint position of a Lightning model)
    const int64_t wanted =
        s->draft.empty() ? CutAtCheckpoint(*s, s->remaining()) : s->remaining() + static_cast<int64_t>(s->draft.size());
    int64_t n = 0;
    // A chunk shrinks to what the free blocks hold; when not even one token fits, the
    // most recently admitted sequence (possibly this one) is preempted.
    while ((n = FitTokens(*s, std::min(wanted, budget), pool_->available_blocks() - reserved)) == 0) {
      Seq* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it)
        if ((*it)->cache != nullptr && !(*it)->done) {
          victim = it->get();
          break;
        }
      if (victim == s) break;
      unschedule(victim);
      Preempt(*victim);
    }
    if (!s->draft.empty() && n < wanted) s->draft.resize(static_cast<size_t>(std::max<int64_t>(0, n - 1)));
    if (n == 0) {
      const bool alone = std::count_if(running_.begin(), running_.end(), [](const auto& r) {
                           return r->cache != nullptr && !r->done;
                         }) == 1;
      if (alone) Finish(*s, StopReason::kCacheFull);
      else Preempt(*s);
      continue;
    }
    const int64_t need = s->cache->BlocksToExtend(s->cache->length() + n);
    // Lightning states cannot be truncated: keep a copy to return to if a draft is
    // rejected (AfterVerify).
    if (!s->draft.empty() && s->cache->has_recurrent()) s->cache->SaveStates();
    scheduled_.push_back(s);
    scheduled_tokens_.push_back(n);
    needs.push_back(need);
    budget -= n;
    reserved += need;
  }
  // Preempted sequences go back to the front of the queue, oldest first.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (!(*it)->done && (*it)->cache == nullptr) waiting_.push_front(std::move(*it));
  std::erase_if(running_, [](const auto& s) { return s == nullptr || s->done; });

  // Admit waiting requests while there is room.
  while (budget > 0 && !waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_running) {
    Seq& s = *waiting_.front();
    Admit(s);
    if (s.done) {  // failed to attach its cache
      waiting_.pop_front();
      continue;
    }
    const int64_t n = FitTokens(s, CutAtCheckpoint(s, std::min(s.remaining(), budget)), pool_->available_blocks() - reserved);
    if (n == 0) {
      // Not now: give back what Admit took (a session's cache stays with it).
      if (s.req.session != nullptr && s.cache != nullptr && s.req.session->cache_ == nullptr) {
        s.req.session->cache_ = std::move(s.cache);
        s.req.session->ids_.assign(s.ids.begin(), s.ids.begin() + s.req.session->cache_->length());
      }
      s.cache.reset();
      s.registered = 0;
      s.parent_hash = 0;
      s.branch_at = 0;
      break;
    }
    const int64_t need = s.cache->BlocksToExtend(s.cache->length() + n);
    scheduled_.push_back(&s);
    scheduled_tokens_.push_back(n);
    needs.push_back(need);
    budget -= n;
    reserved += need;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }

  bool worked = !scheduled_.empty();
  if (worked) {
    batch_.tokens.clear();
    batch_.seq.clear();
    batch_.want_logits.clear();
    batch_.want_hidden.clear();
    caches_.clear();
    scheduled_rows_.clear();
    scheduled_from_.clear();
    bool any_mtp = false;
    for (size_t i = 0; i < scheduled_.size(); ++i) {
      Seq& s = *scheduled_[i];
      const int64_t from = s.cache->length(), n = scheduled_tokens_[i];
      const auto have = static_cast<int64_t>(s.ids.size());
      any_mtp = any_mtp || s.mtp;
      if (!s.draft.empty()) {  // verification: the last id and the drafts, a row of logits each
        for (int64_t j = 0; j < n; ++j)
          batch_.Add(from + j < have ? s.ids[static_cast<size_t>(from + j)] : s.draft[static_cast<size_t>(from + j - have)],
                     static_cast<int32_t>(i), true, s.mtp);
        scheduled_rows_.push_back(n);
      } else {
        const bool logits = from + n == have;
        for (int64_t j = 0; j < n; ++j)
          batch_.Add(s.ids[static_cast<size_t>(from + j)], static_cast<int32_t>(i), logits && j + 1 == n, s.mtp);
        scheduled_rows_.push_back(logits ? 1 : 0);
      }
      scheduled_from_.push_back(from);
      caches_.push_back(s.cache.get());
    }
    logits_.clear();
    hidden_.clear();
    Status st = any_mtp ? model_.Forward(batch_, caches_, logits_, hidden_) : model_.Forward(batch_, caches_, logits_);
    if (st.ok() && any_mtp) {  // MTP sequences keep their trunk hidden rows (the modules' input)
      const int64_t H = model_.config().hidden_size;
      size_t hrow = 0;
      for (size_t i = 0; i < scheduled_.size(); ++i) {
        Seq& s = *scheduled_[i];
        if (!s.mtp) continue;
        const int64_t n = scheduled_tokens_[i];
        if (s.hidden.empty()) s.hidden_from = scheduled_from_[i];
        s.hidden.resize(static_cast<size_t>((scheduled_from_[i] - s.hidden_from) * H));  // (rows past `from` are stale)
        s.hidden.insert(s.hidden.end(), hidden_.begin() + static_cast<std::ptrdiff_t>(hrow * H),
                        hidden_.begin() + static_cast<std::ptrdiff_t>((hrow + n) * H));
        hrow += static_cast<size_t>(n);
      }
    }
    ++stats_.steps;
    const int64_t V = model_.config().vocab_size;
    size_t row = 0;
    for (size_t i = 0; i < scheduled_.size(); ++i) {
      Seq& s = *scheduled_[i];
      if (!st.ok()) {
        Finish(s, StopReason::kError, Error("the forward pass failed: {}", st.message()));
        continue;
      }
      const int64_t rows = scheduled_rows_[i];
      if (!s.draft.empty()) AfterVerify(s, logits_.data() + row * V);
      else AfterForward(s, rows > 0 ? logits_.data() + row * V : nullptr);
      row += static_cast<size_t>(rows);
    }
    // MTP sequences with a token chosen and not yet run draft their next verification.
    mtp_seqs_.clear();
    if (st.ok())
      for (Seq* s : scheduled_)
        if (s->mtp && !s->done && s->cache != nullptr && s->remaining() == 1) mtp_seqs_.push_back(s);
    if (!mtp_seqs_.empty()) DraftMtp();
  }
  drop_done();
  PublishStats();
  return worked || !waiting_.empty() || !running_.empty();
}

void Engine::PublishStats() {
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.waiting = static_cast<int64_t>(waiting_.size());
  stats_.kv_blocks_used = pool_->blocks_in_use();
  stats_.kv_blocks_cached = pool_->blocks_cached();
  stats_.prefix_lookups = pool_->prefix_lookups();
  stats_.prefix_hits = pool_->prefix_hits();
  stats_.state_checkpoints = pool_->checkpoints();
  stats_.state_checkpoints_evicted = pool_->checkpoints_evicted();
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t refused = shared_stats_.requests_refused;
  shared_stats_ = stats_;
  shared_stats_.requests_refused = refused;
  queued_ = static_cast<int64_t>(incoming_.size() + waiting_.size());
  shared_stats_.waiting = queued_;
  if (waiting_.empty() && running_.empty() && incoming_.empty()) idle_cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_stats_;
}

Result<GenerationResult> Engine::Generate(Request request) {
  if (loop_running_.load()) return Error("Engine::Generate steps on the caller's thread: the loop thread must not run");
  bool done = false;
  Status error;
  GenerationResult out;
  DoneCallback user = std::move(request.on_done);
  request.on_done = [&](const Status& e, GenerationResult& r) {
    done = true;
    error = e;
    out = std::move(r);
    if (user) user(e, out);
  };
  M2_RETURN_IF_ERROR(Submit(std::move(request)).status());
  while (!done)
    if (!Step() && !done) return Error("internal: the engine went idle before the request ended");
  if (!error.ok()) return error;
  return out;
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || cancel_all_ || !incoming_.empty() || !cancel_.empty() || !waiting_.empty() ||
               !running_.empty();
      });
      if (stop_) return;
    }
    Step();
  }
}

void Engine::Start() {
  if (loop_running_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  loop_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  if (!loop_running_.load()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  loop_.join();
  loop_running_.store(false);
}

void Engine::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return incoming_.empty() && queued_ == 0 && shared_stats_.running == 0; });
}

}  // namespace m2::runtime
