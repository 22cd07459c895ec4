// The two halves of a decoder layer, used by Model::Forward. Internal to src/model. Both
// run on the pool they are given (the model's), never on a global one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/parallel.h"
#include "model/tracer.h"
#include "model/weights.h"

namespace m2 {

// Where each token of a batch goes: its sequence's cache and its position there.
struct TokenSlot {
  SequenceCache* cache;
  int64_t pos;
  int32_t seq;  // index into the batch's SeqView list
};

// One sequence of a batch: its pool and block table, taken once per forward pass (the
// table is valid for every layer; each layer's arena is found through the pool).
struct SeqView {
  KvBlockPool* pool;
  const int32_t* blocks;
  // K or V of `layer` at position `pos`, KV head `head` (of the pool's heads): a row of
  // head_dim values in the pool's dtype (KvRowBytes).
  void* KAt(int64_t layer, int64_t pos, int64_t head) const {
    return InBlock(pool->KData(blocks[pos / pool->block_tokens()], layer, head), layer, pos);
  }
  void* VAt(int64_t layer, int64_t pos, int64_t head) const {
    return InBlock(pool->VData(blocks[pos / pool->block_tokens()], layer, head), layer, pos);
  }

 private:
  // Position pos's row within its block's rows of a head (the pool's KData / VData).
  void* InBlock(void* rows, int64_t layer, int64_t pos) const {
    const int64_t d = pool->layout().layers[static_cast<size_t>(layer)].head_dim;
    return static_cast<char*>(rows) + pos % pool->block_tokens() * KvRowBytes(pool->dtype(), d);
  }
};

// A stable counting sort: the items [first, last) grouped by key(i) in [0, buckets), into
// `order`; bucket k's items are order[start[k] .. start[k + 1]), in their original order.
// No allocation once the vectors have grown (`cursor` is scratch).
template <class Key>
void GroupByKey(int64_t first, int64_t last, int64_t buckets, Key key, std::vector<int64_t>& start,
                std::vector<int64_t>& cursor, std::vector<int32_t>& order) {
  start.assign(static_cast<size_t>(buckets) + 1, 0);
  for (int64_t i = first; i < last; ++i) ++start[static_cast<size_t>(key(i)) + 1];
  for (int64_t b = 0; b < buckets; ++b) start[b + 1] += start[b];
  cursor.assign(start.begin(), start.end() - 1);
  order.resize(static_cast<size_t>(last - first));
  for (int64_t i = first; i < last; ++i) order[static_cast<size_t>(cursor[key(i)]++)] = static_cast<int32_t>(i);
}

// Scratch memory reused across calls (grows, never shrinks).
// The MoE groups at most this many tokens at a time: its per-(token, slot) outputs take
// kMoeChunkTokens * top_k * hidden floats (96 MiB for M2) however long the prompt.
inline constexpr int64_t kMoeChunkTokens = 1024;

struct Scratch {
  std::vector<float> q, k, v, attn, scores;
  std::vector<float> attn_all, out_part;   // split models: every head's output; this rank's o_proj rows
  std::vector<double> head_ss, head_ss_all;  // per (token, head) sums of squares of q and k
  std::vector<float> pairs_send, pairs_recv;  // split models: expert outputs exchanged
  std::vector<int64_t> pair_bytes;
  std::vector<float> router;
  // MoE routing.
  std::vector<int32_t> chosen;
  std::vector<float> weight, score, biased;
  std::vector<int32_t> order;
  std::vector<int32_t> pair_flat;                       // pairs grouped by expert (moe.cpp)
  std::vector<int64_t> expert_start, expert_next;       // [E + 1] offsets into pair_flat; fill cursors
  std::vector<int32_t> used;       // experts with tokens in this chunk, most tokens first
  int64_t experts_run = 0;         // (layer, chunk, expert) runs since the forward pass began
  std::vector<float> pair_out;     // [tokens * top_k, hidden]: each (token, slot)'s expert output
  struct ExpertThread {            // one per pool thread slot (experts run in parallel)
    std::vector<float> gathered, gate, up, down;
  };
  std::vector<ExpertThread> expert_threads;
  // The one-pass MoE (decode chunks; moe.cpp, ExpertsByRows): per slot of a used expert
  // (s.used order), the prepared inputs of its W1, W3 (where W1's do not serve it) and W2,
  // its first row in the flat buffers, and its rows done (W1 and W3, then W2).
  std::vector<RowsInput> rows_in1, rows_in3, rows_in2;
  std::vector<int64_t> rows_first;
  std::vector<float> rows_gathered, rows_gate, rows_up, rows_down;
  std::unique_ptr<std::atomic<int64_t>[]> rows_done;
  int64_t rows_done_size = 0;
  std::vector<std::vector<float>> attn_scores;  // per pool thread slot
  std::vector<int64_t> attn_tiles;               // first token of each query tile, then n
  // Lightning layers.
  std::vector<float> qkv, qkv_grouped, lightning_out, gate;
  std::vector<int32_t> run_rows;                    // batch rows grouped by sequence
  std::vector<int64_t> run_start, run_seq;          // runs of one sequence's rows in run_rows
  std::vector<int64_t> seq_start, seq_next;         // GroupByKey of the rows by sequence
  std::vector<float> slopes;                        // [heads] of the current layer
  std::vector<std::vector<float>> lightning_threads;  // per pool thread slot
};

// out[n, hidden] = self-attention of x[n, hidden] (already normed). Writes this
// layer's K/V for each token into its cache at its position first, so a token sees
// every earlier position of its own sequence, in this batch or before.
// `par`: null, or this rank's part of a split model (parallel.h): then w holds this rank's
// heads and o_proj rows, the cache its KV heads, and `out` is whole on every rank.
void AttentionForward(const ModelConfig& cfg, const AttentionWeights& w, int64_t layer, const float* inv_freq,
                      const float* x, const std::vector<TokenSlot>& slots, const std::vector<SeqView>& seqs, float* out,
                      Scratch& s, ThreadPool& pool, Parallel* par, Tracer* trace);

// out[n, hidden] = Lightning attention of x[n, hidden] (already normed), MODEL_SPEC.md
// section 2 / transformers' MiniMaxLightningAttention. Each sequence's rows continue from
// its recurrent state (cache layer `layer`), which they update.
void LightningForward(const ModelConfig& cfg, const LightningWeights& w, int64_t layer, const float* x,
                      const std::vector<TokenSlot>& slots, float* out, Scratch& s, ThreadPool& pool, Tracer* trace);

// out[n, hidden] = sparse MoE of x[n, hidden]. Tokens are grouped by expert so each
// chosen expert's weights are read once per batch (per chunk of kMoeChunkTokens). When
// there are enough experts with tokens, the pool's threads take whole experts (no
// synchronisation per matrix); otherwise each expert's rows are split over the threads.
// A chunk of up to kMaxGemvTokens tokens (decode) on several threads runs every used
// expert's W1 and W3 rows as one pool job and every W2 row as a second (moe.cpp).
// Either way each token sums its experts' outputs in expert-index order, so the result
// does not depend on the thread count. `par` (a split model): this rank runs its own
// experts, the outputs of all are gathered, and every rank forms the same sums.
void MoeForward(const ModelConfig& cfg, const MoeWeights& w, int64_t layer, const float* x, int64_t n, float* out,
                Scratch& s, ThreadPool& pool, Parallel* par, Tracer* trace);
// Off: decode chunks take whole experts per thread (or rows per matrix) as prefill chunks
// do, instead of the two row jobs (for gemv_bench --moe and the tests; on by default).
void SetMoeRowsJobsForTesting(bool on);
// The row jobs hand their chunks out as decode products do (DecodeChunksSpread, kernels/linear.h).

}  // namespace m2
