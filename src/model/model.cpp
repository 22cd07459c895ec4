// The decoder stack (transformers: MiniMaxM2Model.forward + MiniMaxM2ForCausalLM, and
// MiniMaxModel / MiniMaxDecoderLayer for the Lightning hybrids):
//   h = embed[ids]
//   per layer: n = rmsnorm(h); h = r * alpha + attn(n) * beta      (M2: r = h, alpha = beta = 1;
//              n = rmsnorm(h); h = r * alpha + moe(n) * beta        hybrids: r = n, postnorm)
//   logits = rmsnorm(h) lm_head^T
// attn is softmax attention (attention.cpp) or, in the hybrids' Lightning layers,
// Lightning attention (lightning.cpp).
// and the MTP modules (tools/train/model.py, MTPModule.forward; see model.h).
#include "model/model.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "base/progress.h"
#include "base/cpu.h"
#include "kernels/linear.h"
#include "kernels/linear_bf16.h"
#include "kernels/linear_int8.h"
#include "kernels/linear_int16.h"
#include "kernels/ops.h"

namespace m2 {

namespace {

// Gives the weights their ActivationMode for LoadOptions::activations: int8 (or int8 +
// int8 prefill) to q8 / q4 weights; int16 (int16 + bf16, int16 + int16) to q8 weights, q4
// ones then getting what bf16 gives them; bf16 prefill to bf16, FP8, q8 and q4 weights;
// int8 + bf16 both to q8 / q4 and bf16 prefill to the others. The MoE routers and the output head keep exact prefill: a
// rounded activation can flip a close choice of experts (the reference routes in fp32) and
// the routers are a tiny part of the work; a prompt's prefill computes logits for its last
// token only (decode kernels), and m2 perplexity's KL then measures the hidden states.
//
// kAuto (the default of generate, chat, serve and bench): q4 weights get int8 activations in
// decode steps and in prefill (the int8 GEMM) where this CPU runs them (the avx2 or avx512
// kernels). llama.cpp multiplies 4-bit weights with 8-bit activations by default too; what it
// costs is small next to the 4-bit weights' own cost (README, "int8 activations": a tenth to
// a fiftieth of it), and on an AVX2 machine it is the difference between 0.55x and 1.1x
// llama.cpp's Q4_0 decode. bf16, FP8 and q8 weights get bf16 prefill (activations rounded to
// bf16, 2^-9 at most; the weights exact) where that GEMM beats the fp32 one for their format
// (Bf16PrefillBeatsFp32: the tile unit for bf16 and FP8, AMD's vdpbf16ps for all three),
// and on AMD FP8 decode steps too (the bf16 decode kernel, AVX-512 VBMI and GFNI). q8 decode steps
// (and those of a q8 lm_head) get int16 activations where this CPU runs those kernels
// (linear_int16.h): each value within 2^-16 of its group's largest, KL 1.7e-6 on the
// bundled model as q8 (README, "int16 activations"; bf16 prefill's is 140 times that), and
// batched decode 1.2-1.6x faster (4-8 streams, where the exact kernel's fp32 widening
// makes decode compute-bound); and their prefill too, on the int16 GEMM, where bf16 prefill
// is not the faster (AVX2: 1.4x the fp32 GEMM, more than the int8 GEMM gives q8 there; on
// AMD's AVX-512 BF16 the bf16 GEMM is 3% ahead of it and keeps q8's prefill). FP8 weights
// that fit take the int16 GEMM for prefill where bf16's is not the faster (kInt16Prefill:
// each group converted to int16 with a power-of-two step, exact within 7 binades of its
// largest; on AVX2 1.3x the exact FP8 prefill and ahead of int8+int8; KL on the hidden-3072
// random model 6.5e-5, against int8+int8's 0.0027 and bf16 prefill's 0.00028; README, "int16
// activations"); their decode steps stay exact. bf16
// activations cost about what the bf16 KV cache costs, and for q8 weights less than the
// 8-bit weights themselves (README, "bf16 activations": KL 0.00023 on the
// bundled model against q8's own 0.00033); int8 activations would be most of q8's cost, and
// FP8's int8 prefill (int8+int8, kInt8Prefill) requantizes the weights too (KL 28x that of
// bf16 activations on the hidden-3072 random model), so neither is automatic. Everything
// else stays exact.
Status SetActivations(ModelWeights& weights, ActivationMode mode) {
  if (mode == ActivationMode::kExact) return Status::Ok();
  const auto exact_prefill = [](LinearWeight& w) {
    if (w.activations == ActivationMode::kBf16Prefill || w.activations == ActivationMode::kInt8Prefill ||
        w.activations == ActivationMode::kInt16Prefill)
      w.activations = ActivationMode::kExact;
    if (w.activations == ActivationMode::kInt8DecodeBf16Prefill || w.activations == ActivationMode::kInt8DecodeInt8Prefill)
      w.activations = ActivationMode::kInt8Decode;
    if (w.activations == ActivationMode::kInt16DecodeBf16Prefill || w.activations == ActivationMode::kInt16DecodeInt16Prefill)
      w.activations = ActivationMode::kInt16Decode;
  };
  const auto exact_prefill_heads = [&] {
    exact_prefill(weights.lm_head);
    for (LayerWeights& l : weights.layers) exact_prefill(l.moe.gate);
    for (MtpWeights& t : weights.mtp) exact_prefill(t.layer.moe.gate);
  };
  if (mode == ActivationMode::kAuto) {
    const bool int8 = Int8GemmFor(WeightFormat::kQ4) != Int8GemmKernel::kNone;
    const bool int16 = Int16KernelsAvailable();
    ForEachLinear(weights, [&](LinearWeight& w) {
      const bool bf16 = Bf16PrefillBeatsFp32(w.format);
      if (int8 && w.format == WeightFormat::kQ4) w.activations = ActivationMode::kInt8DecodeInt8Prefill;
      else if (int16 && w.format == WeightFormat::kQ8)
        w.activations = bf16 ? ActivationMode::kInt16DecodeBf16Prefill : ActivationMode::kInt16DecodeInt16Prefill;
      else if (bf16) w.activations = ActivationMode::kBf16Prefill;
      else if (int16 && Fp8FitsInt16Groups(w)) w.activations = ActivationMode::kInt16Prefill;
      else w.activations = ActivationMode::kExact;
    });
    exact_prefill_heads();
    return Status::Ok();
  }
  const bool bf16 = mode == ActivationMode::kBf16Prefill || mode == ActivationMode::kInt8DecodeBf16Prefill ||
                    mode == ActivationMode::kInt16DecodeBf16Prefill;
  const bool int8_prefill = mode == ActivationMode::kInt8DecodeInt8Prefill;
  const bool int16_prefill = mode == ActivationMode::kInt16DecodeInt16Prefill;
  const bool int16 = mode == ActivationMode::kInt16Decode || mode == ActivationMode::kInt16DecodeBf16Prefill ||
                     mode == ActivationMode::kInt16 || int16_prefill;
  const bool quant = mode != ActivationMode::kBf16Prefill;  // int8 or int16 activations for some weights
  const char* flag = int8_prefill ? "int8+int8"
                     : int16      ? (int16_prefill ? "int16+int16" : bf16 ? "int16+bf16" : "int16")
                     : bf16       ? (quant ? "int8+bf16" : "bf16")
                                  : "int8";
  if (bf16 && !Bf16GemmAvailable())
    return Error("--activations {} needs a CPU with AVX-512 BF16 (vdpbf16ps) and the avx512 kernels; this one has {} "
                 "and runs the {} kernels",
                 flag, Cpu().Describe(), IsaName(ActiveIsa()));
  int64_t quantized = 0, taken = 0;
  ForEachLinear(weights, [&](LinearWeight& w) {
    // int16 activations are for q8 weights (linear_int16.h; FP8 ones take the int16 GEMM in
    // prefill only, below); q4 ones then get what bf16 gives them.
    const bool q = w.format == WeightFormat::kQ8 || (w.format == WeightFormat::kQ4 && !int16);
    // int8+int8 prefills FP8 weights on the int8 GEMM too, int16+int16 on the int16 GEMM
    // (their decode steps stay exact).
    const bool fp8_int8 = int8_prefill && Fp8FitsInt8Groups(w);
    const bool fp8_int16 = int16_prefill && Fp8FitsInt16Groups(w);
    ActivationMode m = ActivationMode::kExact;
    if (q) m = mode;
    else if (fp8_int8) m = ActivationMode::kInt8Prefill;
    else if (fp8_int16) m = ActivationMode::kInt16Prefill;
    else if (bf16 && (w.format == WeightFormat::kBF16 || w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kQ4))
      m = ActivationMode::kBf16Prefill;
    quantized += q || fp8_int8 || fp8_int16 ? 1 : 0;
    taken += m != ActivationMode::kExact ? 1 : 0;
    w.activations = m;
  });
  if (quant && quantized == 0)
    return Error("--activations {} needs {} weights (m2 quantize){}; this checkpoint has none", flag,
                 int16 ? "q8" : "q8 or q4", int8_prefill || int16_prefill ? " or FP8 ones" : "");
  if (taken == 0) return Error("--activations bf16 needs bf16, FP8, q8 or q4 weights; this checkpoint has none");
  if (int16_prefill && Int16GemmLanes() == 0)
    return Error("--activations int16+int16 needs the avx2 or avx512 kernels (its prefill GEMM); this CPU has {} and "
                 "runs the {} kernels (--activations int16 runs int16 decode steps on any CPU)",
                 Cpu().Describe(), IsaName(ActiveIsa()));
  exact_prefill_heads();
  // Every weight left with int8 prefill needs a GEMM for its format on this CPU: q8 and q4
  // have AVX-512 VNNI, AVX-VNNI and AVX2 builds, so only the portable kernels lack one.
  Status missing = Status::Ok();
  ForEachLinear(weights, [&](LinearWeight& w) {
    if (missing.ok() &&
        (w.activations == ActivationMode::kInt8DecodeInt8Prefill || w.activations == ActivationMode::kInt8Prefill) &&
        Int8GemmFor(w.format) == Int8GemmKernel::kNone)
      missing = Error("--activations int8+int8 on {} weights needs {}; this CPU has {} and runs the {} kernels{}",
                      WeightFormatName(w.format), "the avx2 or avx512 kernels", Cpu().Describe(),
                      IsaName(ActiveIsa()),
                      w.format == WeightFormat::kFp8Block
                          ? ""
                          : " (--activations int8 runs int8 decode steps on any AVX2 CPU)");
  });
  return missing;
}

// Resolves LoadOptions::attention (model.h) for LoadOptions::activations.
Result<AttentionMath> ResolveAttention(AttentionChoice choice, ActivationMode activations) {
  if (choice == AttentionChoice::kExact) return AttentionMath::kExact;
  if (choice == AttentionChoice::kBf16) {
    if (!AttentionBf16Available())
      return Error("--attention bf16 needs a CPU with AVX-512 BF16 (vdpbf16ps) and the avx512 kernels; this one has "
                   "{} and runs the {} kernels",
                   Cpu().Describe(), IsaName(ActiveIsa()));
    return AttentionMath::kBf16;
  }
  return activations != ActivationMode::kExact && AttentionBf16Available() ? AttentionMath::kBf16
                                                                            : AttentionMath::kExact;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, const LoadOptions& opts) {
  std::unique_ptr<Model> m(new Model());
  M2_ASSIGN_OR_RETURN(m->cfg_, LoadModelConfig(path));
  {
    // Ranks of a split model read only their slices: every rank holding whole files in
    // anonymous memory would multiply the memory by the ranks on a machine, so they map.
    const bool split = opts.comm != nullptr && opts.comm->size() > 1;
    const WeightMemory memory = split && opts.weights == WeightMemory::kAuto ? WeightMemory::kMap : opts.weights;
    std::unique_ptr<Progress> p, r;
    M2_ASSIGN_OR_RETURN(m->store_, TensorStore::Open(
                                       path,
                                       [&](size_t i, size_t n) {
                                         if (!p && n > 1 && !r) p = std::make_unique<Progress>("opening shards", n, "files", opts.progress);
                                         if (p) p->Update(i);
                                       },
                                       memory,
                                       [&](uint64_t done, uint64_t total) {
                                         if (!r)
                                           r = std::make_unique<Progress>("reading weights into memory (--mmap: map them instead)",
                                                                          total, "bytes", opts.progress && total >= (uint64_t{256} << 20));
                                         r->Update(done);
                                       }));
  }
  {
    Progress p("binding weights", static_cast<uint64_t>(m->cfg_.num_hidden_layers), "layers",
               opts.progress && m->cfg_.num_hidden_layers >= 8);
    M2_ASSIGN_OR_RETURN(m->weights_, LoadModelWeights(m->cfg_, *m->store_,
                                                      [&](int64_t i, int64_t) { p.Update(static_cast<uint64_t>(i)); }));
  }
  M2_RETURN_IF_ERROR(SetActivations(m->weights_, opts.activations));
  M2_ASSIGN_OR_RETURN(m->attention_math_, ResolveAttention(opts.attention, opts.activations));
  for (LayerWeights& l : m->weights_.layers) l.attn.math = m->attention_math_;
  for (MtpWeights& t : m->weights_.mtp) t.layer.attn.math = m->attention_math_;
  if (opts.pool != nullptr) {
    m->load_pool_ = opts.pool;
  } else {
    if (opts.threads < 0) return Error("threads: expected 0 (one per core) or more, found {}", opts.threads);
    m->own_pool_ = std::make_unique<ThreadPool>(opts.threads);
    m->load_pool_ = m->own_pool_.get();
  }
  m->pool_ = m->load_pool_;
  m->inv_freq_.resize(static_cast<size_t>(m->cfg_.rotary_dim / 2));
  RopeInvFreq(m->cfg_.rope_theta, m->cfg_.rotary_dim, m->inv_freq_.data());
  m->weight_bytes_ = WeightBytesRead(m->weights_);
  if (opts.comm != nullptr && opts.comm->size() > 1) {
    Comm& comm = *opts.comm;
    const int64_t whole = m->weight_bytes_;
    auto par = std::make_unique<Parallel>();
    par->comm = &comm;
    M2_ASSIGN_OR_RETURN(par->plan, PlanShards(m->cfg_, m->weights_, comm.rank(), comm.size()));
    m->weight_bytes_ = ShardWeights(par->plan, m->cfg_, m->weights_);
    // Every rank has got this far (the plan is the same everywhere, so an error above
    // happened on every rank): the first collective.
    std::vector<int64_t> bytes(static_cast<size_t>(comm.size()));
    comm.AllGatherFixed(&m->weight_bytes_, sizeof(int64_t), bytes.data());
    if (comm.rank() == 0 && opts.progress) {
      fmt::print(stderr, "split over {} ranks ({}); weights read per step in full: {:.2f} GiB\n", comm.size(),
                 comm.name(), static_cast<double>(whole) / (1 << 30));
      for (int r = 0; r < comm.size(); ++r)
        fmt::print(stderr, "  rank {}: {:.2f} GiB ({:.0f}%): {}\n", r,
                   static_cast<double>(bytes[static_cast<size_t>(r)]) / (1 << 30),
                   100.0 * static_cast<double>(bytes[static_cast<size_t>(r)]) / static_cast<double>(whole),
                   par->plan.Describe(r));
    }
    m->par_ = std::move(par);
    if (comm.rank() == 0) m->mirror_ = std::make_shared<PoolMirror>();
  }
  return m;
}

Model::~Model() {
  if (par_ && par_->plan.rank == 0) {  // the other ranks' Follow() returns
    int64_t bytes = 8;
    int32_t stop[2] = {kShutdown, 0};
    par_->comm->Broadcast(&bytes, sizeof bytes, 0);
    par_->comm->Broadcast(stop, bytes, 0);
  }
}

void Model::SetPool(ThreadPool* pool) { pool_ = pool != nullptr ? pool : load_pool_; }

CacheLayout Model::cache_layout(int64_t block_tokens, bool with_mtp, KvDtype kv_dtype) const {
  CacheLayout l;
  l.block_tokens = block_tokens;
  l.kv_dtype = kv_dtype;
  const int64_t layers = cfg_.num_hidden_layers + (with_mtp ? num_mtp_modules() : 0);
  for (int64_t i = 0; i < layers; ++i) {
    if (i < cfg_.num_hidden_layers && cfg_.layer_type(i) == LayerType::kLightning)
      l.layers.push_back({LayerCacheKind::kRecurrentState, 0, 0, cfg_.lightning_state_floats()});
    else
      l.layers.push_back({LayerCacheKind::kKeyValue, kv_heads_here(), cfg_.head_dim, 0});
  }
  return l;
}

Status Model::CheckCacheLayout(const SequenceCache& cache, size_t index, int64_t layers) const {
  const auto& have = cache.layout().layers;
  if (static_cast<int64_t>(have.size()) < layers)
    return Error("cache {} has {} layers, but this needs {} (make its pool with Model::cache_layout(){})", index,
                 have.size(), layers, layers > cfg_.num_hidden_layers ? ", which includes the MTP modules" : "");
  for (int64_t l = 0; l < layers; ++l) {
    const LayerCacheSpec& s = have[static_cast<size_t>(l)];
    if (l < cfg_.num_hidden_layers && cfg_.layer_type(l) == LayerType::kLightning) {
      if (s.kind != LayerCacheKind::kRecurrentState || s.state_floats != cfg_.lightning_state_floats())
        return Error("cache {} layer {}: expected a Lightning state of {} floats, found {}", index, l,
                     cfg_.lightning_state_floats(),
                     s.kind == LayerCacheKind::kKeyValue ? std::string("keys and values")
                                                         : fmt::format("a state of {} floats", s.state_floats));
      continue;
    }
    if (s.kind != LayerCacheKind::kKeyValue || s.kv_heads != kv_heads_here() || s.head_dim != cfg_.head_dim)
      return Error("cache {} layer {}: expected keys and values of {} heads x {}, found {}", index, l,
                   kv_heads_here(), cfg_.head_dim,
                   s.kind == LayerCacheKind::kKeyValue ? fmt::format("{} heads x {}", s.kv_heads, s.head_dim)
                                                       : std::string("a recurrent state"));
  }
  return Status::Ok();
}

void Model::BuildSeqViews(std::span<SequenceCache* const> caches) {
  seq_views_.resize(caches.size());
  for (size_t c = 0; c < caches.size(); ++c) seq_views_[c] = {caches[c]->pool(), caches[c]->block_table().data()};
}

void Model::RunLayer(const LayerWeights& L, int64_t l, const std::vector<TokenSlot>& slots, Tracer* trace) {
  const int64_t n = static_cast<int64_t>(slots.size()), Hd = cfg_.hidden_size;
  // The residual: the layer's input (M2), or its normed input (postnorm: the hybrids).
  const float* residual = cfg_.postnorm ? normed_.data() : hidden_.data();
  const bool lightning = L.type == LayerType::kLightning;
  const auto attn_alpha = static_cast<float>(lightning ? cfg_.lightning_alpha : cfg_.softmax_alpha);
  const auto attn_beta = static_cast<float>(lightning ? cfg_.lightning_beta : cfg_.softmax_beta);
  for (int64_t i = 0; i < n; ++i)
    RmsNorm(&hidden_[i * Hd], L.input_norm.data(), Hd, cfg_.rms_norm_eps, &normed_[i * Hd]);
  if (trace) trace->Record(fmt::format("layers.{}.attn_norm", l), normed_.data(), {n, Hd});
  if (lightning)
    LightningForward(cfg_, L.lightning, l, normed_.data(), slots, branch_.data(), scratch_, *pool_, trace);
  else
    AttentionForward(cfg_, L.attn, l, inv_freq_.data(), normed_.data(), slots, seq_views_, branch_.data(), scratch_,
                     *pool_, par_.get(), trace);
  if (trace) trace->Record(fmt::format("layers.{}.attn_out", l), branch_.data(), {n, Hd});
  WeightedSum(residual, attn_alpha, branch_.data(), attn_beta, n * Hd, hidden_.data());

  for (int64_t i = 0; i < n; ++i)
    RmsNorm(&hidden_[i * Hd], L.post_attention_norm.data(), Hd, cfg_.rms_norm_eps, &normed_[i * Hd]);
  if (trace) trace->Record(fmt::format("layers.{}.ffn_norm", l), normed_.data(), {n, Hd});
  MoeForward(cfg_, L.moe, l, normed_.data(), n, branch_.data(), scratch_, *pool_, par_.get(), trace);
  WeightedSum(residual, static_cast<float>(cfg_.mlp_alpha), branch_.data(), static_cast<float>(cfg_.mlp_beta), n * Hd,
              hidden_.data());
  if (trace) trace->Record(fmt::format("layers.{}.out", l), hidden_.data(), {n, Hd});
}

Status Model::Forward(const ForwardBatch& batch, std::span<SequenceCache* const> caches, std::vector<float>& logits,
                      Tracer* trace) {
  std::vector<float> unused;
  return Forward(batch, caches, logits, unused, trace);
}

Status Model::Forward(const ForwardBatch& batch, std::span<SequenceCache* const> caches, std::vector<float>& logits,
                      std::vector<float>& hidden, Tracer* trace) {
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t V = cfg_.vocab_size;
  if (batch.seq.size() != batch.tokens.size() || batch.want_logits.size() != batch.tokens.size())
    return Error("forward batch: tokens ({}), seq ({}) and want_logits ({}) must have the same length",
                 batch.tokens.size(), batch.seq.size(), batch.want_logits.size());
  if (!batch.want_hidden.empty() && batch.want_hidden.size() != batch.tokens.size())
    return Error("forward batch: want_hidden has {} flags for {} tokens (expected none or one per token)",
                 batch.want_hidden.size(), batch.tokens.size());
  if (n == 0) return Status::Ok();

  // Validate everything before touching any cache.
  auto& next = seq_next_;
  auto& old = seq_old_;
  next.assign(caches.size(), 0);
  old.assign(caches.size(), 0);
  for (size_t c = 0; c < caches.size(); ++c) {
    if (caches[c] == nullptr) return Error("forward batch: cache {} is null", c);
    for (size_t d = 0; d < c; ++d)
      if (caches[d] == caches[c]) return Error("forward batch: caches {} and {} are the same object", d, c);
    M2_RETURN_IF_ERROR(CheckCacheLayout(*caches[c], c, cfg_.num_hidden_layers));
    old[c] = next[c] = caches[c]->length();
  }
  auto& slots = slots_;
  slots.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok = batch.tokens[i], sq = batch.seq[i];
    if (tok < 0 || tok >= V) return Error("token id {} at batch index {} is outside the vocabulary [0, {})", tok, i, V);
    if (sq < 0 || static_cast<size_t>(sq) >= caches.size())
      return Error("batch index {} names sequence {}, but {} caches were given", i, sq, caches.size());
    slots[i] = {caches[sq], next[sq]++, sq};
    if (slots[i].pos >= cfg_.max_position_embeddings)
      return Error("sequence {} would reach position {}, past the model's max_position_embeddings {}", sq,
                   slots[i].pos, cfg_.max_position_embeddings);
  }
  for (size_t c = 0; c < caches.size(); ++c) {
    if (next[c] == caches[c]->length()) continue;
    Status st = caches[c]->Extend(next[c]);
    if (!st.ok()) {  // the pool ran out: give back what this call took
      for (size_t u = 0; u < c; ++u) caches[u]->UndoExtend(old[u]);
      return st;
    }
  }
  for (size_t c = 0; c < caches.size(); ++c)
    if (next[c] != old[c])
      for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) caches[c]->set_filled(l, next[c]);
  BuildSeqViews(caches);
  if (par_) Announce(kTrunk, 0, batch.tokens, batch.want_logits, caches, {});
  RunTrunk(batch.tokens.data(), batch.want_logits.data(), batch.want_hidden.empty() ? nullptr : batch.want_hidden.data(),
           n, logits, &hidden, trace);
  return Status::Ok();
}

void Model::RunTrunk(const int32_t* tokens, const uint8_t* want_logits, const uint8_t* want_hidden, int64_t n,
                     std::vector<float>& logits, std::vector<float>* hidden, Tracer* trace) {
  const auto t0 = std::chrono::steady_clock::now();
  const double comm0 = CommSeconds();
  const int64_t Hd = cfg_.hidden_size, V = cfg_.vocab_size;
  hidden_.resize(static_cast<size_t>(n * Hd));
  normed_.resize(static_cast<size_t>(n * Hd));
  branch_.resize(static_cast<size_t>(n * Hd));
  for (int64_t i = 0; i < n; ++i) DequantizeRow(weights_.embed, tokens[i], &hidden_[i * Hd]);
  if (trace) trace->Record("embed", hidden_.data(), {n, Hd});

  scratch_.experts_run = 0;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) RunLayer(weights_.layers[l], l, slots_, trace);

  // The last hidden state (h^0 for MTP) of the rows that want it, before the final norm.
  if (want_hidden != nullptr && hidden != nullptr)
    for (int64_t i = 0; i < n; ++i)
      if (want_hidden[i]) hidden->insert(hidden->end(), &hidden_[i * Hd], &hidden_[(i + 1) * Hd]);

  // Final norm and lm_head only for the rows that want logits.
  int64_t rows = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!want_logits[i]) continue;
    RmsNorm(&hidden_[i * Hd], weights_.final_norm.data(), Hd, cfg_.rms_norm_eps, &normed_[rows * Hd]);
    ++rows;
  }
  if (rows > 0) {
    if (trace) trace->Record("final_norm", normed_.data(), {rows, Hd});
    const size_t base = logits.size();
    logits.resize(base + static_cast<size_t>(rows * V));
    LmHead(normed_.data(), rows, logits.data() + base);
    if (trace) trace->Record("logits", logits.data() + base, {rows, V});
  }
  CountForward(t0, comm0);
}

void Model::CountForward(std::chrono::steady_clock::time_point t0, double comm0) {
  ++forwards_;
  forward_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  forward_comm_seconds_ += CommSeconds() - comm0;
}

void Model::LmHead(const float* normed, int64_t rows, float* out) {
  if (!par_) {
    LinearOnPool(weights_.lm_head, normed, rows, out, *pool_);
    return;
  }
  part_logits_.resize(static_cast<size_t>(rows * weights_.lm_head.rows));
  if (weights_.lm_head.rows > 0) LinearOnPool(weights_.lm_head, normed, rows, part_logits_.data(), *pool_);
  // Only rank 0 samples: the others' logits stay unset.
  par_->GatherColumns(part_logits_.data(), rows, par_->plan.vocab_first, out, /*root=*/0);
}

Status Model::ForwardMtp(int64_t module, const MtpBatch& batch, std::span<const float> hidden_in,
                         std::span<SequenceCache* const> caches, std::vector<float>& logits,
                         std::vector<float>& hidden_out, Tracer* trace) {
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t Hd = cfg_.hidden_size, V = cfg_.vocab_size;
  if (weights_.mtp.empty()) return Error("this model has no MTP modules ({})", weights_.mtp_status);
  if (module < 0 || module >= num_mtp_modules())
    return Error("MTP module {} does not exist: the model has modules 0..{}", module, num_mtp_modules() - 1);
  if (batch.seq.size() != batch.tokens.size() || batch.pos.size() != batch.tokens.size() ||
      batch.want_logits.size() != batch.tokens.size())
    return Error("MTP batch: tokens ({}), seq ({}), pos ({}) and want_logits ({}) must have the same length",
                 batch.tokens.size(), batch.seq.size(), batch.pos.size(), batch.want_logits.size());
  if (hidden_in.size() != static_cast<size_t>(n * Hd))
    return Error("MTP batch: hidden_in has {} floats, expected {} rows x hidden {} = {}", hidden_in.size(), n, Hd,
                 n * Hd);
  if (n == 0) return Status::Ok();
  const int64_t layer = mtp_cache_layer(module);

  // Validate everything before touching any cache.
  auto& first = seq_first_;
  auto& next = seq_next_;
  first.assign(caches.size(), -1);
  next.assign(caches.size(), -1);
  for (size_t c = 0; c < caches.size(); ++c) {
    if (caches[c] == nullptr) return Error("MTP batch: cache {} is null", c);
    for (size_t d = 0; d < c; ++d)
      if (caches[d] == caches[c]) return Error("MTP batch: caches {} and {} are the same object", d, c);
    M2_RETURN_IF_ERROR(CheckCacheLayout(*caches[c], c, layer + 1));
  }
  auto& slots = slots_;
  slots.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok = batch.tokens[i], sq = batch.seq[i];
    const int64_t pos = batch.pos[i];
    if (tok < 0 || tok >= V) return Error("token id {} at MTP batch index {} is outside the vocabulary [0, {})", tok, i, V);
    if (sq < 0 || static_cast<size_t>(sq) >= caches.size())
      return Error("MTP batch index {} names sequence {}, but {} caches were given", i, sq, caches.size());
    const SequenceCache& c = *caches[sq];
    if (next[sq] < 0) {
      if (pos < 0 || pos > c.filled(layer))
        return Error("MTP module {}: sequence {} starts at position {}, but its module cache is filled up to {} (a "
                     "sequence's first row must be at a position in [0, {}])",
                     module, sq, pos, c.filled(layer), c.filled(layer));
      first[sq] = pos;
    } else if (pos != next[sq]) {
      return Error("MTP module {}: MTP batch index {} of sequence {} is at position {}, expected {} (a sequence's rows "
                   "are consecutive positions)",
                   module, i, sq, pos, next[sq]);
    }
    if (pos >= c.length())
      return Error("MTP module {}: sequence {} position {} is past what the trunk has run ({} positions); module k at "
                   "position i needs the trunk's hidden state there",
                   module, sq, pos, c.length());
    next[sq] = pos + 1;
    slots[i] = {caches[sq], pos, sq};
  }
  // Positions below length() may sit in blocks shared with a fork: copy those first.
  for (size_t c = 0; c < caches.size(); ++c)
    if (first[c] >= 0) M2_RETURN_IF_ERROR(caches[c]->Unshare(first[c], next[c]));
  BuildSeqViews(caches);
  if (par_) Announce(kMtp, static_cast<int32_t>(module), batch.tokens, batch.want_logits, caches, hidden_in);
  RunMtp(module, batch.tokens.data(), hidden_in.data(), batch.want_logits.data(), n, logits, hidden_out, trace);
  for (size_t c = 0; c < caches.size(); ++c)
    if (first[c] >= 0) caches[c]->set_filled(layer, next[c]);
  return Status::Ok();
}

void Model::RunMtp(int64_t module, const int32_t* tokens, const float* hidden_in, const uint8_t* want_logits, int64_t n,
                   std::vector<float>& logits, std::vector<float>& hidden_out, Tracer* trace) {
  const auto t0 = std::chrono::steady_clock::now();
  const double comm0 = CommSeconds();
  const int64_t Hd = cfg_.hidden_size, V = cfg_.vocab_size;
  const int64_t layer = mtp_cache_layer(module);
  const MtpWeights& w = weights_.mtp[static_cast<size_t>(module)];
  const auto name = [&](const char* stage) { return fmt::format("mtp.{}.{}", module, stage); };
  // [hnorm(h^k) ; enorm(embed[t])]: [n, 2*hidden], hidden first (torch.cat order in MTPModule.forward).
  mtp_in_.resize(static_cast<size_t>(n * 2 * Hd));
  embed_row_.resize(static_cast<size_t>(Hd));
  for (int64_t i = 0; i < n; ++i) {
    RmsNorm(&hidden_in[i * Hd], w.hnorm.data(), Hd, cfg_.rms_norm_eps, &mtp_in_[i * 2 * Hd]);
    DequantizeRow(weights_.embed, tokens[i], embed_row_.data());
    RmsNorm(embed_row_.data(), w.enorm.data(), Hd, cfg_.rms_norm_eps, &mtp_in_[i * 2 * Hd + Hd]);
  }
  if (trace) trace->Record(name("eh_in"), mtp_in_.data(), {n, 2 * Hd});
  hidden_.resize(static_cast<size_t>(n * Hd));
  normed_.resize(static_cast<size_t>(n * Hd));
  branch_.resize(static_cast<size_t>(n * Hd));
  LinearOnPool(w.eh_proj, mtp_in_.data(), n, hidden_.data(), *pool_);  // z [n, hidden]
  if (trace) trace->Record(name("eh_proj"), hidden_.data(), {n, Hd});

  RunLayer(w.layer, layer, slots_, trace);  // h^{k+1} [n, hidden], in hidden_
  hidden_out.insert(hidden_out.end(), hidden_.begin(), hidden_.begin() + n * Hd);

  // The module's own final norm, then the shared lm_head, for the rows that want logits.
  int64_t rows = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!want_logits[i]) continue;
    RmsNorm(&hidden_[i * Hd], w.final_norm.data(), Hd, cfg_.rms_norm_eps, &normed_[rows * Hd]);
    ++rows;
  }
  if (rows > 0) {
    if (trace) trace->Record(name("final_norm"), normed_.data(), {rows, Hd});
    const size_t base = logits.size();
    logits.resize(base + static_cast<size_t>(rows * V));
    LmHead(normed_.data(), rows, logits.data() + base);
    if (trace) trace->Record(name("logits"), logits.data() + base, {rows, V});
  }
  CountForward(t0, comm0);
}

void Model::TruncateMtp(SequenceCache& cache, int64_t kept_tokens) const {
  const auto layers = static_cast<int64_t>(cache.layout().layers.size());
  for (int64_t k = 0; k < num_mtp_modules() && mtp_cache_layer(k) < layers; ++k) {
    const int64_t l = mtp_cache_layer(k);
    cache.set_filled(l, std::clamp<int64_t>(kept_tokens - k - 1, 0, cache.filled(l)));
  }
}

}  // namespace m2
