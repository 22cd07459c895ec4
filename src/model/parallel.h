// One model split over R ranks (MPI processes, or threads in tests), the way HPC codes
// split work: each rank holds a slice of the weights and of the KV cache, and the ranks
// exchange activations once or twice per sublayer.
//
//  - Attention, tensor-parallel over heads: rank r holds query heads [q_first[r],
//    q_first[r+1]) and the KV heads they read (R divides the KV heads: each rank its own;
//    R a multiple of them: ranks sharing a KV head each compute it), their rows of
//    q/k/v and their KV cache. The q/k norm spans all heads: each rank sends its heads'
//    sums of squares, and every rank adds all of them in head order. The heads' outputs
//    are gathered, and o_proj is split by OUTPUT rows (hidden_first), gathered again.
//  - MoE, expert-parallel: rank r holds experts [expert_first[r], expert_first[r+1]).
//    Every rank computes the router (small) and so the same routing; each runs its own
//    experts, and the (token, slot) outputs are gathered; every rank then forms the
//    weighted sums itself.
//  - lm_head split by vocabulary rows, gathered. Embedding, norms, router and the MTP
//    modules' eh_proj are replicated (small, or read one row per token).
// Nothing is ever summed across ranks: every value is computed whole by one rank and
// copied, and the sums that span ranks (norm statistics, expert mixtures) are formed in a
// fixed order on every rank. So the logits are bit-identical for every R, and every rank
// holds the same hidden state, hence routes the same way. The price is bytes: gathering
// the experts' outputs moves top_k rows per token where a sum (all-reduce) would move one;
// the README gives the formula.
//
// Rank 0 runs the engine: its Forward / ForwardMtp broadcast what the others need
// (tokens, positions, block tables, copy-on-write copies) before computing, and the other
// ranks run Model::Follow(), which mirrors each pass until rank 0's model is destroyed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "dist/comm.h"
#include "model/config.h"
#include "model/weights.h"

namespace m2 {

struct ShardPlan {
  int rank = 0, ranks = 1;
  // Per rank r: [x_first[r], x_first[r + 1]) (R + 1 entries).
  std::vector<int64_t> q_first, hidden_first, vocab_first, expert_first;
  // Per rank r: its KV heads [kv_first[r], kv_first[r] + kv_count[r]).
  std::vector<int64_t> kv_first, kv_count;
  std::vector<int64_t> q_col_first;  // q_first * head_dim: columns of the heads' outputs
  int64_t q_heads() const { return q_first[rank + 1] - q_first[rank]; }
  int64_t kv_heads() const { return kv_count[rank]; }
  bool split() const { return ranks > 1; }
  // "experts 0-7, query heads 0-5, KV heads 0-0, hidden rows 0-95, vocab rows 0-4095"
  std::string Describe(int r) const;
};

// The plan for `ranks` ranks (1: everything on rank 0), or an error saying why this model
// cannot be split that way (heads not divisible, FP8 blocks of 128 rows that a split
// would cut, Lightning layers).
Result<ShardPlan> PlanShards(const ModelConfig& cfg, const ModelWeights& w, int rank, int ranks);

// Rows [r0, r1) of w as a weight of their own (a view into the same data). FP8 needs r0
// on a block boundary (checked by PlanShards).
LinearWeight SliceRows(const LinearWeight& w, int64_t r0, int64_t r1);

// Cuts `w` down to this rank's slices (views: nothing is copied). Returns the bytes of
// weights this rank reads (its matrices, the embedding not counted).
int64_t ShardWeights(const ShardPlan& plan, const ModelConfig& cfg, ModelWeights& w);

// The weights' bytes one rank reads, for the whole model (same counting, R = 1).
int64_t WeightBytesRead(const ModelWeights& w);

// A split model's communicator, plan and exchange buffers (what layers.h passes down).
struct Parallel {
  Comm* comm = nullptr;
  ShardPlan plan;
  std::vector<int64_t> counts;
  std::vector<float> recv;
  // Every rank's local [n, cols_r] (cols_r = first[r+1] - first[r], row-major) side by
  // side into out [n, first[R]]: the columns of rank r at [first[r], first[r+1]).
  // root >= 0: only that rank receives (out untouched elsewhere).
  void GatherColumns(const float* local, int64_t n, const std::vector<int64_t>& first, float* out, int root = -1);
  // Every rank's `bytes[r]` bytes in rank order into out (AllGatherV).
  void GatherBytes(const void* local, const std::vector<int64_t>& bytes, void* out);
};

}  // namespace m2
