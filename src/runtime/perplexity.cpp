#include "runtime/perplexity.h"

#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

namespace m2::runtime {

namespace {

double LogSumExp(std::span<const float> row) {
  double max = -INFINITY;
  for (float l : row) max = std::max(max, static_cast<double>(l));
  double sum = 0;
  for (float l : row) sum += std::exp(static_cast<double>(l) - max);
  return max + std::log(sum);
}

size_t ArgMax(std::span<const float> row) {
  return static_cast<size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace

double NegativeLogLikelihood(std::span<const float> logits, int32_t target) {
  return LogSumExp(logits) - static_cast<double>(logits[target]);
}

double KlDivergence(std::span<const float> reference, std::span<const float> logits) {
  const double lse_p = LogSumExp(reference), lse_q = LogSumExp(logits);
  double kl = 0;
  for (size_t v = 0; v < reference.size(); ++v) {
    const double lp = static_cast<double>(reference[v]) - lse_p;
    const double lq = static_cast<double>(logits[v]) - lse_q;
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(0.0, kl);  // rounding can leave a tiny negative for identical rows
}

Result<PerplexityResult> ComputePerplexity(Model& model, std::span<const int32_t> ids, const PerplexityOptions& o) {
  const ModelConfig& cfg = model.config();
  const int64_t V = cfg.vocab_size;
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 2) return Error("perplexity needs at least 2 tokens (the first is only context), found {}", n);
  if (o.context < 2 || o.context > cfg.max_position_embeddings)
    return Error("context: expected 2 to {} tokens (the model's max_position_embeddings), found {}",
                 cfg.max_position_embeddings, o.context);
  if (o.stride < 1 || o.stride > o.context)
    return Error("stride: expected 1 to {} tokens (the context), found {}", o.context, o.stride);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= V) return Error("token {} (id {}) is outside the vocabulary [0, {})", i, ids[i], V);
  M2_RETURN_IF_ERROR(CheckKvDtype(cfg, o.kv_dtype));
  Model* ref = o.reference;
  if (ref != nullptr) {
    if (Status st = CheckKvDtype(ref->config(), o.reference_kv_dtype); !st.ok()) return st.WithContext("reference model");
    const ModelConfig& rc = ref->config();
    if (rc.vocab_size != V)
      return Error("reference model: expected the same vocabulary size as the model ({}), found {}", V,
                   rc.vocab_size);
    if (o.context > rc.max_position_embeddings)
      return Error("context: expected at most {} tokens (the reference model's max_position_embeddings), found {}",
                   rc.max_position_embeddings, o.context);
  }

  // Logits rows per forward pass: bounds memory at about 32M floats (128 MB) whatever
  // the vocabulary, continuing the same cache between sub-batches.
  const int64_t rows_per_pass = std::max<int64_t>(1, std::min<int64_t>(512, (int64_t{32} << 20) / V));

  PerplexityResult r;
  r.tokens = n;
  KvBlockPool pool(model.cache_layout(16, false, o.kv_dtype));
  std::unique_ptr<KvBlockPool> ref_pool;
  if (ref != nullptr) ref_pool = std::make_unique<KvBlockPool>(ref->cache_layout(16, false, o.reference_kv_dtype));
  std::vector<float> logits, ref_logits;
  std::vector<double> kls;
  double nll_sum = 0, ref_nll_sum = 0;
  int64_t agree = 0;
  int64_t scored_until = 1;  // tokens [1, scored_until) have been scored
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t begin = 0; scored_until < n; begin += o.stride) {
    const int64_t end = std::min(n, begin + o.context);
    // Score targets [first, end): logits at position t predict token t + 1.
    const int64_t first = std::max(scored_until, begin + 1);
    SequenceCache cache(&pool);
    SequenceCache* caches[] = {&cache};
    std::optional<SequenceCache> ref_cache;
    if (ref != nullptr) ref_cache.emplace(ref_pool.get());
    SequenceCache* ref_caches[] = {ref_cache ? &*ref_cache : nullptr};
    for (int64_t s = begin; s < end; s += rows_per_pass) {
      const int64_t e = std::min(end, s + rows_per_pass);
      ForwardBatch batch;
      for (int64_t t = s; t < e; ++t) batch.Add(ids[t], 0, t + 1 >= first && t + 1 < end);
      logits.clear();
      M2_RETURN_IF_ERROR(model.Forward(batch, caches, logits));
      if (ref != nullptr) {
        ref_logits.clear();
        M2_RETURN_IF_ERROR(Status(ref->Forward(batch, ref_caches, ref_logits)).WithContext("reference model"));
      }
      size_t row = 0;
      for (int64_t t = s; t < e; ++t) {
        if (!(t + 1 >= first && t + 1 < end)) continue;
        const std::span<const float> q(&logits[row * V], static_cast<size_t>(V));
        nll_sum += NegativeLogLikelihood(q, ids[t + 1]);
        if (ref != nullptr) {
          const std::span<const float> p(&ref_logits[row * V], static_cast<size_t>(V));
          ref_nll_sum += NegativeLogLikelihood(p, ids[t + 1]);
          kls.push_back(KlDivergence(p, q));
          agree += ArgMax(p) == ArgMax(q);
        }
        ++row;
        ++r.scored_tokens;
      }
    }
    r.evaluated_tokens += end - begin;
    ++r.windows;
    scored_until = end;
    if (o.on_progress) o.on_progress(r.evaluated_tokens);
    if (end == n) break;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.mean_nll = nll_sum / static_cast<double>(r.scored_tokens);
  r.perplexity = std::exp(r.mean_nll);
  if (ref != nullptr) {
    ReferenceComparison& c = r.reference;
    r.has_reference = true;
    const double scored = static_cast<double>(r.scored_tokens);
    c.mean_nll = ref_nll_sum / scored;
    c.perplexity = std::exp(c.mean_nll);
    double kl_sum = 0;
    for (double k : kls) kl_sum += k;
    c.mean_kl = kl_sum / scored;
    std::sort(kls.begin(), kls.end());
    c.max_kl = kls.back();
    c.kl_p99 = kls[std::min(kls.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(kls.size())))];
    c.top1_agreement = static_cast<double>(agree) / scored;
  }
  return r;
}

}  // namespace m2::runtime
