// The serving core: one model, one KV budget, many sequences.
//
// An Engine owns a KV block pool sized once from a budget (--kv-memory / --kv-tokens)
// and the set of live requests. Any thread may Submit a request and Cancel it; one
// thread runs the model, either the engine's own (Start) or the caller's (Step /
// Generate). Callbacks run on that thread.
//
// Each step (continuous batching with chunked prefill, after nano-vllm / vLLM's
// scheduler): every running sequence that is decoding gets one token; then sequences
// still prefilling get chunks of their prompt, oldest first; then waiting requests are
// admitted, oldest first, while the step's token budget (max_batch_tokens), the running
// limit and the pool allow. All of it is one Model::Forward. A sequence's next token is
// sampled from its own Sampler, so its output does not depend on what else is in the
// batch beyond the last bits of fp32 arithmetic (the kernels' summation order depends on
// the number of rows).
//
// Prefix cache (kv_cache.h): full blocks are registered under a hash of their tokens
// chained with the previous blocks', stay cached after their sequence ends, and are
// taken by any later request whose prompt starts with the same tokens (for the Lightning
// models, up to the deepest block whose recurrent states are checkpointed). A KvSession keeps
// one conversation's cache between requests (token-exact reuse, the partial last block
// included), for the CLI's generate and chat.
//
// Memory: a request whose prompt cannot fit in the whole pool is refused at Submit, as
// is one beyond the queue limit. When a step needs blocks the pool does not have, the
// most recently admitted running sequence is preempted: its blocks are released and its
// tokens (prompt and generated) are recomputed when it is admitted again. A sequence
// alone in the pool that still cannot grow ends with StopReason::kCacheFull.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/generator.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"
#include "text/tokenizer.h"

namespace m2::runtime {

struct EngineOptions {
  // The KV budget: kv_tokens if set, else kv_memory_gib if set, else the smaller of one
  // full context (max_position_embeddings) and 4 GiB.
  int64_t kv_tokens = 0;
  double kv_memory_gib = 0;
  KvDtype kv_dtype = KvDtype::kBf16;
  int64_t block_tokens = 16;
  int64_t max_batch_tokens = 512;  // tokens per forward pass (decode tokens + prefill chunks)
  int64_t max_running = 64;        // sequences admitted at once
  int64_t max_queue = 1024;        // waiting requests; a Submit beyond is refused
  bool prefix_cache = true;
  // The Lightning models' prefix cache (kv_cache.h): their recurrent states are kept at
  // block boundaries, in at most this much memory (GiB; 0 turns prefix sharing off for
  // them; a non-zero budget must hold one checkpoint). A sequence's states are kept at
  // every checkpoint_interval prompt tokens (a multiple of block_tokens; 0: not),
  // at the last full block of its prompt, where its prompt parts from cached blocks
  // deeper than their deepest checkpoint, and at the last block boundary it reached
  // while generating (kept when it ends: the next turn of a conversation extends it).
  // Prompt chunks are cut to end at those positions.
  double state_cache_gib = 4.0;
  int64_t checkpoint_interval = 1024;
  // Speculative decoding for requests that do not choose (Request::spec unset).
  SpecOptions spec;

  // Names the first setting out of range.
  Status Validate() const;
};

// The number of KV blocks the options give for this model (at least one).
Result<int64_t> KvBudgetBlocks(const ModelConfig& cfg, const EngineOptions& o);
// Bytes of keys and values per token for this model at this dtype (its softmax layers:
// a Lightning layer keeps a fixed fp32 state per running sequence, outside this budget).
int64_t KvBytesPerToken(const ModelConfig& cfg, KvDtype dtype);
// "bf16" / "f32" / "q8" -> dtype; anything else is an error naming the choices.
Result<KvDtype> ParseKvDtype(const std::string& s);
// Whether this model's rows can be cached in `dtype` (q8 needs a head_dim that is a multiple
// of its group of 32 values), else an error saying why.
Status CheckKvDtype(const ModelConfig& cfg, KvDtype dtype);

// One conversation's cache, kept between the requests that name it (see Request::session).
// Owned by the caller; it must outlive those requests and the engine must outlive it.
class KvSession {
 public:
  KvSession() = default;
  KvSession(const KvSession&) = delete;
  KvSession& operator=(const KvSession&) = delete;
  // Ids whose keys and values are cached (the last request's prompt plus its generated
  // ids but the final one).
  const std::vector<int32_t>& ids() const { return ids_; }
  // Forgets the cache (its blocks go back to the pool, full ones stay in the prefix cache).
  void Clear() {
    cache_.reset();
    ids_.clear();
  }

 private:
  friend class Engine;
  std::unique_ptr<SequenceCache> cache_;
  std::vector<int32_t> ids_;
  bool busy_ = false;  // a request is using it
};

using DoneCallback = std::function<void(const Status& error, GenerationResult& result)>;

// Log-probabilities of a sampled token under the model (log-softmax of the raw logits,
// before any penalty or temperature, as OpenAI's and vLLM's logprobs), and the `top`
// most likely tokens at that position, most likely first.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
using LogprobsCallback = std::function<void(const TokenLogprobs&)>;

struct Request {
  std::vector<int32_t> prompt;  // at least one id
  SamplingParams sampling;
  // Optional: sample with this sampler (its random state carries on) instead of a new
  // one built from `sampling`. Must outlive the request.
  Sampler* sampler = nullptr;
  // max_new_tokens, eos_ids, ignore_eos, stop_strings, cancel (checked every step).
  GenerateOptions options;
  KvSession* session = nullptr;
  TokenCallback on_token;  // each generated id, eos included
  // >= 0: on_logprobs gets each generated id's logprob and this many alternatives
  // (called just before on_token).
  int top_logprobs = -1;
  LogprobsCallback on_logprobs;
  // Optional: may change the logits row before sampling (e.g. set tokens to -inf to
  // constrain the output); `generated` holds the ids generated so far. After the
  // non-finite check and the logprobs, which see the model's own row.
  std::function<void(std::span<float> logits, std::span<const int32_t> generated)> logits_processor;
  TextCallback on_text;    // final text pieces (needs the engine's tokenizer)
  // Speculative decoding for this request (speculative.h): drafts verified in the same
  // forward pass as everything else in the step. Same output as without. Unset: the
  // engine's default (EngineOptions::spec).
  std::optional<SpecOptions> spec;
  // Exactly once, when the request ends: error is not ok when it failed (a non-finite
  // logit, a failed forward pass); result holds what was generated either way.
  DoneCallback on_done;
};

// A snapshot of the engine's counters.
struct EngineStats {
  int64_t waiting = 0, running = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  int64_t block_tokens = 0;
  int64_t prefix_lookups = 0, prefix_hits = 0;  // full blocks looked up / found in the cache
  // Lightning models: recurrent-state checkpoints kept now / at most / evicted so far.
  int64_t state_checkpoints = 0, state_checkpoints_max = 0, state_checkpoints_evicted = 0;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated_tokens = 0;
  int64_t steps = 0, preemptions = 0, requests_finished = 0, requests_refused = 0;
};

class Engine {
 public:
  // `tokenizer` may be null (ids only). Model and tokenizer must outlive the engine.
  static Result<std::unique_ptr<Engine>> Create(Model& model, const text::Tokenizer* tokenizer,
                                                EngineOptions options = {});
  ~Engine();  // stops the loop; requests still live end as cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; returns its id. Bad requests (empty prompt, ids outside the
  // vocabulary, a prompt longer than the context or than the whole KV pool, stop strings
  // without a tokenizer, bad sampling settings, a busy session) and a full queue are
  // errors, and on_done is not called. Thread-safe.
  Result<uint64_t> Submit(Request request);
  // Ends a request within one step (its blocks freed); unknown ids are ignored. Thread-safe.
  void Cancel(uint64_t id);
  // Ends every request (running, waiting or just submitted) as cancelled. Thread-safe.
  void CancelAll();

  // Runs the scheduling loop on a thread of the engine's own until Stop / destruction.
  void Start();
  void Stop();
  // One step on the calling thread (only when the loop thread is not running): admits,
  // runs one forward pass, samples, calls back. Returns false when there was no work.
  bool Step();
  // Submits and steps on the calling thread until that request ends (the loop thread
  // must not be running; other requests in the engine advance too).
  Result<GenerationResult> Generate(Request request);
  // Waits (loop thread running) until no request is waiting or running.
  void WaitIdle();

  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  Model& model() { return model_; }
  const text::Tokenizer* tokenizer() const { return tokenizer_; }
  // The pool, for tests and benchmarks (only while no step runs).
  KvBlockPool& pool() { return *pool_; }

 private:
  struct Seq;
  Engine(Model& model, const text::Tokenizer* tokenizer, EngineOptions options, int64_t blocks);
  Status ValidateRequest(const Request& r) const;
  void Admit(Seq& s);                   // attach a cache: the session's or prefix-cache blocks
  void Preempt(Seq& s);                 // free its cache; it waits to be recomputed
  void Finish(Seq& s, StopReason reason, Status error = Status::Ok());
  void AfterForward(Seq& s, float* logits);
  // An error naming the first non-finite logit of `row` (position `pos`), else ok.
  Status CheckFinite(const Seq& s, const float* row, int64_t pos) const;
  // The request's processor and sampler on one row of logits (processed in place); its
  // logprobs into *lp when lp is not null. s.ids is the context.
  int32_t SampleRow(Seq& s, float* row, TokenLogprobs* lp);
  // A decoding sequence that ran its last id and k = s.draft.size() drafts: rows of
  // logits for each; keeps the agreed prefix plus the model's own next token.
  void AfterVerify(Seq& s, float* logits);
  // Proposes s.draft for a sequence about to decode (empty when speculation is off).
  void Draft(Seq& s);
  // MTP drafting for the sequences in mtp_seqs_ (after a step's sampling): module caches
  // rolled back to what is still true, then modules 0..K-1 in one batch each.
  void DraftMtp();
  const SpecOptions& SpecOf(const Seq& s) const;
  void EmitToken(Seq& s, int32_t token);
  void RegisterFullBlocks(Seq& s);
  // Lightning models: keeps s's states when its cache ends at a checkpoint position (in
  // the pool, or as s's pending checkpoint while generating).
  void CheckpointStates(Seq& s);
  void PublishPendingCheckpoint(Seq& s);
  // n prompt tokens from s's cache length, cut to end at its next checkpoint position.
  int64_t CutAtCheckpoint(const Seq& s, int64_t n) const;
  bool checkpoints_on() const { return options_.prefix_cache && pool_->max_checkpoints() > 0; }
  // The most of its next n tokens a sequence can run with free_blocks more blocks.
  int64_t FitTokens(const Seq& s, int64_t n, int64_t free_blocks) const;
  void Loop();
  void PublishStats();

  Model& model_;
  const text::Tokenizer* tokenizer_;
  EngineOptions options_;
  std::unique_ptr<KvBlockPool> pool_;
  std::vector<int32_t> eos_scratch_;

  // Shared with other threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::unique_ptr<Seq>> incoming_;
  std::unordered_set<uint64_t> cancel_;
  bool cancel_all_ = false;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  EngineStats shared_stats_;
  int64_t queued_ = 0;  // incoming + waiting, for the queue limit

  // The model thread's own.
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  EngineStats stats_;
  std::thread loop_;
  std::atomic<bool> loop_running_{false};
  // Per step, kept to avoid reallocating.
  ForwardBatch batch_;
  std::vector<SequenceCache*> caches_;
  std::vector<Seq*> scheduled_;
  std::vector<int64_t> scheduled_tokens_;
  std::vector<int64_t> scheduled_rows_;  // logits rows each scheduled sequence gets
  std::vector<int32_t> spec_out_;
  std::vector<int64_t> needs_;
  std::vector<int64_t> scheduled_from_;  // cache length of each scheduled sequence before the pass
  std::vector<float> hidden_;            // trunk hidden rows of the pass (MTP sequences)
  std::vector<Seq*> mtp_seqs_;
  std::vector<int64_t> mtp_k_, mtp_s0_;  // DraftMtp's per-step state, kept to avoid reallocating
  std::vector<SequenceCache*> mtp_caches_;
  std::vector<float> mtp_in_, mtp_logits_, mtp_out_;
  MtpBatch mtp_batch_;
  bool pool_has_mtp_ = false;
  std::vector<Seq*> order_;
  std::unordered_set<uint64_t> cancel_scratch_;
  std::vector<float> raw_scratch_;
  std::vector<int32_t> lp_scratch_;
  std::vector<TokenLogprobs> spec_lp_;
  std::vector<float> logits_;
};

}  // namespace m2::runtime
