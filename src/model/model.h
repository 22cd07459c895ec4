// A loaded MiniMax-M2 model and its forward pass over a batch of tokens that may
// belong to different sequences at different positions (prefill, decode, and mixes of
// both, as a continuous-batching server or speculative verification needs).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/tensor_store.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/layers.h"
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

  void Add(int32_t token, int32_t sequence, bool logits) {
    tokens.push_back(token);
    seq.push_back(sequence);
    want_logits.push_back(logits ? 1 : 0);
  }
  size_t size() const { return tokens.size(); }
};

struct LoadOptions {
  bool progress = true;  // show a progress line on stderr while loading
};

class Model {
 public:
  // `path`: a model folder (config.json + safetensors) as published on Hugging Face.
  static Result<std::unique_ptr<Model>> Load(const std::string& path, const LoadOptions& opts = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return weights_; }
  const TensorStore& store() const { return *store_; }

  // The cache shape this model needs (one KV layer per decoder layer).
  CacheLayout cache_layout(int64_t block_tokens = 16) const;

  // Runs `batch`. Appends to `logits` one row of vocab_size floats for every token with
  // want_logits, in batch order. Bad input (token ids out of range, a sequence index
  // without a cache, positions past max_position_embeddings) is an error, and then no
  // cache is changed.
  Status Forward(const ForwardBatch& batch, std::span<SequenceCache* const> caches, std::vector<float>& logits,
                 Tracer* trace = nullptr);

 private:
  ModelConfig cfg_;
  std::unique_ptr<TensorStore> store_;
  ModelWeights weights_;
  std::vector<float> inv_freq_;  // [rotary_dim / 2]
  Scratch scratch_;
  std::vector<float> hidden_, normed_, branch_;
};

}  // namespace m2
