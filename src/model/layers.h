// The two halves of a decoder layer, used by Model::Forward. Internal to src/model.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "model/tracer.h"
#include "model/weights.h"

namespace m2 {

// Where each token of a batch goes: its sequence's cache and its position there.
struct TokenSlot {
  SequenceCache* cache;
  int64_t pos;
};

// Scratch memory reused across calls (grows, never shrinks).
struct Scratch {
  std::vector<float> q, k, v, attn, scores;
  std::vector<float> router, gathered, gate, up, down;
  // Attention: per-sequence block pointers for the current layer.
  std::vector<SequenceCache*> seq_caches;
  std::vector<int64_t> seq_first_block;
  std::vector<const float*> k_blocks, v_blocks;
  std::vector<int32_t> token_seq;
  // MoE routing.
  std::vector<int32_t> chosen;
  std::vector<float> weight, score, biased;
  std::vector<int32_t> order;
  std::vector<std::vector<int32_t>> by_expert;
};

// out[n, hidden] = self-attention of x[n, hidden] (already normed). Writes this
// layer's K/V for each token into its cache at its position first, so a token sees
// every earlier position of its own sequence, in this batch or before.
void AttentionForward(const ModelConfig& cfg, const AttentionWeights& w, int64_t layer, const float* inv_freq,
                      const float* x, const std::vector<TokenSlot>& slots, float* out, Scratch& s, Tracer* trace);

// out[n, hidden] = sparse MoE of x[n, hidden]. Tokens are grouped by expert so each
// chosen expert's weights are read once per batch.
void MoeForward(const ModelConfig& cfg, const MoeWeights& w, int64_t layer, const float* x, int64_t n, float* out,
                Scratch& s, Tracer* trace);

}  // namespace m2
