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
//
// With a reference model (for example the BF16 model a quantized one was made from), both
// run over the same windows and each scored position also gets the KL divergence of the
// model's next-token distribution from the reference's, KL(P_ref || P_model) =
// sum_v p_ref(v) (log p_ref(v) - log p_model(v)), in nats, and whether the two agree on the
// most likely token. The mean KL is what llama.cpp's --kl-divergence reports; 0 means the
// same distributions.
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
  std::function<void(int64_t)> on_progress{};
  // Optional: compare with this model (same vocabulary) position by position.
  Model* reference = nullptr;
  // How each model's keys and values are stored (the exact fp32 by default): the same
  // model as its own reference with kv_dtype bf16 measures what bf16 KV costs.
  KvDtype kv_dtype = KvDtype::kF32;
  KvDtype reference_kv_dtype = KvDtype::kF32;
};

// Statistics of the comparison with the reference model (PerplexityOptions::reference).
struct ReferenceComparison {
  double perplexity = 0;       // of the reference model on the same scored tokens
  double mean_nll = 0;
  double mean_kl = 0;          // nats per scored token
  double max_kl = 0;
  double kl_p99 = 0;           // 99th percentile of the per-token KL
  double top1_agreement = 0;   // fraction of scored positions where both argmaxes agree
};

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;          // nats per scored token
  int64_t tokens = 0;           // in the text
  int64_t scored_tokens = 0;    // tokens - 1, less one per later window when stride == context
  int64_t windows = 0;
  int64_t evaluated_tokens = 0; // tokens run through the model (windows overlap)
  double seconds = 0;
  bool has_reference = false;
  ReferenceComparison reference;
  double tokens_per_second() const { return seconds > 0 ? evaluated_tokens / seconds : 0; }
};

// Errors: fewer than 2 tokens, context < 2 or past the model's max_position_embeddings,
// stride outside [1, context], ids outside the vocabulary.
Result<PerplexityResult> ComputePerplexity(Model& model, std::span<const int32_t> ids, const PerplexityOptions& options);

// -log p(target) under softmax(logits), in double.
double NegativeLogLikelihood(std::span<const float> logits, int32_t target);

// KL(softmax(reference) || softmax(logits)) in nats, in double. Both rows have the same length.
double KlDivergence(std::span<const float> reference, std::span<const float> logits);

}  // namespace m2::runtime
