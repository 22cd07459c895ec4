#include "kernels/linear.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/cpu.h"
#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/linear_bf16.h"
#include "kernels/linear_int8.h"
#include "kernels/linear_int16.h"

namespace m2 {

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kF16: return "f16";
    case WeightFormat::kFp8Block: return "fp8-block";
    case WeightFormat::kQ8: return "q8";
    case WeightFormat::kQ4: return "q4";
  }
  return "?";
}

int64_t LinearWeight::data_bytes() const {
  const int64_t n = rows * cols;
  switch (format) {
    case WeightFormat::kF32: return 4 * n;
    case WeightFormat::kBF16:
    case WeightFormat::kF16: return 2 * n;
    case WeightFormat::kFp8Block:
    case WeightFormat::kQ8: return n;
    case WeightFormat::kQ4: return n / 2;
  }
  return 0;
}

int64_t LinearWeight::bytes() const {
  switch (format) {
    case WeightFormat::kF32:
    case WeightFormat::kBF16:
    case WeightFormat::kF16: return data_bytes();
    case WeightFormat::kFp8Block: return data_bytes() + 4 * scale_rows() * scale_cols();
    case WeightFormat::kQ8:
    case WeightFormat::kQ4: return data_bytes() + 2 * rows * scale_cols();
  }
  return 0;
}

void DequantizeRow(const LinearWeight& w, int64_t row, float* out) { DequantizeColumns(w, row, 0, w.cols, out); }

void DequantizeColumns(const LinearWeight& w, int64_t row, int64_t c0, int64_t c1, float* out) {
  M2_CHECK(row >= 0 && row < w.rows, "row {} of {}", row, w.rows);
  M2_CHECK(0 <= c0 && c0 <= c1 && c1 <= w.cols, "columns [{}, {}) of {}", c0, c1, w.cols);
  const int64_t c = w.cols;
  switch (w.format) {
    case WeightFormat::kF32: {
      std::memcpy(out, static_cast<const float*>(w.data) + row * c + c0, static_cast<size_t>(c1 - c0) * sizeof(float));
      return;
    }
    case WeightFormat::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * c;
      for (int64_t j = c0; j < c1; ++j) out[j - c0] = Bf16ToF32(p[j]);
      return;
    }
    case WeightFormat::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * c;
      for (int64_t j = c0; j < c1; ++j) out[j - c0] = F16ToF32(p[j]);
      return;
    }
    case WeightFormat::kFp8Block: {
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * c;
      const float* s = static_cast<const float*>(w.scale) + (row / w.block_rows) * w.scale_cols();
      for (int64_t j = c0; j < c1; ++j) out[j - c0] = Fp8E4M3ToF32(p[j]) * s[j / w.block_cols];
      return;
    }
    case WeightFormat::kQ8: {
      const int8_t* p = static_cast<const int8_t*>(w.data) + row * c;
      const uint16_t* s = static_cast<const uint16_t*>(w.scale) + row * (c / kQuantGroup);
      for (int64_t j = c0; j < c1; ++j) out[j - c0] = static_cast<float>(p[j]) * F16ToF32(s[j / kQuantGroup]);
      return;
    }
    case WeightFormat::kQ4: {
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * (c / 2);
      const uint16_t* s = static_cast<const uint16_t*>(w.scale) + row * (c / kQuantGroup);
      for (int64_t j = c0; j < c1; ++j) {
        const int64_t g = j / kQuantGroup, within = j % kQuantGroup;
        const uint8_t byte = p[g * 16 + within % 16];
        const int u = within < 16 ? (byte & 0xf) : (byte >> 4);
        out[j - c0] = static_cast<float>(u - 8) * F16ToF32(s[g]);
      }
      return;
    }
  }
  M2_CHECK(false, "unknown weight format");
}

namespace {
// Reference kernel restricted to rows [r0, r1) (the portable path under threads). The row
// is dequantized a piece at a time into the stack, for up to kTokens tokens at once, so a
// pool worker needs no buffer of its own (one grown on a worker's first use was an
// allocation in a warm decode step); the sums are Dot's, bit for bit.
void ReferenceRows(const LinearWeight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  constexpr int64_t kPiece = 512, kTokens = 16;  // kPiece a multiple of 8 (DotAdd)
  float piece[kPiece];
  detail::DotParts parts[kTokens];
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t t0 = 0; t0 < n; t0 += kTokens) {
      const int64_t nt = std::min(kTokens, n - t0);
      for (int64_t t = 0; t < nt; ++t) parts[t] = detail::DotParts{};
      for (int64_t c0 = 0; c0 < w.cols; c0 += kPiece) {
        const int64_t c1 = std::min(w.cols, c0 + kPiece);
        DequantizeColumns(w, r, c0, c1, piece);
        for (int64_t t = 0; t < nt; ++t) detail::DotAdd(parts[t], piece, x + (t0 + t) * w.cols + c0, c1 - c0);
      }
      for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * w.rows + r] = detail::DotEnd(parts[t]);
    }
  }
}

// The fp32-activation one-pass kernels on rows [r0, r1): the SIMD ones where they take
// the weight, else the reference.
void ExactRows(const LinearWeight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1, KernelIsa isa) {
  bool done = false;
  if (isa == KernelIsa::kAvx512) done = LinearRowsAvx512(w, x, n, y, r0, r1);
  else if (isa == KernelIsa::kAvx2) done = LinearRowsAvx2(w, x, n, y, r0, r1);
  if (!done) ReferenceRows(w, x, n, y, r0, r1);
}
}  // namespace

void LinearReference(const LinearWeight& w, const float* x, int64_t n, float* y) { ReferenceRows(w, x, n, y, 0, w.rows); }

int RowChunksPerThread(int64_t bytes, int threads, int64_t chunk_bytes) {
  const int64_t chunks = bytes / (std::max(threads, 1) * std::max<int64_t>(chunk_bytes, 1));
  return static_cast<int>(std::clamp<int64_t>(chunks, ThreadPool::kChunksPerThread, 64));
}

namespace {
// What every product checks of its weight before it decides anything by it.
void CheckReady(const LinearWeight& w) {
  M2_CHECK(w.valid(), "Linear on an empty weight");
  M2_CHECK(w.activations != ActivationMode::kAuto, "Linear on a weight whose activation mode (auto) was never resolved");
}
}  // namespace

RowsInput::Kind RowsInput::KindFor(const LinearWeight& w, int64_t n) {
  if (n < 1) return Kind::kNone;
  const ActivationMode m = w.activations;
  const bool int8_decode = m == ActivationMode::kInt8Decode || m == ActivationMode::kInt8DecodeBf16Prefill ||
                           m == ActivationMode::kInt8DecodeInt8Prefill;
  if (m == ActivationMode::kInt8 || (int8_decode && n <= kMaxGemvTokens)) return Kind::kInt8;
  const bool int16_decode = m == ActivationMode::kInt16Decode || m == ActivationMode::kInt16DecodeBf16Prefill ||
                            m == ActivationMode::kInt16DecodeInt16Prefill;
  if (m == ActivationMode::kInt16 || (int16_decode && n <= kMaxGemvTokens)) return Kind::kInt16;
  if (UsesBf16Gemv(w, n)) return Kind::kBf16;
  return n <= kMaxGemvTokens ? Kind::kExact : Kind::kNone;
}

void RowsInput::Prepare(const LinearWeight& w, const float* x, int64_t n) {
  CheckReady(w);
  kind_ = KindFor(w, n);
  M2_CHECK(kind_ != Kind::kNone, "RowsInput: {} tokens on a {} weight take no one-pass kernel", n, WeightFormatName(w.format));
  format_ = w.format, mode_ = w.activations, cols_ = w.cols, n_ = n, isa_ = ActiveIsa(), x_ = x;
  Reserve(w, n);
  const int64_t G = w.cols / kQuantGroup;
  switch (kind_) {
    case Kind::kInt8:
      M2_CHECK(w.format == WeightFormat::kQ8 || w.format == WeightFormat::kQ4,
               "int8 activations are for q8 / q4 weights, not {}", WeightFormatName(w.format));
      if (isa_ != KernelIsa::kPortable) QuantizeActivationsInt8Avx2(x, n, w.cols, q8_.data(), d_.data(), d_.data() + n * G);
      else QuantizeActivationsInt8(x, n, w.cols, q8_.data(), d_.data(), d_.data() + n * G);
      break;
    case Kind::kInt16:
      M2_CHECK(w.format == WeightFormat::kQ8, "int16 activations are for q8 weights, not {}", WeightFormatName(w.format));
      if (isa_ != KernelIsa::kPortable) QuantizeActivationsInt16Avx2(x, n, w.cols, q16_.data(), d_.data());
      else QuantizeActivationsInt16(x, n, w.cols, q16_.data(), d_.data());
      break;
    case Kind::kBf16:
      xb_shift_ = PackGemvBf16Avx512(x, n, w.cols, /*fp8_order=*/true, xb_.data());
      break;
    case Kind::kExact:
    case Kind::kNone: break;
  }
}

void RowsInput::Reserve(const LinearWeight& w, int64_t n) {
  const auto size = [](auto& v, int64_t count) {
    if (v.size() < static_cast<size_t>(count)) v.resize(static_cast<size_t>(count));
  };
  const int64_t G = w.cols / kQuantGroup;
  switch (KindFor(w, n)) {
    case Kind::kInt8: size(q8_, n * w.cols), size(d_, 2 * n * G); break;
    case Kind::kInt16: size(q16_, n * w.cols), size(d_, n * G); break;
    case Kind::kBf16: size(xb_, n * w.cols); break;
    case Kind::kExact:
    case Kind::kNone: break;
  }
}

bool RowsInput::Serves(const LinearWeight& w) const {
  return kind_ != Kind::kNone && w.format == format_ && w.activations == mode_ && w.cols == cols_ && KindFor(w, n_) == kind_;
}

void RowsInput::Rows(const LinearWeight& w, float* y, int64_t r0, int64_t r1) const {
  M2_CHECK(Serves(w), "RowsInput prepared for a {} weight of width {}, used on a {} one of width {}",
           WeightFormatName(format_), cols_, WeightFormatName(w.format), w.cols);
  const int64_t G = w.cols / kQuantGroup;
  switch (kind_) {
    case Kind::kInt8: {
      const Int8Activations a{.q = q8_.data(), .d = d_.data(), .c = d_.data() + n_ * G, .n = n_, .cols = w.cols};
      Int8RowsKernelFor(isa_, Cpu(), w.format, n_)(w, a, y, r0, r1);
      return;
    }
    case Kind::kInt16: {
      const Int16Activations a{.q = q16_.data(), .d = d_.data(), .n = n_, .cols = w.cols};
      Int16RowsKernel(isa_, Cpu())(w, a, y, r0, r1);
      return;
    }
    case Kind::kBf16:
      // Up to 4 tokens a pass (the kernel's width).
      for (int64_t t0 = 0; t0 < n_; t0 += 4) {
        const int64_t nt = std::min<int64_t>(4, n_ - t0);
        M2_CHECK(GemvRowsBf16Avx512(w, xb_.data() + t0 * w.cols, xb_shift_, nt, y + t0 * w.rows, r0, r1), "bf16 GEMV refused {} tokens", nt);
      }
      return;
    case Kind::kExact: ExactRows(w, x_, n_, y, r0, r1, isa_); return;
    case Kind::kNone: break;
  }
  M2_CHECK(false, "RowsInput::Rows before Prepare");
}

namespace {
// xt[k][t] = x[t][k] for t < n, zero for n <= t < ntp. Eight token rows are read side by
// side so each k writes one contiguous run of xt (a plain double loop with a stride of
// ntp floats on every write costs as much as the matmul itself for n ~ 64).
void TransposeTokens(const float* x, int64_t n, int64_t K, float* xt, int64_t ntp, ThreadPool* pool) {
  // Tiled layout of linear.h: tile `tile` is [K][tw].
  const auto body = [&](int64_t k0, int64_t k1, int) {
    for (int64_t t0 = 0; t0 < ntp; t0 += 8) {
      const int64_t tn = std::min<int64_t>(8, n - t0);
      const int64_t tile = t0 / kTokenTile * kTokenTile, tw = std::min(kTokenTile, ntp - tile);
      for (int64_t k = k0; k < k1; ++k) {
        float* out = xt + tile * K + k * tw + (t0 - tile);
        int64_t t = 0;
        for (; t < tn; ++t) out[t] = x[(t0 + t) * K + k];
        for (; t < 8 && t0 + t < ntp; ++t) out[t] = 0.0f;
      }
    }
  };
  if (pool != nullptr) pool->ParallelFor(K, 64, body);
  else body(0, K, 0);
}
}  // namespace

namespace {
// Chunks per thread for a one-pass product (decode): about kDecodeChunkBytes of weights
// each, at least the pool's usual 4 and at most 64 per thread. The threads take chunks
// from a counter, so the one that finishes first waits at most one chunk for the other:
// the M2 slice's output matrix (650 MB) in 8 chunks of 80 MB left a thread idle for 9-11%
// of the product's time in the minutes this VM's memory is fast (3-4% in slow ones); in
// chunks of 5 MB, under 1% (`m2 bench -m m2-q4-lmq8 --context 128`, a wait-measuring pool,
// 8 alternating rounds). The boundaries move, the bits do not: each row is computed whole
// by one thread either way.
constexpr int64_t kDecodeChunkBytes = int64_t{2} << 20;
int DecodeChunksPerThread(const LinearWeight& w, int threads) { return RowChunksPerThread(w.bytes(), threads, kDecodeChunkBytes); }
// The order of a decode product's chunks (SetDecodeChunkOrderForTesting, linear.h): spread
// (ThreadPool::Order::kSpread), so each thread mostly takes the chunk after its last one and
// reads along one run of rows, its prefetches reaching on into its next chunk, where in
// order every chunk a thread takes starts a stream of its own. `gemv_bench --turns 1024`
// (Zen 5 VM, one row a pass, L2 prefetch, three runs split by the reads around the turns,
// fast / slow minutes), spread against in order: q8 int16 86 / 94% of the read against 82 /
// 92%, q8 int8 85 / 96% against 80 / 93%, q4 int8 78 / 94% against 70 / 88%, the exact FP8
// and q8 kernels 79-80 / 89-90% against 75-77 / 87-88%; the whole FP8 slice (`m2 bench`, its
// bf16 kernel) level, 77-78% in fast minutes either way. The same bits either way: each row
// is computed whole by one thread.
ThreadPool::Order DecodeChunkOrder() { return DecodeChunksSpread() ? ThreadPool::Order::kSpread : ThreadPool::Order::kInOrder; }

// The int16 prefill GEMM: tokens in chunks of 128, each quantized into tiles (spread over
// the pool by tokens), then the rows spread over the pool in whole panels.
void LinearInt16GemmOn(const LinearWeight& w, const float* x, int64_t n, float* y, ThreadPool* pool_or_null) {
  const int64_t lanes = Int16GemmLanes();
  const auto gemm_rows = lanes == 16 ? GemmRowsInt16Avx512Vnni : GemmRowsInt16Avx2;
  const bool parallel = pool_or_null != nullptr && pool_or_null->size() > 1 && w.rows * w.cols * n >= (1 << 16);
  ThreadPool* pool = parallel ? pool_or_null : nullptr;
  // Tokens per GEMM call: each call unpacks every panel once, and FP8's conversion is dearer
  // than q8's widening, so FP8 takes 512 at a time (as in the int8 GEMM).
  const int64_t kChunk = w.format == WeightFormat::kFp8Block ? 512 : 128;
  const int64_t K = w.cols, G = K / kQuantGroup;
  thread_local std::vector<uint32_t> q;
  thread_local std::vector<float> d;
  for (int64_t t0 = 0; t0 < n; t0 += kChunk) {
    const int64_t nt = std::min(kChunk, n - t0), ntp = (nt + lanes - 1) / lanes * lanes;
    if (q.size() < static_cast<size_t>(ntp * K / 2)) q.resize(static_cast<size_t>(ntp * K / 2));
    if (d.size() < static_cast<size_t>(ntp * G)) d.resize(static_cast<size_t>(ntp * G));
    const float* xc = x + t0 * K;
    uint32_t* qp = q.data();  // a thread_local named in a lambda would be the worker's own
    float* dp = d.data();
    const auto pack = [&, qp, dp](int64_t a, int64_t b, int) { PackTokensInt16Avx2(xc, nt, K, ntp, a, b, qp, dp); };
    if (pool != nullptr) pool->ParallelFor(ntp, 8, pack);
    else pack(0, ntp, 0);
    const Int16TokenTiles tiles{.q = qp, .d = dp, .ntp = ntp, .n = nt};
    float* yc = y + t0 * w.rows;
    const auto body = [&, tiles, yc](int64_t r0, int64_t r1, int) { gemm_rows(w, tiles, yc, r0, r1); };
    if (pool != nullptr) pool->ParallelFor(w.rows, 24, body);  // 24: whole panels of 12 rows
    else body(0, w.rows, 0);
  }
}

// The int8 prefill GEMM (linear_int8.h): tokens in chunks of 128, each quantized into
// tiles (spread over the pool by tokens), then the rows spread over the pool in whole
// panels. The model checked Int8GemmFor() when it set the mode; a later change of
// M2_KERNELS is caught here, not run on the wrong ISA.
// With w2 (its output y2), a second weight of the same format and input width multiplies
// the same tiles: the tokens are quantized and packed once for both (MoE's W1 and W3).
void LinearInt8GemmOn(const LinearWeight& w, const float* x, int64_t n, float* y, ThreadPool* pool_or_null,
                      const LinearWeight* w2 = nullptr, float* y2 = nullptr) {
  const Int8GemmKernel kernel = Int8GemmFor(w.format);
  M2_CHECK(w2 == nullptr || (w2->format == w.format && w2->cols == w.cols && y2 != nullptr),
           "a pair of int8 GEMMs on one input needs one format and one input width");
  M2_CHECK(kernel != Int8GemmKernel::kNone,
           "int8 prefill (--activations int8+int8) of {} weights has no kernel for the {} kernels on this CPU ({})",
           WeightFormatName(w.format), IsaName(ActiveIsa()), Cpu().Describe());
  const bool wide = kernel == Int8GemmKernel::kAvx512Vnni;
  const auto pack_tokens = wide ? PackTokensInt8Avx512 : PackTokensInt8Avx2;  // the same tiles, 16 or 8 lanes
  const auto gemm_rows = wide                                     ? GemmRowsInt8Avx512Vnni
                         : kernel == Int8GemmKernel::kAvxVnni ? GemmRowsInt8AvxVnni
                                                                  : GemmRowsInt8Avx2;
  const bool parallel = pool_or_null != nullptr && pool_or_null->size() > 1 && w.rows * w.cols * n >= (1 << 16);
  ThreadPool* pool = parallel ? pool_or_null : nullptr;
  // Tokens per GEMM call: each call unpacks every panel once. FP8 weights are requantized
  // there, which is dearer than q8 / q4's unpacking, so they take 512 tokens at a time: the
  // FP8 slice's 512-token prefill with the AVX2 kernels 157-162 -> 165-169 tokens/s (three
  // alternating rounds); q4's medians 277-292 with 128, 274-280 with 512.
  const int64_t kChunk = w.format == WeightFormat::kFp8Block ? 512 : 128;
  const int64_t K = w.cols, G = K / kQuantGroup, lanes = Int8GemmLanes(kernel);
  thread_local std::vector<uint32_t> q;
  thread_local std::vector<int32_t> negsum;
  thread_local std::vector<float> d;
  for (int64_t t0 = 0; t0 < n; t0 += kChunk) {
    const int64_t nt = std::min(kChunk, n - t0), ntp = (nt + lanes - 1) / lanes * lanes;
    if (q.size() < static_cast<size_t>(ntp * K / 4)) q.resize(static_cast<size_t>(ntp * K / 4));
    if (d.size() < static_cast<size_t>(ntp * G)) d.resize(static_cast<size_t>(ntp * G)), negsum.resize(d.size());
    const float* xc = x + t0 * K;
    uint32_t* qp = q.data();  // a thread_local named in a lambda would be the worker's own
    int32_t* sp = negsum.data();
    float* dp = d.data();
    const auto pack = [&, qp, sp, dp](int64_t a, int64_t b, int) { pack_tokens(xc, nt, K, ntp, a, b, qp, sp, dp); };
    if (pool != nullptr) pool->ParallelFor(ntp, 8, pack);
    else pack(0, ntp, 0);
    const Int8TokenTiles tiles{.q = qp, .negsum = sp, .d = dp, .ntp = ntp, .n = nt};
    for (int i = 0; i < (w2 != nullptr ? 2 : 1); ++i) {
      const LinearWeight& wi = i == 0 ? w : *w2;
      float* yc = (i == 0 ? y : y2) + t0 * wi.rows;
      const auto body = [&, tiles, yc](int64_t r0, int64_t r1, int) { gemm_rows(wi, tiles, yc, r0, r1); };
      if (pool != nullptr) pool->ParallelFor(wi.rows, 24, body);  // 24: whole panels of 12 rows
      else body(0, wi.rows, 0);
    }
  }
}

// The fp32-activation kernels. pool == nullptr: everything on the calling thread.
void LinearExactOn(const LinearWeight& w, const float* x, int64_t n, float* y, ThreadPool* pool_or_null) {
  const KernelIsa isa = ActiveIsa();
  const bool parallel = pool_or_null != nullptr && pool_or_null->size() > 1 && w.rows * w.cols * std::max<int64_t>(n, 1) >= (1 << 16);
  ThreadPool* pool = parallel ? pool_or_null : nullptr;
  // The GEMM pads the tokens to whole vectors (16 lanes with AVX-512, 8 with AVX2): an
  // expert's 64 + 3 tokens would cost 80. A rest of up to 4 tokens goes to the GEMV kernel
  // instead, which reads the weights once more (just used, so from cache) at about the
  // GEMM's FLOP rate for 4 tokens. gemv_bench, one thread, 67 tokens: fp8 96-107 ->
  // 104-118 GFLOP/s. (Rests of 5-8 in two GEMV passes were slower than the padding.)
  // Padding to the ISA's own width (not always 16) matters for batched decode: 8 streams
  // on AVX2 would otherwise do twice the FMAs of the lm_head and attention projections.
  const int64_t vw = isa == KernelIsa::kAvx512 ? 16 : 8;
  // (Not for the bf16 GEMM: every token of its products gets bf16 activations, whatever
  // its place in the batch.)
  const bool bf16 = UsesBf16Gemm(w, n);
  if (const int64_t rest = n % vw; n > vw && rest <= 4 && rest > 0 && isa != KernelIsa::kPortable && !bf16) {
    LinearExactOn(w, x, n - rest, y, pool_or_null);
    LinearExactOn(w, x + (n - rest) * w.cols, rest, y + (n - rest) * w.rows, pool_or_null);
    return;
  }
  // The bf16-activation GEMM (linear_bf16.h): the model checked Bf16GemmAvailable() when it
  // set the mode; a later change of M2_KERNELS is caught here, not run on the wrong ISA.
  M2_CHECK(!bf16 || (isa == KernelIsa::kAvx512 && Cpu().avx512_bf16),
           "bf16 activations need AVX-512 BF16 and the avx512 kernels (active: {})", IsaName(isa));
  if (bf16 || (n > kMaxGemvTokens && isa != KernelIsa::kPortable && (w.format != WeightFormat::kFp8Block || (w.block_cols % 16 == 0 && (w.block_cols & (w.block_cols - 1)) == 0)))) {
    // Prefill: tokens in chunks whose transposed copy stays in L2 while every row
    // panel streams past it. Each chunk is transposed once, by this thread (and, for the
    // bf16 GEMM, packed into bf16 pairs).
    constexpr int64_t kChunk = 128;
    thread_local std::vector<float> xt;
    thread_local std::vector<uint32_t> xp;
    // The bf16 GEMM pads tokens to 8 only (it has a 256-bit tail kernel: linear_bf16.h);
    // on the tile unit to 16 (a tile's tokens).
    const bool amx = bf16 && AmxBf16Available() && GemmAmxSupports(w);
    const int64_t pad = amx ? kAmxTokenPad : bf16 ? kBf16TokenPad : vw;
    for (int64_t t0 = 0; t0 < n; t0 += kChunk) {
      const int64_t nt = std::min(kChunk, n - t0), ntp = (nt + pad - 1) / pad * pad;
      if (xt.size() < static_cast<size_t>(w.cols * ntp)) xt.resize(static_cast<size_t>(w.cols * ntp));
      TransposeTokens(x + t0 * w.cols, nt, w.cols, xt.data(), ntp, pool);
      if (bf16) {
        if (xp.size() < static_cast<size_t>(w.cols / 2 * ntp)) xp.resize(static_cast<size_t>(w.cols / 2 * ntp));
        PackTokensBf16Avx512(xt.data(), ntp, w.cols, xp.data());
      }
      float* yc = y + t0 * w.rows;
      const float* xtp = xt.data();  // a thread_local named in the lambda would be the worker's own
      const uint32_t* xpp = xp.data();
      const auto body = [&, xtp, xpp](int64_t r0, int64_t r1, int) {
        if (amx) M2_CHECK(GemmRowsBf16Amx(w, xpp, ntp, nt, yc, r0, r1), "AMX GEMM refused a {}x{} {} weight", w.rows, w.cols, WeightFormatName(w.format));
        else if (bf16) GemmRowsBf16Avx512(w, xpp, ntp, nt, yc, r0, r1);
        else if (isa == KernelIsa::kAvx512) GemmRowsTransposedAvx512(w, xtp, ntp, nt, yc, r0, r1);
        else GemmRowsTransposedAvx2(w, xtp, ntp, nt, yc, r0, r1);
      };
      // Whole panels: 12 rows for the vector GEMMs, 32 for the tile unit's.
      if (parallel) pool->ParallelFor(w.rows, amx ? 32 : 24, body);
      else body(0, w.rows, 0);
    }
    return;
  }
  const auto body = [&](int64_t r0, int64_t r1, int) { ExactRows(w, x, n, y, r0, r1, isa); };
  if (parallel) pool->ParallelForChunks(w.rows, 16, DecodeChunksPerThread(w, pool->size()), body, DecodeChunkOrder());
  else body(0, w.rows, 0);
}
// pool == nullptr: everything on the calling thread. The activation mode is decided here,
// on the whole product's token count (the exact path splits it into smaller ones).
void LinearOn(const LinearWeight& w, const float* x, int64_t n, float* y, ThreadPool* pool_or_null) {
  CheckReady(w);
  if (UsesInt8Gemm(w, n)) return LinearInt8GemmOn(w, x, n, y, pool_or_null);
  if (UsesInt16Gemm(w, n)) return LinearInt16GemmOn(w, x, n, y, pool_or_null);
  // The one-pass kernels on prepared input (int8 / int16 / bf16 activations): x prepared
  // once by this thread, then the rows spread over the pool (only for products big enough
  // to pay for it), in chunks of about kDecodeChunkBytes.
  if (const RowsInput::Kind kind = RowsInput::KindFor(w, n); kind != RowsInput::Kind::kNone && kind != RowsInput::Kind::kExact) {
    thread_local RowsInput in;
    in.Prepare(w, x, n);
    const RowsInput* ip = &in;  // a thread_local named in the lambda would be the worker's own
    const auto body = [&, ip](int64_t r0, int64_t r1, int) { ip->Rows(w, y, r0, r1); };
    const bool par = pool_or_null != nullptr && pool_or_null->size() > 1 && w.rows * w.cols * n >= (1 << 16);
    if (par) pool_or_null->ParallelForChunks(w.rows, 16, DecodeChunksPerThread(w, pool_or_null->size()), body, DecodeChunkOrder());
    else body(0, w.rows, 0);
    return;
  }
  LinearExactOn(w, x, n, y, pool_or_null);
}

// Several weights on one input (attention's q, k and v). In a decode step each product is
// a pool job whose start and end cost on the memory side: each thread's stream of weights
// starts cold and the threads part at the end. On a Zen 5 VM in the minutes its memory read
// 77-85 GB/s, the q4 int8 kernel read 74-75% of that over matrices of 1,024 rows (M2's k and
// v) against 87-88% over 8,192 (`gemv_bench --turns 1024 "q4, int8" 1 ROWS`). So where every
// weight takes prepared input by rows, the input is prepared once per distinct kind (q, k and
// v share theirs) and one job runs all the rows, its chunks cut across the weights'
// boundaries. Each row is still computed whole by the same kernel on the same input: the same
// bits as one product each, which is what every other case does.
void LinearGroupOn(const LinearWeight* const* ws, float* const* ys, int count, const float* x, int64_t n,
                   ThreadPool* pool) {
  M2_CHECK(count >= 1 && count <= kMaxLinearGroup, "a group of {} products on one input (1 to {})", count, kMaxLinearGroup);
  bool one_job = pool != nullptr && pool->size() > 1 && count > 1;
  int64_t rows = 0, bytes = 0, macs = 0;
  for (int i = 0; i < count; ++i) {
    const LinearWeight& w = *ws[i];
    CheckReady(w);
    M2_CHECK(w.cols == ws[0]->cols, "a group of products on one input needs one input width ({} and {})", ws[0]->cols, w.cols);
    const RowsInput::Kind kind = RowsInput::KindFor(w, n);
    if (UsesInt8Gemm(w, n) || UsesInt16Gemm(w, n) || kind == RowsInput::Kind::kNone || kind == RowsInput::Kind::kExact)
      one_job = false;
    rows += w.rows, bytes += w.bytes(), macs += w.rows * w.cols * n;
  }
  if (!one_job || macs < (1 << 16)) {
    for (int i = 0; i < count; ++i) LinearOn(*ws[i], x, n, ys[i], pool);
    return;
  }
  thread_local RowsInput in[kMaxLinearGroup];
  const RowsInput* src[kMaxLinearGroup];
  int64_t first[kMaxLinearGroup + 1];
  first[0] = 0;
  for (int i = 0; i < count; ++i) {
    src[i] = nullptr;
    for (int j = 0; j < i && src[i] == nullptr; ++j)
      if (src[j]->Serves(*ws[i])) src[i] = src[j];
    if (src[i] == nullptr) {
      in[i].Prepare(*ws[i], x, n);
      src[i] = &in[i];  // a thread_local named in the lambda would be the worker's own
    }
    first[i + 1] = first[i] + ws[i]->rows;
  }
  const auto body = [&](int64_t b, int64_t e, int) {
    int i = 0;
    for (int64_t p = b; p < e;) {
      while (p >= first[i + 1]) ++i;
      const int64_t r0 = p - first[i], r1 = std::min(ws[i]->rows, e - first[i]);
      src[i]->Rows(*ws[i], ys[i], r0, r1);
      p = first[i] + r1;
    }
  };
  pool->ParallelForChunks(rows, 16, RowChunksPerThread(bytes, pool->size(), kDecodeChunkBytes), body, DecodeChunkOrder());
}

// Two weights on one input: where both take the int8 GEMM in one format and width, one
// quantization of the tokens serves both; otherwise two products. The same bits either way.
void LinearPairOn(const LinearWeight& a, const LinearWeight& b, const float* x, int64_t n, float* ya, float* yb,
                  ThreadPool* pool_or_null) {
  CheckReady(a);
  CheckReady(b);
  if (UsesInt8Gemm(a, n) && UsesInt8Gemm(b, n) && a.format == b.format && a.cols == b.cols)
    return LinearInt8GemmOn(a, x, n, ya, pool_or_null, &b, yb);
  LinearOn(a, x, n, ya, pool_or_null);
  LinearOn(b, x, n, yb, pool_or_null);
}
}  // namespace

namespace {
std::atomic<bool> g_subnormals_slow_for_testing{false};
}  // namespace
bool SubnormalsAreSlow() { return Cpu().intel || g_subnormals_slow_for_testing.load(std::memory_order_relaxed); }
void SetSubnormalsSlowForTesting(bool on) { g_subnormals_slow_for_testing.store(on, std::memory_order_relaxed); }
bool Fp8GemvEightRows() { return Cpu().intel; }
namespace {
std::atomic<int> g_bf16_wide_rows_for_testing{-1};
}  // namespace
bool Bf16GemvWideRows() {
  const int mode = g_bf16_wide_rows_for_testing.load(std::memory_order_relaxed);
  return mode < 0 ? Cpu().intel : mode == 1;
}
void SetBf16GemvWideRowsForTesting(int mode) { g_bf16_wide_rows_for_testing.store(mode, std::memory_order_relaxed); }
namespace {
std::atomic<int> g_decode_one_row_for_testing{-1};
// A decode setting from the environment (base/cpu.h's resolvers: 1, 0 or -1 for unset). The
// CLI checks these first (CheckKernelsEnv), so a bad value stops here only in other programs.
int DecodeEnvSetting(Result<int> (*resolve)(const char*), const char* var) {
  auto r = resolve(std::getenv(var));
  M2_CHECK(r.ok(), "{}", r.status().message());
  return *r;
}
// A decode setting as a test forces it (1 or 0), else as the environment says (-1: unset).
int DecodeSetting(const std::atomic<int>& for_testing, int env) {
  const int mode = for_testing.load(std::memory_order_relaxed);
  return mode < 0 ? env : mode;
}
}  // namespace
bool DecodeOneRow() {
  static const int env = DecodeEnvSetting(ResolveDecodeRows, "M2_DECODE_ROWS");
  const int mode = DecodeSetting(g_decode_one_row_for_testing, env);
  return mode < 0 ? Cpu().amd && Cpu().family >= 0x1a : mode == 1;
}
void SetDecodeOneRowForTesting(int mode) { g_decode_one_row_for_testing.store(mode, std::memory_order_relaxed); }
namespace {
std::atomic<int> g_decode_spread_for_testing{-1};
}  // namespace
bool DecodeChunksSpread() { return g_decode_spread_for_testing.load(std::memory_order_relaxed) != 0; }
void SetDecodeChunkOrderForTesting(int mode) { g_decode_spread_for_testing.store(mode, std::memory_order_relaxed); }
namespace {
std::atomic<int> g_row_prefetch_for_testing{-1};
}  // namespace
RowPrefetch DecodeRowPrefetch() {
  static const int env = DecodeEnvSetting(ResolveDecodePrefetch, "M2_DECODE_PREFETCH");
  const int mode = DecodeSetting(g_row_prefetch_for_testing, env);
  const bool stream = mode < 0 ? DecodeOneRow() : mode == 1;
  return stream ? RowPrefetch::kL2Stream : RowPrefetch::kNearAndFar;
}
void SetRowPrefetchForTesting(int mode) { g_row_prefetch_for_testing.store(mode, std::memory_order_relaxed); }
namespace {
std::atomic<int> g_fp8_gfni_for_testing{-1};
}  // namespace
bool Fp8GemvGfni() {
  static const int env = DecodeEnvSetting(ResolveFp8Decode, "M2_FP8_DECODE");
  const int mode = DecodeSetting(g_fp8_gfni_for_testing, env);
  return mode != 0 && Cpu().gfni;
}
void SetFp8GemvGfniForTesting(int mode) { g_fp8_gfni_for_testing.store(mode, std::memory_order_relaxed); }

void Linear(const LinearWeight& w, const float* x, int64_t n, float* y) { LinearOn(w, x, n, y, &ThreadPool::Global()); }

void LinearOnPool(const LinearWeight& w, const float* x, int64_t n, float* y, ThreadPool& pool) {
  LinearOn(w, x, n, y, &pool);
}

void LinearOnThisThread(const LinearWeight& w, const float* x, int64_t n, float* y) { LinearOn(w, x, n, y, nullptr); }

void LinearPairOnPool(const LinearWeight& a, const LinearWeight& b, const float* x, int64_t n, float* ya, float* yb,
                      ThreadPool& pool) {
  LinearPairOn(a, b, x, n, ya, yb, &pool);
}

void LinearGroupOnPool(const LinearWeight* const* ws, float* const* ys, int count, const float* x, int64_t n,
                       ThreadPool& pool) {
  LinearGroupOn(ws, ys, count, x, n, &pool);
}

void LinearPairOnThisThread(const LinearWeight& a, const LinearWeight& b, const float* x, int64_t n, float* ya,
                            float* yb) {
  LinearPairOn(a, b, x, n, ya, yb, nullptr);
}

}  // namespace m2
