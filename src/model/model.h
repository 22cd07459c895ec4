// A loaded MiniMax-M2 model and its forward pass over a batch of tokens that may
// belong to different sequences at different positions (prefill, decode, and mixes of
// both, as a continuous-batching server or speculative verification needs).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "io/tensor_store.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "model/parallel.h"
#include "model/tracer.h"
#include "model/weights.h"

namespace m2 {

// Tokens to run. Token i belongs to sequence seq[i] (an index into the caches passed
// to Forward) and goes to the next free position of that sequence's cache: tokens of
// one sequence are consecutive positions in batch order.
struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> seq;
  std::vector<uint8_t> want_logits;  // 1: compute logits for this token
  // Optional: empty, or one flag per token. 1: return this token's last hidden state
  // (see the Forward overload with `hidden`). Add() fills it.
  std::vector<uint8_t> want_hidden;

  void Add(int32_t token, int32_t sequence, bool logits, bool hidden = false) {
    want_hidden.resize(tokens.size(), 0);  // rows added without Add() want none
    tokens.push_back(token);
    seq.push_back(sequence);
    want_logits.push_back(logits ? 1 : 0);
    want_hidden.push_back(hidden ? 1 : 0);
  }
  size_t size() const { return tokens.size(); }
};

// Rows for one MTP module (Model::ForwardMtp). Row r belongs to sequence seq[r] (an index
// into the caches passed) at position pos[r] = i of that sequence. For module k its
// inputs are h^k_i (row r of ForwardMtp's `hidden_in`) and tokens[r] = t_{i+k+1}, the
// token k+1 places after position i; its logits predict t_{i+k+2}. The rows of one
// sequence are consecutive positions in batch order (other sequences' rows may come in
// between).
struct MtpBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> seq;
  std::vector<int64_t> pos;
  std::vector<uint8_t> want_logits;  // 1: compute logits for this row

  void Add(int32_t token, int32_t sequence, int64_t position, bool logits) {
    tokens.push_back(token);
    seq.push_back(sequence);
    pos.push_back(position);
    want_logits.push_back(logits ? 1 : 0);
  }
  size_t size() const { return tokens.size(); }
};

// LoadOptions::attention: how softmax attention forms its products (kernels/attention.h).
// kAuto: bf16 products (AttentionMath::kBf16) where the CPU has them, unless
// LoadOptions::activations is kExact (asked for exact: the default here, of m2 perplexity
// and logits, and the golden tests), which keeps exact attention. kBf16 on a CPU without
// AVX-512 BF16 is an error.
enum class AttentionChoice : uint8_t { kAuto, kExact, kBf16 };

// The threads of a model's forward pass come from here, never from a global pool: a model
// either shares a pool it is handed or owns one of its own, so a server, a benchmark and
// several models can each run on threads of their choice in one process.
struct LoadOptions {
  bool progress = true;  // show a progress line on stderr while loading
  // A pool to run on, shared with whoever else uses it (not owned: it must outlive the
  // model, and only one forward pass may use it at a time). nullptr: the model makes a
  // pool of its own with `threads` threads (0: one per available core).
  ThreadPool* pool = nullptr;
  int threads = 0;
  // kInt8Decode / kInt8: multiply q8 / q4 weights with int8-quantized activations
  // (kernels/linear_int8.h, ActivationMode in linear.h): faster, not exact. Other formats
  // stay exact. An error on a model without q8 / q4 weights. kBf16Prefill: prefill bf16 /
  // FP8 / q8 / q4 weights with activations rounded to bf16 (kernels/linear_bf16.h);
  // kInt8DecodeBf16Prefill: both. An error on a CPU without AVX-512 BF16 or a model
  // without such weights (SetActivations in model.cpp). kInt8DecodeInt8Prefill: int8 for
  // q8 / q4 weights in prefill too, on the int8 GEMM, and int8 prefill for FP8 weights
  // (requantized per 32 columns there; exact decode steps: kInt8Prefill); an error on the
  // portable kernels or a model with none of these formats.
  // kInt16Decode (q8 weights; kInt16DecodeBf16Prefill with bf16 prefill, kInt16 for every
  // token): int16 activations per 32 values in decode steps (kernels/linear_int16.h).
  // kAuto: int8 decode and prefill for q4 weights where the CPU runs the int8 kernels, int16
  // decode steps for q8 weights, bf16 prefill where it beats fp32 (AMD's AVX-512 BF16, AMX),
  // exact for everything else (the CLI's default; model.cpp says why). The default here
  // stays kExact: a program that embeds the model chooses.
  ActivationMode activations = ActivationMode::kExact;
  AttentionChoice attention = AttentionChoice::kAuto;
  // Where the weights live (io/tensor_store.h): mapped (the default here), read into
  // anonymous memory, or auto (read where they fit; the CLI's default). Ranks of a split
  // model map them under auto.
  WeightMemory weights = WeightMemory::kMap;
  // Split the model over the ranks of `comm` (model/parallel.h; not owned, it must outlive
  // the model). Every rank loads the model with its own comm; rank 0 then uses it like any
  // model, and the others call Follow(). nullptr or one rank: the whole model here.
  Comm* comm = nullptr;
};

// What one rank of a split model has cost so far (Model::GatherRankStats).
struct RankStats {
  int64_t weight_bytes = 0;      // weights this rank reads (its slices; the embedding not counted)
  int64_t resident_bytes = 0;    // the process's resident memory
  int64_t forwards = 0;          // forward passes run (trunk and MTP)
  double forward_seconds = 0;    // inside them, communication included
  double forward_comm_seconds = 0;  // of which in collectives (waiting for other ranks included)
  CommStats comm;                // all its collectives (ranks > 0: waiting for rank 0's next pass too)
};

class Model {
 public:
  ~Model();
  // `path`: a model folder (config.json + safetensors) as published on Hugging Face.
  static Result<std::unique_ptr<Model>> Load(const std::string& path, const LoadOptions& opts = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return weights_; }
  // How attention forms its products (LoadOptions::attention as resolved on load).
  AttentionMath attention_math() const { return attention_math_; }
  const TensorStore& store() const { return *store_; }
  // The pool the forward pass runs on, and a way to switch it (e.g. a benchmark comparing
  // thread counts on one loaded model): SetPool(&p) uses p from the next call on (not
  // owned; it must outlive its use), SetPool(nullptr) returns to the pool of Load.
  ThreadPool& pool() const { return *pool_; }
  void SetPool(ThreadPool* pool);

  // The cache shape this model needs: one KV layer per decoder layer of the trunk
  // (layers 0..L-1), then, when the model has MTP modules and `with_mtp`, one KV layer
  // per module (module k: layer L+k, see mtp_cache_layer).
  // Keys and values are stored as `kv_dtype` (fp32: exact; bf16: half the memory).
  CacheLayout cache_layout(int64_t block_tokens = 16, bool with_mtp = true, KvDtype kv_dtype = KvDtype::kF32) const;

  // Runs `batch`. Appends to `logits` one row of vocab_size floats for every token with
  // want_logits, in batch order. Bad input (token ids out of range, a sequence index
  // without a cache, positions past max_position_embeddings, a cache of another shape)
  // is an error, and then no cache is changed. Sets filled(l) = length() for the
  // trunk's layers l of every cache that grew.
  Status Forward(const ForwardBatch& batch, std::span<SequenceCache* const> caches, std::vector<float>& logits,
                 Tracer* trace = nullptr);
  // The same, and appends to `hidden` one row of hidden_size floats for every token with
  // want_hidden, in batch order: the output of the last decoder layer BEFORE model.norm,
  // i.e. h^0_i, the hidden input of MTP module 0 at that token's position i.
  Status Forward(const ForwardBatch& batch, std::span<SequenceCache* const> caches, std::vector<float>& logits,
                 std::vector<float>& hidden, Tracer* trace = nullptr);

  // --- Multi-token prediction (MODEL_SPEC.md "MTP"; reference: tools/train/model.py,
  // MTPModule.forward and M2Tiny.forward_all). Module k at position i:
  //   z      = eh_proj( concat[ rmsnorm(h^k_i, hnorm) ; rmsnorm(embed[t_{i+k+1}], enorm) ] )  [hidden]
  //   h^{k+1}_i = DecoderLayer_k(z)     causal over positions 0..i of module k's own cache
  //                                     layer, RoPE position i (the same positions as the trunk)
  //   logits = lm_head( rmsnorm(h^{k+1}_i, shared_head.norm) )   predicts t_{i+k+2}
  // h^0_i is the trunk's last hidden state (Forward with want_hidden); h^{k+1}_i, module
  // k's output, is the hidden input of module k+1 at the same position i.
  // Expert runs (an expert's weights read once for all its tokens of a chunk), summed
  // over the layers of the last Forward: what a batched step reads of the experts.
  int64_t experts_run_last_forward() const { return scratch_.experts_run; }

  int64_t num_mtp_modules() const { return static_cast<int64_t>(weights_.mtp.size()); }
  int64_t mtp_cache_layer(int64_t k) const { return cfg_.num_hidden_layers + k; }

  // Runs MTP module `module` on `batch`. hidden_in: [batch.size(), hidden_size], row r =
  // h^k at row r's position. Appends to `logits` one row of vocab_size floats per row
  // with want_logits, and to `hidden_out` one row of hidden_size floats per row (h^{k+1},
  // the next module's hidden input), both in batch order.
  // Cache: row r writes module k's K/V at position pos[r] of its sequence's cache (layer
  // mtp_cache_layer(k)) and attends to that layer's positions 0..pos[r]. PRECONDITIONS,
  // checked (an error, and then no cache is changed): a sequence's first row is at a
  // position <= cache.filled(mtp_cache_layer(k)) (no gaps), and its last row below
  // cache.length() (the trunk has run there). Afterwards filled = last row's position + 1:
  // positions written again invalidate the later ones.
  //
  // Drafting K tokens for one sequence whose trunk has run t_0..t_{N-1} (cache length N)
  // and whose next token t_N is chosen: let s = cache.filled(mtp_cache_layer(K-1)) (the
  // module furthest behind; filled only ever lags more for later modules). For k = 0..K-1
  // run module k on positions i = s..N-1 with tokens t_{i+k+1} and hidden h^k_i (k = 0:
  // the trunk's hidden rows, kept from the Forward calls that computed them; k > 0: module
  // k-1's hidden_out), logits wanted for the last row only: that row's argmax/sample is
  // the draft d_{N+k+1}, and it is the token row N-1 of module k+1 reads. Rows before
  // N-1 recompute entries that may have read earlier drafts; rows already right are
  // recomputed identically. Then the trunk verifies t_N, d_{N+1}, ... in one Forward.
  // On rejection: Truncate the cache to the trunk's accepted length, then TruncateMtp
  // with the number of leading tokens that are still what the module entries read.
  Status ForwardMtp(int64_t module, const MtpBatch& batch, std::span<const float> hidden_in,
                    std::span<SequenceCache* const> caches, std::vector<float>& logits,
                    std::vector<float>& hidden_out, Tracer* trace = nullptr);

  // Forgets every MTP cache entry that read a token at index >= kept_tokens: module k's
  // entry at position i read tokens up to t_{i+k+1}, so filled(mtp_cache_layer(k)) becomes
  // at most max(0, kept_tokens - k - 1). kept_tokens counts the tokens t_0.. that are
  // unchanged since the entries were computed (the accepted prefix of the drafted
  // sequence, NOT counting a corrected token sampled after it). Cache blocks are not
  // released here (Truncate does that); forgotten positions are simply written again.
  void TruncateMtp(SequenceCache& cache, int64_t kept_tokens) const;

  // --- Split models (LoadOptions::comm; model/parallel.h).
  int rank() const { return par_ ? par_->plan.rank : 0; }
  int ranks() const { return par_ ? par_->plan.ranks : 1; }
  const ShardPlan* shard_plan() const { return par_ ? &par_->plan : nullptr; }
  // Ranks other than 0: runs every forward pass rank 0 runs, with this rank's slices, until
  // rank 0's model is destroyed; then returns. An error on rank 0 or in a single process.
  Status Follow();
  // Rank 0 of a split model: every rank's figures, in rank order (a collective: the other
  // ranks answer from Follow). A single process: its own.
  std::vector<RankStats> GatherRankStats();

 private:
  ModelConfig cfg_;
  std::unique_ptr<TensorStore> store_;
  ModelWeights weights_;
  std::vector<float> inv_freq_;  // [rotary_dim / 2]
  std::unique_ptr<ThreadPool> own_pool_;  // when Load was given none
  ThreadPool* load_pool_ = nullptr;        // the pool of Load (own_pool_ or LoadOptions::pool)
  ThreadPool* pool_ = nullptr;             // the one in use
  // Messages from rank 0 to the others (model_parallel.cpp).
  enum : int32_t { kTrunk = 1, kMtp = 2, kStats = 3, kShutdown = 4 };
  // KV heads this rank holds (all of them in one process).
  int64_t kv_heads_here() const { return par_ ? par_->plan.kv_heads() : cfg_.num_key_value_heads; }
  // A split model (null in one process), and on rank 0 what the others must mirror.
  std::unique_ptr<Parallel> par_;
  std::shared_ptr<PoolMirror> mirror_;
  std::unordered_map<uint64_t, std::unique_ptr<KvBlockPool>> peer_pools_;  // ranks > 0: rank 0's pools
  std::vector<char> message_;
  int64_t weight_bytes_ = 0, forwards_ = 0;
  AttentionMath attention_math_ = AttentionMath::kExact;
  double forward_seconds_ = 0, forward_comm_seconds_ = 0;
  // Counts a forward pass that began at t0 with the communicator's clock at comm0.
  void CountForward(std::chrono::steady_clock::time_point t0, double comm0);
  // GatherRankStats with the communicator's figures as they were before the request for
  // them (so that they cover the forward passes only).
  std::vector<RankStats> GatherRankStats(const CommStats& before_request);
  double CommSeconds() const { return par_ ? par_->comm->stats().seconds : 0.0; }
  std::vector<float> part_logits_;  // split lm_head: this rank's vocabulary rows
  // Rank 0: sends the pass about to run to the other ranks (kind: 1 trunk, 2 MTP module).
  void Announce(int32_t kind, int32_t module, std::span<const int32_t> tokens, std::span<const uint8_t> want_logits,
                std::span<SequenceCache* const> caches, std::span<const float> hidden_in);
  // The computation of Forward / ForwardMtp once slots_ and seq_views_ are set (every rank).
  void RunTrunk(const int32_t* tokens, const uint8_t* want_logits, const uint8_t* want_hidden, int64_t n,
                std::vector<float>& logits, std::vector<float>* hidden, Tracer* trace);
  void RunMtp(int64_t module, const int32_t* tokens, const float* hidden_in, const uint8_t* want_logits, int64_t n,
              std::vector<float>& logits, std::vector<float>& hidden_out, Tracer* trace);
  // lm_head on `rows` normed rows (split: this rank's vocabulary rows, gathered).
  void LmHead(const float* normed, int64_t rows, float* out);
  // Checks a cache handed to Forward / ForwardMtp has this model's layers up to `layers`.
  Status CheckCacheLayout(const SequenceCache& cache, size_t index, int64_t layers) const;
  // One decoder layer on hidden_ [n, hidden] in place: h += attn(rmsnorm(h)); h += moe(rmsnorm(h)).
  // `layer` is both the cache layer and the trace name ("layers.<layer>.*").
  void RunLayer(const LayerWeights& w, int64_t layer, const std::vector<TokenSlot>& slots, Tracer* trace);
  // Each cache's pool and block table, once per forward pass, for every layer.
  void BuildSeqViews(std::span<SequenceCache* const> caches);

  Scratch scratch_;
  std::vector<float> hidden_, normed_, branch_;
  std::vector<float> mtp_in_, embed_row_;  // ForwardMtp: [n, 2*hidden] and [hidden]
  // Per-call bookkeeping, kept so that a warm forward pass allocates nothing.
  std::vector<int64_t> seq_first_, seq_next_, seq_old_;
  std::vector<TokenSlot> slots_;
  std::vector<SeqView> seq_views_;
};

}  // namespace m2
