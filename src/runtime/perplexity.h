// Perplexity of a model on a token sequence: exp(mean negative log-likelihood of each
// token given the tokens before it).
//
// Windowing (the strided sliding window of transformers' "Perplexity of fixed-length
// models" guide): a text longer than the context is evaluated in windows of `context`
// tokens that start every `stride` tokens: window k covers [k*stride, k*stride + context).
// Each window runs from an empty cache, and scores only the tokens that no earlier window
// scored, so every token is scored at most once, with between context - stride and
// context - 1 tokens of left context (all it has, near the start). The first token has
// no context and is never scored. stride == context gives disjoint windows (fast, but
// tokens early in a window see little context, and the first token of each window is
// not scored at all, as in the guide); a smaller stride costs more compute and gives
// each token more context. The last window ends at the end of the text.
//
// log-softmax is computed in double: lse = max + log(sum exp(l - max)), nll = lse - l[t].
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace m2::runtime {

struct PerplexityOptions {
  int64_t context = 1024;
  int64_t stride = 512;
  // Called after each window with the number of tokens run so far.
  std::function<void(int64_t)> on_progress;
};

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;          // nats per scored token
  int64_t tokens = 0;           // in the text
  int64_t scored_tokens = 0;    // tokens - 1, less one per later window when stride == context
  int64_t windows = 0;
  int64_t evaluated_tokens = 0; // tokens run through the model (windows overlap)
  double seconds = 0;
  double tokens_per_second() const { return seconds > 0 ? evaluated_tokens / seconds : 0; }
};

// Errors: fewer than 2 tokens, context < 2 or past the model's max_position_embeddings,
// stride outside [1, context], ids outside the vocabulary.
Result<PerplexityResult> ComputePerplexity(Model& model, std::span<const int32_t> ids, const PerplexityOptions& options);

// -log p(target) under softmax(logits), in double.
double NegativeLogLikelihood(std::span<const float> logits, int32_t target);

}  // namespace m2::runtime
