// The decoder stack (transformers: MiniMaxM2Model.forward + MiniMaxM2ForCausalLM):
//   h = embed[ids]
//   per layer: h += attn(rmsnorm(h)); h += moe(rmsnorm(h))
//   logits = rmsnorm(h) lm_head^T
#include "model/model.h"

#include <fmt/format.h>

#include "base/progress.h"
#include "kernels/linear.h"
#include "kernels/ops.h"

namespace m2 {

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, const LoadOptions& opts) {
  std::unique_ptr<Model> m(new Model());
  M2_ASSIGN_OR_RETURN(m->cfg_, LoadModelConfig(path));
  {
    std::unique_ptr<Progress> p;
    M2_ASSIGN_OR_RETURN(m->store_, TensorStore::Open(path, [&](size_t i, size_t n) {
      if (!p && n > 1) p = std::make_unique<Progress>("opening shards", n, "files", opts.progress);
      if (p) p->Update(i);
    }));
  }
  {
    Progress p("binding weights", static_cast<uint64_t>(m->cfg_.num_hidden_layers), "layers",
               opts.progress && m->cfg_.num_hidden_layers >= 8);
    M2_ASSIGN_OR_RETURN(m->weights_, LoadModelWeights(m->cfg_, *m->store_,
                                                      [&](int64_t i, int64_t) { p.Update(static_cast<uint64_t>(i)); }));
  }
  m->inv_freq_.resize(static_cast<size_t>(m->cfg_.rotary_dim / 2));
  RopeInvFreq(m->cfg_.rope_theta, m->cfg_.rotary_dim, m->inv_freq_.data());
  return m;
}

CacheLayout Model::cache_layout(int64_t block_tokens) const {
  CacheLayout l;
  l.block_tokens = block_tokens;
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i)
    l.layers.push_back({LayerCacheKind::kKeyValue, cfg_.num_key_value_heads, cfg_.head_dim, 0});
  return l;
}

Status Model::Forward(const ForwardBatch& batch, std::span<SequenceCache* const> caches, std::vector<float>& logits,
                      Tracer* trace) {
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t Hd = cfg_.hidden_size, V = cfg_.vocab_size;
  if (batch.seq.size() != batch.tokens.size() || batch.want_logits.size() != batch.tokens.size())
    return Error("forward batch: tokens ({}), seq ({}) and want_logits ({}) must have the same length",
                 batch.tokens.size(), batch.seq.size(), batch.want_logits.size());
  if (n == 0) return Status::Ok();

  // Validate everything before touching any cache.
  std::vector<int64_t> next(caches.size()), old(caches.size());
  for (size_t c = 0; c < caches.size(); ++c) {
    if (caches[c] == nullptr) return Error("forward batch: cache {} is null", c);
    for (size_t d = 0; d < c; ++d)
      if (caches[d] == caches[c]) return Error("forward batch: caches {} and {} are the same object", d, c);
    old[c] = next[c] = caches[c]->length();
  }
  std::vector<TokenSlot> slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok = batch.tokens[i], sq = batch.seq[i];
    if (tok < 0 || tok >= V) return Error("token id {} at batch index {} is outside the vocabulary [0, {})", tok, i, V);
    if (sq < 0 || static_cast<size_t>(sq) >= caches.size())
      return Error("batch index {} names sequence {}, but {} caches were given", i, sq, caches.size());
    slots[i] = {caches[sq], next[sq]++};
    if (slots[i].pos >= cfg_.max_position_embeddings)
      return Error("sequence {} would reach position {}, past the model's max_position_embeddings {}", sq,
                   slots[i].pos, cfg_.max_position_embeddings);
  }
  for (size_t c = 0; c < caches.size(); ++c) {
    if (next[c] == caches[c]->length()) continue;
    Status st = caches[c]->Extend(next[c]);
    if (!st.ok()) {  // the pool ran out: give back what this call took
      for (size_t u = 0; u < c; ++u) (void)caches[u]->Truncate(old[u]);
      return st;
    }
  }

  hidden_.resize(static_cast<size_t>(n * Hd));
  normed_.resize(static_cast<size_t>(n * Hd));
  branch_.resize(static_cast<size_t>(n * Hd));
  for (int64_t i = 0; i < n; ++i) DequantizeRow(weights_.embed, batch.tokens[i], &hidden_[i * Hd]);
  if (trace) trace->Record("embed", hidden_.data(), {n, Hd});

  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& L = weights_.layers[l];
    for (int64_t i = 0; i < n; ++i)
      RmsNorm(&hidden_[i * Hd], L.input_norm.data(), Hd, cfg_.rms_norm_eps, &normed_[i * Hd]);
    if (trace) trace->Record(fmt::format("layers.{}.attn_norm", l), normed_.data(), {n, Hd});
    AttentionForward(cfg_, L.attn, l, inv_freq_.data(), normed_.data(), slots, branch_.data(), scratch_, trace);
    if (trace) trace->Record(fmt::format("layers.{}.attn_out", l), branch_.data(), {n, Hd});
    for (int64_t i = 0; i < n * Hd; ++i) hidden_[i] += branch_[i];

    for (int64_t i = 0; i < n; ++i)
      RmsNorm(&hidden_[i * Hd], L.post_attention_norm.data(), Hd, cfg_.rms_norm_eps, &normed_[i * Hd]);
    if (trace) trace->Record(fmt::format("layers.{}.ffn_norm", l), normed_.data(), {n, Hd});
    MoeForward(cfg_, L.moe, l, normed_.data(), n, branch_.data(), scratch_, trace);
    for (int64_t i = 0; i < n * Hd; ++i) hidden_[i] += branch_[i];
    if (trace) trace->Record(fmt::format("layers.{}.out", l), hidden_.data(), {n, Hd});
  }

  // Final norm and lm_head only for the rows that want logits.
  int64_t rows = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!batch.want_logits[i]) continue;
    RmsNorm(&hidden_[i * Hd], weights_.final_norm.data(), Hd, cfg_.rms_norm_eps, &normed_[rows * Hd]);
    ++rows;
  }
  if (rows == 0) return Status::Ok();
  if (trace) trace->Record("final_norm", normed_.data(), {rows, Hd});
  const size_t base = logits.size();
  logits.resize(base + static_cast<size_t>(rows * V));
  Linear(weights_.lm_head, normed_.data(), rows, logits.data() + base);
  if (trace) trace->Record("logits", logits.data() + base, {rows, V});
  return Status::Ok();
}

}  // namespace m2
