#include "runtime/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "base/cpu.h"

namespace m2::runtime {

namespace {

// Sums within 1e-6 of top_p count as reaching it: probabilities come from float logits
// (relative error ~6e-8 each), so a cutoff that falls exactly on a boundary in exact
// arithmetic (0.4 + 0.3 for top_p 0.7) must not depend on the last bits.
constexpr double kTopPSlack = 1e-6;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr int64_t kHeavyCap = 4096;

bool Finite(double v) { return std::isfinite(v); }

// The order the steps walk: larger x first, lower id first on ties.
template <class C>
bool Before(const C& a, const C& b) {
  return a.x > b.x || (a.x == b.x && a.id < b.id);
}

// Passes over the row with GCC vector extensions: 16-byte vectors, and 32-byte ones for the
// maximum and the softmax sum where the CPU has AVX2.
template <int kBytes>
struct Vec {
  typedef float F __attribute__((vector_size(kBytes)));
  typedef int32_t I __attribute__((vector_size(kBytes)));
  typedef double D __attribute__((vector_size(kBytes)));
  typedef int64_t L __attribute__((vector_size(kBytes)));
  typedef float HalfF __attribute__((vector_size(kBytes / 2)));  // as many as D has lanes
  typedef int32_t HalfI __attribute__((vector_size(kBytes / 2)));
  static constexpr int kFloats = kBytes / 4, kDoubles = kBytes / 8;
};
using V16 = Vec<16>;

template <class I>
[[gnu::always_inline]] inline bool AnyLane(const I& m) {
  uint64_t w[sizeof(I) / 8];
  std::memcpy(w, &m, sizeof w);
  uint64_t any = 0;
  for (uint64_t v : w) any |= v;
  return any != 0;
}

// The lowest id of the largest key; -1 when every key is NaN or -inf.
template <int kBytes>
[[gnu::always_inline]] inline int64_t ArgMaxBody(const float* k, int64_t n) {
  using F = typename Vec<kBytes>::F;
  using I = typename Vec<kBytes>::I;
  constexpr int w = Vec<kBytes>::kFloats, kChains = 4;
  F m[kChains];
  I best[kChains], idx;
  for (int q = 0; q < kChains; ++q) {
    m[q] = F{} - kInfF;
    best[q] = I{} - 1;
  }
  for (int j = 0; j < w; ++j) idx[j] = j;
  int64_t i = 0;
  for (; i + kChains * w <= n; i += kChains * w, idx += kChains * w)
    for (int q = 0; q < kChains; ++q) {
      F v;
      std::memcpy(&v, k + i + q * w, sizeof v);
      const I gt = v > m[q];
      m[q] = gt ? v : m[q];
      best[q] = gt ? idx + q * w : best[q];
    }
  float bv = -kInfF;
  int64_t bi = -1;
  for (int q = 0; q < kChains; ++q)
    for (int j = 0; j < w; ++j)
      if (best[q][j] >= 0 && (m[q][j] > bv || (m[q][j] == bv && best[q][j] < bi))) {
        bv = m[q][j];
        bi = best[q][j];
      }
  for (; i < n; ++i)
    if (k[i] > bv) {
      bv = k[i];
      bi = i;
    }
  return bi;
}

int64_t ArgMaxPortable(const float* k, int64_t n) { return ArgMaxBody<16>(k, n); }
#if defined(__x86_64__)
[[gnu::target("avx2")]] int64_t ArgMaxAvx2(const float* k, int64_t n) { return ArgMaxBody<32>(k, n); }
#endif

bool UseAvx2() {
#if defined(__x86_64__)
  static const bool avx2 = ActiveIsa() != KernelIsa::kPortable;
  return avx2;
#else
  return false;
#endif
}

int64_t ArgMax(const float* k, int64_t n) {
#if defined(__x86_64__)
  if (UseAvx2()) return ArgMaxAvx2(k, n);
#endif
  return ArgMaxPortable(k, n);
}

// Calls f(i), in order, for each i with hit(k[i]); vec_hit(4 keys) gives the lanes that
// hit. Both may depend on state f changes.
template <class VecHit, class Hit, class Fn>
void Scan(const float* k, int64_t n, VecHit&& vec_hit, Hit&& hit, Fn&& f) {
  using F = V16::F;
  constexpr int w = V16::kFloats;
  int64_t i = 0;
  for (; i + 2 * w <= n; i += 2 * w) {
    F a, b;
    std::memcpy(&a, k + i, sizeof a);
    std::memcpy(&b, k + i + w, sizeof b);
    if (AnyLane(vec_hit(a) | vec_hit(b)))
      for (int j = 0; j < 2 * w; ++j)
        if (hit(k[i + j])) f(i + j);
  }
  for (; i < n; ++i)
    if (hit(k[i])) f(i);
}

// Float bounds around key = x * t, wider than the rounding between key / t and x: a scan
// with them finds every token an exact test on x may take.
float KeyBelow(double v) {
  const double low = v - 1e-6 * std::fabs(v) - 1e-30;
  if (low < -FLT_MAX) return -kInfF;
  const float f = static_cast<float>(std::min(low, double{FLT_MAX}));
  return f > low ? std::nextafter(f, -kInfF) : f;
}
float KeyAbove(double v) {
  const double high = v + 1e-6 * std::fabs(v) + 1e-30;
  if (high > FLT_MAX) return kInfF;
  const float f = static_cast<float>(std::max(high, -double{FLT_MAX}));
  return f < high ? std::nextafter(f, kInfF) : f;
}

// exp(d) in place for d <= 0, within 1e-14 relative; 0 for d <= -700, -inf and NaN.
// Cody-Waite reduction by ln 2, then the Taylor polynomial of degree 11 (|r| <= ln2 / 2).
template <class D, class L>
[[gnu::always_inline]] inline void ExpNonPositive(D& d) {
  const L ok = d > -700.0;
  d = ok ? d : D{};
  const D t = d * 1.4426950408889634 + 0x1.8p52;  // k = round(d / ln2) in the low bits
  const D k = t - 0x1.8p52;
  const D r = (d - k * 0x1.62e42fee00000p-1) - k * 0x1.a39ef35793c76p-33;
  const D r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
  const D a = 1.0 + r, b = 1.0 / 2 + r * (1.0 / 6), c = 1.0 / 24 + r * (1.0 / 120);
  const D e = 1.0 / 720 + r * (1.0 / 5040), f = 1.0 / 40320 + r * (1.0 / 362880);
  const D g = 1.0 / 3628800 + r * (1.0 / 39916800);
  const D p = (a + r2 * b + r4 * (c + r2 * e)) + r8 * (f + r2 * g);
  const D scale = (D)(((L)t << 52) + (int64_t{1023} << 52));  // 2^k
  d = (D)((L)(p * scale) & ok);
}

// Told of every token whose x exceeds *bound during the softmax pass (add may raise *bound).
struct HitSink {
  void (*add)(void* ctx, int64_t id, double x);
  void* ctx;
  const double* bound;
};

// The softmax pass goes by blocks of 1024 tokens: each block's largest x is found while the
// block is in cache, and its exp are taken relative to ref = the largest x so far.
constexpr int kBlockShift = 10;
constexpr int64_t kBlock = int64_t{1} << kBlockShift;
struct Blocks {
  double* ref;     // per block: the reference x
  double* sum;     // per block: its exp summed (4 lanes, i mod 4)
  float* key_max;  // per block: its largest key (-inf if none)
};

// For x = k[i] / t: out[i] = exp(x - ref of its block) (0 for NaN keys), `blocks` filled;
// returns the largest x (or `largest` if larger).
template <int kBytes, bool kDivide>
[[gnu::always_inline]] inline double ExpBlocksBody(const float* k, int64_t n, double t, double largest, double* out,
                                                   const Blocks& blocks, const HitSink& sink) {
  using F = typename Vec<kBytes>::F;
  using D = typename Vec<kBytes>::D;
  using L = typename Vec<kBytes>::L;
  using H = typename Vec<kBytes>::HalfF;
  constexpr int wf = Vec<kBytes>::kFloats, w = Vec<kBytes>::kDoubles, parts = 4 / w;
  for (int64_t block = 0; block < n; block += kBlock) {
    const int64_t end = std::min(n, block + kBlock);
    F m0 = F{} - kInfF, m1 = m0;
    int64_t i = block;
    for (; i + 2 * wf <= end; i += 2 * wf) {
      F a, b;
      std::memcpy(&a, k + i, sizeof a);
      std::memcpy(&b, k + i + wf, sizeof b);
      m0 = a > m0 ? a : m0;
      m1 = b > m1 ? b : m1;
    }
    m0 = m1 > m0 ? m1 : m0;
    float key_max = -kInfF;
    for (int j = 0; j < wf; ++j) key_max = std::max(key_max, m0[j]);
    for (; i < end; ++i) key_max = k[i] > key_max ? k[i] : key_max;
    const int64_t b = block >> kBlockShift;
    blocks.key_max[b] = key_max;
    largest = std::max(largest, kDivide ? key_max / t : double{key_max});
    blocks.ref[b] = largest;
    if (largest == -kInf) {  // nothing above -inf so far: all 0
      std::fill(out + block, out + end, 0.0);
      blocks.sum[b] = 0;
      continue;
    }
    D acc[parts] = {};
    for (i = block; i + 4 <= end; i += 4)
      for (int q = 0; q < parts; ++q) {
        H h;
        std::memcpy(&h, k + i + q * w, sizeof h);
        D x = __builtin_convertvector(h, D);
        if constexpr (kDivide) x = x / t;
        const L hit = x > *sink.bound;
        if (AnyLane(hit)) [[unlikely]]
          for (int j = 0; j < w; ++j)
            if (hit[j]) sink.add(sink.ctx, i + q * w + j, x[j]);
        D d = x - largest;
        ExpNonPositive<D, L>(d);
        std::memcpy(out + i + q * w, &d, sizeof d);
        acc[q] += d;
      }
    for (int lane = 0; i < end; ++i, ++lane) {
      const double x = kDivide ? k[i] / t : k[i];
      if (x > *sink.bound) sink.add(sink.ctx, i, x);
      D d = D{} - kInf;
      d[0] = x - largest;
      ExpNonPositive<D, L>(d);
      out[i] = d[0];
      acc[lane / w][lane % w] += d[0];
    }
    double lanes[4];
    std::memcpy(lanes, acc, sizeof lanes);
    blocks.sum[b] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
  return largest;
}

double ExpBlocksPortable(const float* k, int64_t n, double t, double largest, double* out, const Blocks& blocks,
                         const HitSink& sink) {
  return t == 1 ? ExpBlocksBody<16, false>(k, n, t, largest, out, blocks, sink)
                : ExpBlocksBody<16, true>(k, n, t, largest, out, blocks, sink);
}

#if defined(__x86_64__)
// With FMA: the sums can differ from the portable ones in the last bits.
[[gnu::target("avx2,fma")]] double ExpBlocksAvx2(const float* k, int64_t n, double t, double largest, double* out,
                                                 const Blocks& blocks, const HitSink& sink) {
  return t == 1 ? ExpBlocksBody<32, false>(k, n, t, largest, out, blocks, sink)
                : ExpBlocksBody<32, true>(k, n, t, largest, out, blocks, sink);
}
#endif

double ExpBlocks(const float* k, int64_t n, double t, double largest, double* out, const Blocks& blocks,
                 const HitSink& sink) {
#if defined(__x86_64__)
  if (UseAvx2()) return ExpBlocksAvx2(k, n, t, largest, out, blocks, sink);
#endif
  return ExpBlocksPortable(k, n, t, largest, out, blocks, sink);
}

// Over the tokens of the softmax pass: returns the sum of e[i] * scale[block of i] for keys
// above `above`, and calls band(ctx, i) for keys in [low, above] (NaN keys: neither).
struct BandSink {
  void (*band)(void* ctx, int64_t id);
  void* ctx;
};

template <int kBytes>
[[gnu::always_inline]] inline double MassAboveBody(const float* k, const double* e, const double* scale, int64_t n,
                                                   float low, float above, const BandSink& sink) {
  using D = typename Vec<kBytes>::D;
  using L = typename Vec<kBytes>::L;
  using H = typename Vec<kBytes>::HalfF;
  constexpr int w = Vec<kBytes>::kDoubles;
  double total = 0;
  for (int64_t block = 0; block < n; block += kBlock) {
    const int64_t end = std::min(n, block + kBlock);
    D acc = {};
    int64_t i = block;
    for (; i + w <= end; i += w) {
      H h;
      std::memcpy(&h, k + i, sizeof h);
      const D key = __builtin_convertvector(h, D);
      D v;
      std::memcpy(&v, e + i, sizeof v);
      const L up = key > double{above};
      acc += (D)((L)v & up);
      const L in = (key >= double{low}) & ~up;
      if (AnyLane(in)) [[unlikely]]
        for (int j = 0; j < w; ++j)
          if (in[j]) sink.band(sink.ctx, i + j);
    }
    double sum = 0;
    for (int j = 0; j < w; ++j) sum += acc[j];
    for (; i < end; ++i) {
      if (k[i] > above)
        sum += e[i];
      else if (k[i] >= low)
        sink.band(sink.ctx, i);
    }
    total += sum * scale[block >> kBlockShift];
  }
  return total;
}

double MassAbovePortable(const float* k, const double* e, const double* scale, int64_t n, float low, float above,
                         const BandSink& sink) {
  return MassAboveBody<16>(k, e, scale, n, low, above, sink);
}

#if defined(__x86_64__)
[[gnu::target("avx2")]] double MassAboveAvx2(const float* k, const double* e, const double* scale, int64_t n,
                                             float low, float above, const BandSink& sink) {
  return MassAboveBody<32>(k, e, scale, n, low, above, sink);
}
#endif

double MassAbove(const float* k, const double* e, const double* scale, int64_t n, float low, float above,
                 const BandSink& sink) {
#if defined(__x86_64__)
  if (UseAvx2()) return MassAboveAvx2(k, e, scale, n, low, above, sink);
#endif
  return MassAbovePortable(k, e, scale, n, low, above, sink);
}

}  // namespace

Status SamplingParams::Validate() const {
  if (!Finite(temperature) || temperature < 0)
    return Error("temperature: expected a number >= 0 (0 = greedy), found {}", temperature);
  if (top_k < 0) return Error("top_k: expected an integer >= 0 (0 = off), found {}", top_k);
  if (!Finite(top_p) || top_p <= 0 || top_p > 1)
    return Error("top_p: expected a number in (0, 1] (1 = off), found {}", top_p);
  if (!Finite(min_p) || min_p < 0 || min_p > 1)
    return Error("min_p: expected a number in [0, 1] (0 = off), found {}", min_p);
  if (!Finite(repetition_penalty) || repetition_penalty <= 0)
    return Error("repetition_penalty: expected a number > 0 (1 = off), found {}", repetition_penalty);
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  const Status s = params.Validate();
  M2_CHECK(s.ok(), "{}", s.message());
}

void Sampler::Reseed(uint64_t seed) {
  params_.seed = seed;
  rng_.seed(seed);
}

const float* Sampler::Penalize(std::span<const float> logits, std::span<const int32_t> context) {
  penalized_.clear();
  if (params_.repetition_penalty == 1.0 || context.empty()) return logits.data();
  if (seen_.size() != logits.size()) seen_.assign(logits.size(), 0);
  for (int32_t id : context) {
    if (id < 0 || id >= n_ || seen_[id]) continue;
    seen_[id] = 1;
    // A NaN logit (a broken model) must not poison the sums: it is never chosen.
    double l = logits[id];
    if (std::isnan(l)) l = -kInf;
    l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    penalized_.push_back({0, l, id});
  }
  for (const Candidate& c : penalized_) seen_[c.id] = 0;
  if (penalized_.empty()) return logits.data();
  keys_.assign(logits.begin(), logits.end());
  for (const Candidate& c : penalized_) keys_[c.id] = std::numeric_limits<float>::quiet_NaN();
  return keys_.data();
}

int32_t Sampler::Greedy() const {
  // The largest penalized logit, the lowest id on ties; every one -inf or NaN: id 0.
  const int64_t i = ArgMax(row_, n_);
  double best = i >= 0 ? row_[i] : -kInf;
  int64_t id = i >= 0 ? i : 0;
  for (const Candidate& c : penalized_)
    if (c.p > best || (c.p == best && c.id < id)) {
      best = c.p;
      id = c.id;
    }
  return best == -kInf ? 0 : static_cast<int32_t>(id);
}

void Sampler::BuildAll() {
  const double t = params_.temperature;
  all_.resize(n_);
  for (int64_t i = 0; i < n_; ++i) {
    const double l = row_[i];
    all_[i] = {std::isnan(l) ? -kInf : l / t, 0, static_cast<int32_t>(i)};
  }
  for (const Candidate& c : penalized_) all_[c.id].x = c.x;
}

double Sampler::E(int64_t id) const { return exp_[id] * scale_[id >> kBlockShift]; }

void Sampler::SetP() {
  for (Candidate& c : candidates_) c.p = have_exp_ ? E(c.id) / sum_ : std::exp(c.x - x_max_);
}

void Sampler::Normalize() {
  double sum = 0;
  for (const Candidate& c : candidates_) sum += c.p;
  for (Candidate& c : candidates_) c.p /= sum;
}

void Sampler::CollectAll() {
  if (all_.empty()) BuildAll();
  candidates_ = all_;
  SetP();
}

void Sampler::Collect(double threshold) {
  candidates_.clear();
  if (!by_row_) {
    if (all_.empty()) BuildAll();
    for (const Candidate& c : all_)
      if (c.x >= threshold) candidates_.push_back(c);
  } else {
    using F = V16::F;
    const double t = params_.temperature;
    const float low = KeyBelow(threshold * t);
    Scan(
        row_, n_, [&](F v) { return v >= low; }, [&](float v) { return v >= low; },
        [&](int64_t i) {
          const double x = t == 1 ? row_[i] : row_[i] / t;
          if (x >= threshold) candidates_.push_back({x, 0, static_cast<int32_t>(i)});
        });
    for (const Candidate& c : penalized_)
      if (c.x >= threshold) candidates_.push_back(c);
  }
  SetP();
}

double Sampler::HeavyBound() {
  // x of every (n / 1024)-th token.
  sample_.clear();
  sample_sorted_ = false;
  const double t = params_.temperature;
  for (int64_t i = 0; i < n_ && sample_.size() < 1024; i += sample_step_)
    if (!std::isnan(row_[i])) sample_.push_back(row_[i] / t);
  const int64_t count = static_cast<int64_t>(sample_.size());
  const int64_t rank = kHeavyCap / 2 * count / n_;
  if (n_ <= kHeavyCap / 2 || rank >= count) return -kInf;
  std::nth_element(sample_.begin(), sample_.begin() + rank, sample_.end(), std::greater<double>());
  return sample_[rank];
}

void Sampler::AddHeavy(int32_t id, double x) {
  heavy_.push_back({x, 0, id});
  if (static_cast<int64_t>(heavy_.size()) < kHeavyCap) return;
  // Full: keep the half above the median, which becomes the bound.
  const auto mid = heavy_.begin() + kHeavyCap / 2;
  std::nth_element(heavy_.begin(), mid, heavy_.end(), [](const Candidate& a, const Candidate& b) { return a.x > b.x; });
  heavy_bound_ = mid->x;
  std::erase_if(heavy_, [&](const Candidate& c) { return !(c.x > heavy_bound_); });
}

void Sampler::Softmax(bool collect_heavy) {
  const double t = params_.temperature;
  const int64_t blocks = (n_ + kBlock - 1) / kBlock;
  exp_.resize(n_);
  block_ref_.resize(blocks);
  block_sum_.resize(blocks);
  block_key_max_.resize(blocks);
  heavy_.clear();
  sample_step_ = std::max<int64_t>(n_ / 1024, 1);
  sample_.clear();
  heavy_bound_ = collect_heavy ? HeavyBound() : kInf;
  // Penalized tokens (NaN in the row) count in the largest x from the start.
  double largest = -kInf;
  for (const Candidate& c : penalized_) largest = std::max(largest, c.x);
  auto add = [](void* self, int64_t id, double x) { static_cast<Sampler*>(self)->AddHeavy(static_cast<int32_t>(id), x); };
  const double row_max = ExpBlocks(row_, n_, t, largest, exp_.data(),
                                   Blocks{block_ref_.data(), block_sum_.data(), block_key_max_.data()},
                                   HitSink{add, this, &heavy_bound_});

  // The most probable token: the first with the largest key in the first block holding
  // it, unless a penalized one is larger (or equal with a lower id).
  x_max_ = -kInf;
  top_ = 0;
  float key_max = -kInfF;
  for (float m : block_key_max_) key_max = std::max(key_max, m);
  if (key_max > -kInfF) {
    const int64_t b = std::find(block_key_max_.begin(), block_key_max_.end(), key_max) - block_key_max_.begin();
    top_ = static_cast<int32_t>(std::find(row_ + b * kBlock, row_ + n_, key_max) - row_);
    x_max_ = row_[top_] / t;
  }
  for (const Candidate& c : penalized_)
    if (c.x > x_max_ || (c.x == x_max_ && c.id < top_)) {
      x_max_ = c.x;
      top_ = c.id;
    }
  M2_CHECK(x_max_ == std::max(row_max, largest), "softmax pass maximum");
  if (!Finite(x_max_)) return;

  scale_.resize(blocks);
  sum_ = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    scale_[b] = std::exp(block_ref_[b] - x_max_);  // 0 for a block before any finite x
    sum_ += block_sum_[b] * scale_[b];
  }
  for (const Candidate& c : penalized_) {
    const double ref = block_ref_[c.id >> kBlockShift];
    exp_[c.id] = c.x == -kInf ? 0 : std::exp(c.x - ref);
    sum_ += E(c.id);
    if (c.x > heavy_bound_) AddHeavy(c.id, c.x);
  }
  heavy_mass_ = 0;
  for (const Candidate& c : heavy_) heavy_mass_ += E(c.id);
}

void Sampler::CollectBand(double x_low, double x_high, double* above) {
  candidates_.clear();
  *above = 0;
  auto take = [&](const Candidate& c) {
    if (c.x > x_high)
      *above += E(c.id);
    else if (c.x >= x_low)
      candidates_.push_back(c);
  };
  if (!by_row_) {
    for (const Candidate& c : all_) take(c);
  } else {
    // Keys surely above the band are summed in the pass; those near it are tested here.
    const double t = params_.temperature;
    auto near = [&](int64_t i) { take({t == 1 ? row_[i] : row_[i] / t, 0, static_cast<int32_t>(i)}); };
    auto call = [](void* f, int64_t i) { (*static_cast<decltype(near)*>(f))(i); };
    *above += MassAbove(row_, exp_.data(), scale_.data(), n_, KeyBelow(x_low * t), KeyAbove(x_high * t),
                        BandSink{call, &near});
    for (const Candidate& c : penalized_) take(c);
  }
  SetP();
}

bool Sampler::CollectTopK(int64_t k) {
  // The k largest keys with a rising bound: keys above it are buffered, and when the
  // buffer is full the k best stay and the bound becomes the k-th. Later ids come after
  // an equal key, so only larger keys can enter.
  using F = V16::F;
  const float* row = row_;
  auto better = [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  const size_t cap = std::max<size_t>(2 * k, 1024);
  float bound = -kInfF;
  auto shrink = [&] {
    std::nth_element(heap_.begin(), heap_.begin() + (k - 1), heap_.end(), better);
    heap_.resize(k);
    bound = row[heap_[k - 1]];
  };
  heap_.clear();
  int64_t i = 0;
  for (; i < n_ && heap_.size() < cap; ++i)
    if (!std::isnan(row[i])) heap_.push_back(static_cast<int32_t>(i));
  if (heap_.size() == cap) {
    shrink();
    Scan(
        row + i, n_ - i, [&](F v) { return v > bound; }, [&](float v) { return v > bound; },
        [&](int64_t j) {
          heap_.push_back(static_cast<int32_t>(i + j));
          if (heap_.size() == cap) shrink();
        });
  }
  if (static_cast<int64_t>(heap_.size()) > k) shrink();

  const double t = params_.temperature;
  candidates_.clear();
  for (int32_t id : heap_) candidates_.push_back({row[id] / t, 0, id});
  candidates_.insert(candidates_.end(), penalized_.begin(), penalized_.end());
  // Fewer than k tokens above -inf: the rest tie with the NaN ones, in id order.
  if (static_cast<int64_t>(candidates_.size()) < k) return false;
  std::nth_element(candidates_.begin(), candidates_.begin() + (k - 1), candidates_.end(), Before<Candidate>);
  candidates_.resize(k);
  for (const Candidate& c : candidates_)
    if (c.x == -kInf) return false;
  SetP();
  return true;
}

size_t Sampler::PrefixReaching(double target, double base, double* cum_out) {
  // Buckets over the stretch still in question narrow it down to the bucket where the sum
  // crosses the target: of equal x width, or, where the finite x are all equal, of equal
  // id width (ties go by id; -inf after). A stretch of at most kSort is sorted and walked.
  constexpr size_t kSort = 256;
  constexpr int kBuckets = 256;
  std::vector<Candidate>& c = candidates_;
  size_t lo = 0, hi = c.size();  // [lo, hi): in question; all of [hi, end) comes after it
  double cum = base;
  int depth = 0;
  while (lo < c.size()) {
    if (hi - lo > kSort && depth < 16) {
      double x_hi = -kInf, x_lo = kInf;
      int32_t id_lo = INT32_MAX, id_hi = 0;
      for (size_t j = lo; j < hi; ++j) {
        x_hi = std::max(x_hi, c[j].x);
        if (c[j].x > -kInf) x_lo = std::min(x_lo, c[j].x);
        id_lo = std::min(id_lo, c[j].id);
        id_hi = std::max(id_hi, c[j].id);
      }
      const bool by_x = x_lo < x_hi;
      const double scale = by_x ? kBuckets / (x_hi - x_lo) : (kBuckets - 1) / (id_hi - id_lo + 1.0);
      if (scale < 1e300) {
        auto bucket = [&](const Candidate& a) {  // -inf, and anything past the range, in the last
          const double b = by_x ? (x_hi - a.x) * scale : a.x > -kInf || x_hi == -kInf ? (a.id - id_lo) * scale : kInf;
          return b < kBuckets ? static_cast<int>(b) : kBuckets - 1;
        };
        double mass[kBuckets] = {};
        for (size_t j = lo; j < hi; ++j) mass[bucket(c[j])] += c[j].p;
        int b = 0;
        while (b < kBuckets && cum + mass[b] < target) cum += mass[b++];
        if (b == kBuckets) {
          lo = hi;
          hi = c.size();
          depth = 0;
          continue;
        }
        const auto first = c.begin() + lo, last = c.begin() + hi;
        const auto mid = std::partition(first, last, [&](const Candidate& a) { return bucket(a) < b; });
        const auto end = std::partition(mid, last, [&](const Candidate& a) { return bucket(a) == b; });
        lo = mid - c.begin();
        hi = end - c.begin();
        ++depth;
        continue;
      }
    }
    std::sort(c.begin() + lo, c.begin() + hi, Before<Candidate>);
    for (; lo < hi; ++lo) {
      cum += c[lo].p;
      if (cum >= target) {
        if (cum_out) *cum_out = cum;
        return lo + 1;
      }
    }
    hi = c.size();
    depth = 0;
  }
  if (cum_out) *cum_out = cum;
  return 0;
}

bool Sampler::Crossing(double target, Candidate* at, double* cum) {
  // Most cutoffs and draws fall among the heavy tokens.
  if (heavy_mass_ / sum_ >= target + 1e-12) {
    candidates_ = heavy_;
    SetP();
    const size_t m = PrefixReaching(target, 0, cum);
    if (m > 0) {
      *at = candidates_[m - 1];
      return true;
    }
  }
  // Deeper: the sample says about where the sum reaches the target; one pass sums the
  // mass above a band around that and collects the band, widened until it holds the
  // crossing.
  if (!sample_.empty()) {
    if (!sample_sorted_) std::sort(sample_.begin(), sample_.end(), std::greater<double>());
    sample_sorted_ = true;
    // Estimated sum down to each sampled x: the heavy tokens, then each sample below them
    // standing for sample_step_ tokens.
    const int64_t count = static_cast<int64_t>(sample_.size());
    int64_t at_rank = count;
    double est = heavy_mass_;
    for (int64_t r = 0; r < count; ++r) {
      if (sample_[r] <= heavy_bound_) est += sample_step_ * std::exp(sample_[r] - x_max_);
      if (est >= target * sum_) {
        at_rank = r;
        break;
      }
    }
    // The band: sampled x from rank hi to rank lo; a miss moves it up or down, wider.
    int64_t w = 8 + at_rank / 8, hi = at_rank - w, lo = at_rank + w;
    for (int tries = 0; tries < 4; ++tries) {
      const double x_high = hi < 0 ? kInf : sample_[std::min(hi, count - 1)];
      const double x_low = lo >= count ? -kInf : sample_[std::max<int64_t>(lo, 0)];
      double above;
      CollectBand(x_low, x_high, &above);
      above /= sum_;
      double band = 0;
      for (const Candidate& c : candidates_) band += c.p;
      if (above < target && above + band >= target + 1e-12) {
        const size_t m = PrefixReaching(target, above, cum);
        if (m > 0) {
          *at = candidates_[m - 1];
          return true;
        }
      }
      w *= 4;
      if (above >= target) {
        lo = hi;
        hi -= w;
      } else if (above + band < target) {
        hi = lo;
        lo += w;
      } else {
        hi -= w;
        lo += w;
      }
    }
  }
  // Not found (u within rounding of 1): the whole row.
  CollectAll();
  const size_t m = PrefixReaching(target, 0, cum);
  if (m == 0) return false;
  *at = candidates_[m - 1];
  return true;
}

void Sampler::Filter(std::span<const float> logits, std::span<const int32_t> context) {
  n_ = static_cast<int64_t>(logits.size());
  M2_CHECK(n_ > 0, "empty logits row");
  have_exp_ = prefix_ = whole_ = false;
  sample_.clear();
  all_.clear();

  // 1. Repetition penalty, once per distinct token.
  row_ = Penalize(logits, context);

  // 2. Greedy.
  if (params_.temperature == 0) {
    candidates_.assign(1, Candidate{0, 1.0, Greedy()});
    return;
  }

  // 3. Temperature, softmax; the most probable token. Within these bounds x = logit / t
  // neither overflows nor goes subnormal for any float, so the float row is in the order
  // of x (equal floats, equal x) and is scanned as it is.
  const double t = params_.temperature;
  for (Candidate& c : penalized_) c.x = c.p / t;
  by_row_ = t >= 1e-200 && t <= 1e200;
  const bool top_k = params_.top_k > 0 && params_.top_k < n_;
  const bool top_p = params_.top_p < 1.0;
  const bool min_p = params_.min_p > 0;
  // The softmax over the whole row: top-p needs it unless top-k comes first, plain
  // sampling draws from it; otherwise each later normalization divides it away.
  have_exp_ = !top_k && (top_p || !min_p);
  if (by_row_ && have_exp_) {
    Softmax(!min_p);
  } else if (by_row_) {
    const int64_t i = ArgMax(row_, n_);
    x_max_ = i >= 0 ? row_[i] / t : -kInf;
    top_ = i >= 0 ? static_cast<int32_t>(i) : 0;
    for (const Candidate& c : penalized_)
      if (c.x > x_max_ || (c.x == x_max_ && c.id < top_)) {
        x_max_ = c.x;
        top_ = c.id;
      }
  } else {
    BuildAll();
    top_ = 0;
    for (const Candidate& c : all_)
      if (c.x > all_[top_].x) top_ = c.id;
    x_max_ = all_[top_].x;
    if (have_exp_ && Finite(x_max_)) {
      exp_.resize(n_);
      scale_.assign((n_ + kBlock - 1) / kBlock, 1.0);
      sum_ = 0;
      for (const Candidate& c : all_) sum_ += exp_[c.id] = std::exp(c.x - x_max_);
      heavy_.clear();
      heavy_mass_ = 0;
    }
  }
  if (!Finite(x_max_)) {
    // Every logit -inf (or +inf present): no distribution to draw from; take the first.
    have_exp_ = false;
    candidates_.assign(1, Candidate{x_max_, 1.0, x_max_ > 0 ? top_ : 0});
    return;
  }

  // Without top-k or min-p the kept tokens are a prefix of the order: all of them, or,
  // with top-p, up to the one where the sum reaches top_p.
  if (!top_k && !min_p) {
    prefix_ = whole_ = true;
    kept_mass_ = 1;
    if (top_p) {
      Candidate at{};
      whole_ = !Crossing(params_.top_p - kTopPSlack, &at, &kept_mass_);
      last_ = at;
      if (!whole_ && at.id == top_) {  // the most probable token alone
        prefix_ = false;
        candidates_.assign(1, Candidate{at.x, 1.0, at.id});
      }
    }
    return;
  }

  // Otherwise the tokens that can be kept, with p = exp(x - x_max) (/ sum_ with the softmax).
  if (top_k) {
    const int64_t k = params_.top_k;
    if (!by_row_ || !CollectTopK(k)) {
      CollectAll();
      std::nth_element(candidates_.begin(), candidates_.begin() + (k - 1), candidates_.end(), Before<Candidate>);
      candidates_.resize(k);
    }
  } else if (params_.min_p >= 1e-200) {
    // p >= min_p * p_max <=> x >= x_max + ln(min_p), up to rounding: the margin keeps
    // every token the exact rule below may keep.
    const double ln = std::log(params_.min_p);
    Collect(x_max_ + ln - 1e-9 * (1 + std::fabs(x_max_) + std::fabs(ln)));
  } else {
    CollectAll();
  }
  if (candidates_.size() <= 256) std::sort(candidates_.begin(), candidates_.end(), Before<Candidate>);

  // 4. Top-k.
  if (top_k) Normalize();

  // 5. Top-p: keep up to and including the token whose cumulative sum reaches top_p.
  if (top_p) {
    const size_t keep = PrefixReaching(params_.top_p - kTopPSlack);
    if (keep > 0) candidates_.resize(keep);
    Normalize();
  }

  // 6. Min-p, relative to the most probable token (always kept).
  if (min_p) {
    double p_max = 0;
    for (const Candidate& c : candidates_) p_max = std::max(p_max, c.p);
    const double threshold = params_.min_p * p_max;
    std::erase_if(candidates_, [&](const Candidate& c) { return c.p < threshold; });
    Normalize();
  }
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> context) {
  Filter(logits, context);
  const bool one = prefix_ ? whole_ && n_ == 1 : candidates_.size() == 1;
  if (one) return prefix_ ? top_ : candidates_[0].id;
  // u in [0, 1) from the top 53 bits: exactly representable, the same everywhere. The
  // token drawn is the first, in order, whose cumulative probability exceeds u.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const double target = std::nextafter(u, kInf);  // cum > u <=> cum >= the next double
  if (prefix_) {
    // Cumulative p / kept_mass_ >= target, over the row, within the kept prefix.
    Candidate at{};
    double cum;
    if (Crossing(target * kept_mass_, &at, &cum) && (whole_ || !Before(last_, at))) return at.id;
    if (!whole_) return last_.id;  // u within rounding of 1: the last kept token
    CollectAll();
  } else {
    const size_t m = PrefixReaching(target);
    if (m > 0) return candidates_[m - 1].id;
  }
  return std::max_element(candidates_.begin(), candidates_.end(), Before<Candidate>)->id;  // u within rounding of 1
}

std::vector<double> Sampler::Distribution(std::span<const float> logits, std::span<const int32_t> context) {
  Filter(logits, context);
  std::vector<double> dist(logits.size(), 0.0);
  if (prefix_ && whole_) {
    for (int64_t i = 0; i < n_; ++i) dist[i] = E(i) / sum_ / kept_mass_;
  } else if (prefix_) {
    Collect(last_.x);
    for (const Candidate& c : candidates_)
      if (!Before(last_, c)) dist[c.id] = c.p / kept_mass_;
  } else {
    for (const Candidate& c : candidates_) dist[c.id] = c.p;
  }
  return dist;
}

}  // namespace m2::runtime
