// The bf16-activation prefill GEMM (linear_bf16.h), compiled with AVX-512 F/BW/VL and
// BF16. The layout follows the fp32 GEMM (GemmT in linear_simd.inc): tokens are the vector
// dimension, a panel of kR rows is decoded once per chunk of columns, here to bf16, and the
// micro-kernel broadcasts a pair of adjacent weights (one 32-bit element, folded into
// vdpbf16ps as an embedded broadcast) against 16 tokens' pairs of activations: 32
// multiply-adds per instruction instead of the FMA's 16.
//
// FP8: the panel holds value / 256 (exact in bf16), one chunk never spans two scale
// blocks (chunks of min(256, block_cols) columns), and each row's fp32 partial sum of the
// chunk is multiplied by its block scale x 256 as it is added to the result.
// q8 / q4: the panel holds the integers (q, or u - 8: exact in bf16) and the micro-kernel
// multiplies each row's partial sums by the group's scale every 32 columns, into running
// totals kept in registers (MicroGroups).
#include "kernels/simd_intrinsics.h"

#include <algorithm>
#include <cstring>

#include "kernels/isa_scratch.h"
#include "kernels/linear_bf16.h"
#include "kernels/probe.h"

namespace m2::avx512bf16 {
namespace {

constexpr int kR = 12;          // rows per panel (12 x 2 token vectors = 24 accumulators)
constexpr int64_t kKC = 256;    // columns per chunk (at most)


// The micro-kernels' vector: 16 tokens (zmm) or, for the last 8 tokens of a batch whose
// count is not a multiple of 16, 8 tokens (ymm). Tokens are padded to a multiple of 8, not
// 16: an expert's tokens in a prefill are rarely a multiple of 16 (M2 prefill of 512 tokens:
// 64 per expert on average), and a padded zmm tail multiplied up to 15 zero tokens, about
// 10% of the products; a ymm vdpbf16ps costs half a zmm one where 512-bit operations run as
// two 256-bit halves (AMD Zen 4) and never more than the padded zmm one.
struct V16 {
  static constexpr int kLanes = 16;
  using F = __m512;
  static F Zero() { return _mm512_setzero_ps(); }
  static F Set1(float f) { return _mm512_set1_ps(f); }
  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  using B = __m512bh;  // kLanes tokens' pairs of bf16 activations
  static B LoadX(const uint32_t* x) { return (B)_mm512_loadu_si512(x); }
  // acc + the products of a broadcast weight pair with the token pairs x.
  static F Dot(F acc, int32_t pair, B x) { return _mm512_dpbf16_ps(acc, (B)_mm512_set1_epi32(pair), x); }
};
struct V8 {
  static constexpr int kLanes = 8;
  using F = __m256;
  static F Zero() { return _mm256_setzero_ps(); }
  static F Set1(float f) { return _mm256_set1_ps(f); }
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  using B = __m256bh;
  static B LoadX(const uint32_t* x) { return (B)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)); }
  static F Dot(F acc, int32_t pair, B x) { return _mm256_dpbf16_ps(acc, (B)_mm256_set1_epi32(pair), x); }
};

// acc = the products of RR panel rows (row stride kKC bf16) with TV vectors of tokens over
// the column pairs [p0, p1): per pair, one broadcast weight pair per row against each
// vector of token pairs.
template <class V, int TV, int RR>
__attribute__((always_inline)) inline void Products(const uint16_t* wd, const uint32_t* xt, int64_t xs, int64_t p0,
                                                    int64_t p1, typename V::F (&acc)[RR][TV]) {
  for (int r = 0; r < RR; ++r)
    for (int v = 0; v < TV; ++v) acc[r][v] = V::Zero();
  for (int64_t p = p0; p < p1; ++p) {
    typename V::B xv[TV];
    for (int v = 0; v < TV; ++v) xv[v] = V::LoadX(xt + p * xs + v * V::kLanes);
    for (int r = 0; r < RR; ++r) {
      int32_t pair;
      std::memcpy(&pair, wd + r * kKC + 2 * p, 4);
      for (int v = 0; v < TV; ++v) acc[r][v] = V::Dot(acc[r][v], pair, xv[v]);
    }
  }
}

// bf16 / FP8: rows [0, kR) of the panel times TV vectors of tokens over kc columns; ct rows
// (stride ntp) get acc * scale[r] (first chunk) or += it.
template <class V, int TV>
void Micro(const uint16_t* wd, int64_t kc, const uint32_t* xt, int64_t xs, float* ct, int64_t ntp,
           const float* scale, bool first) {
  typename V::F acc[kR][TV];
  Products<V, TV, kR>(wd, xt, xs, 0, kc / 2, acc);
  for (int r = 0; r < kR; ++r) {
    const typename V::F s = V::Set1(scale[r]);
    for (int v = 0; v < TV; ++v) {
      float* c = ct + r * ntp + v * V::kLanes;
      V::Store(c, first ? V::Mul(acc[r][v], s) : V::Fma(acc[r][v], s, V::Load(c)));
    }
  }
}

// q8 / q4 (kc a multiple of 32): RR rows of the panel (their group scales gs, row stride
// kKC / 32) times TV vectors of tokens. Per group of 32 columns the products collect in
// acc, then total += acc * scale; ct gets the totals (first chunk) or adds them. RR x TV x
// 2 accumulators: 6 x 2 or 12 x 1 fit the 32 registers.
template <class V, int TV, int RR>
void MicroGroups(const uint16_t* wd, const float* gs, int64_t kc, const uint32_t* xt, int64_t xs, float* ct,
                 int64_t ntp, bool first) {
  typename V::F tot[RR][TV];
  for (int r = 0; r < RR; ++r)
    for (int v = 0; v < TV; ++v) tot[r][v] = first ? V::Zero() : V::Load(ct + r * ntp + v * V::kLanes);
  for (int64_t g = 0; g < kc / kQuantGroup; ++g) {
    typename V::F acc[RR][TV];
    Products<V, TV, RR>(wd, xt, xs, g * kQuantGroup / 2, (g + 1) * kQuantGroup / 2, acc);
    for (int r = 0; r < RR; ++r) {
      const typename V::F sc = V::Set1(gs[r * (kKC / kQuantGroup) + g]);
      for (int v = 0; v < TV; ++v) tot[r][v] = V::Fma(acc[r][v], sc, tot[r][v]);
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int v = 0; v < TV; ++v) V::Store(ct + r * ntp + v * V::kLanes, tot[r][v]);
}

enum class Fmt { kBf16, kFp8, kQ8, kQ4 };
constexpr bool Grouped(Fmt f) { return f == Fmt::kQ8 || f == Fmt::kQ4; }

// Row `r` columns [k0, k0 + kc) into dst as bf16: bf16 copied, FP8 as value / 256, q8 / q4
// as their integers (kc a multiple of 32 for those).
template <Fmt F>
void DecodeRow(const LinearWeight& w, int64_t r, int64_t k0, int64_t kc, uint16_t* dst) {
  if constexpr (F == Fmt::kQ4) {
    // bf16 of u - 8 for u = 0..15 (twice: vpermw indexes 32 entries).
    alignas(64) static constexpr uint16_t kTable[32] = {
        0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80, 0x0000, 0x3f80, 0x4000,
        0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0, 0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040,
        0xc000, 0xbf80, 0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0};
    const __m512i table = _mm512_load_si512(kTable);
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * (w.cols / 2) + k0 / 2;
    const __m128i nib = _mm_set1_epi8(0x0f);
    for (int64_t k = 0; k < kc; k += kQuantGroup) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k / 2));
      const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), nib), _mm_and_si128(b, nib));
      _mm512_storeu_si512(dst + k, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(u), table));
    }
  } else if constexpr (F == Fmt::kQ8) {
    const int8_t* p = static_cast<const int8_t*>(w.data) + r * w.cols + k0;
    for (int64_t k = 0; k < kc; k += kQuantGroup) {
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k))));
      const __m512 hi =
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k + 16))));
      _mm512_storeu_si512(dst + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  } else if constexpr (F == Fmt::kBf16) {
    std::memcpy(dst, static_cast<const uint16_t*>(w.data) + r * w.cols + k0, static_cast<size_t>(kc) * 2);
  } else {
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * w.cols + k0;
    int64_t k = 0;
    // Integer operations only (no conversions): the byte sign-extended to 16 bits and
    // shifted left by 4 puts the sign at bit 15 (copies at 14..11, cleared), the exponent
    // at 10..7 and the mantissa at 6..4; adding 112 to the exponent field gives the bf16
    // of value / 256 for every normal code (0x7f, the NaN code, gives 480 / 256 as the
    // fp16 route did). Codes with exponent 0 (zero and the subnormals m x 2^-9) take
    // their magnitude from a table indexed by the low bits, then the sign bit is put back.
    alignas(64) static constexpr uint16_t kSub[32] = {0x0000, 0x3700, 0x3780, 0x37c0, 0x3800, 0x3820, 0x3840, 0x3860};
    const __m512i sub_table = _mm512_load_si512(kSub);
    const __m512i keep = _mm512_set1_epi16(static_cast<short>(0x87ff)), bias = _mm512_set1_epi16(112 << 7);
    const __m512i exp_bits = _mm512_set1_epi16(0x78), sign_bit = _mm512_set1_epi16(static_cast<short>(0x8000));
    for (; k + 32 <= kc; k += 32) {
      const __m512i b = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k)));
      const __m512i normal = _mm512_add_epi16(_mm512_and_si512(_mm512_slli_epi16(b, 4), keep), bias);
      const __mmask32 sub = _mm512_testn_epi16_mask(b, exp_bits);
      const __m512i v = _mm512_mask_permutexvar_epi16(normal, sub, b, sub_table);
      // v | (b & sign): ternary-logic truth table 0xf8 for A | (B & C).
      _mm512_storeu_si512(dst + k, _mm512_ternarylogic_epi32(v, b, sign_bit, 0xf8));
    }
    for (; k < kc; ++k) {
      const uint8_t b = p[k];
      const uint16_t h = static_cast<uint16_t>(((b & 0x80) << 8) | ((b & 0x7f) << 7));
      dst[k] = RoundToBf16(_cvtsh_ss(h));
    }
  }
}

template <Fmt F>
void Gemm(const LinearWeight& w, const uint32_t* xt, int64_t ntp, int64_t n, float* y, int64_t r0, int64_t r1) {
  constexpr bool kFp8 = F == Fmt::kFp8;
  constexpr int64_t kGroups = kKC / kQuantGroup;
  constexpr int64_t kHalfBytes = F == Fmt::kBf16 ? 4 : F == Fmt::kQ4 ? 1 : 2;  // bytes per column x 2
  const int64_t K = w.cols;
  const int64_t chunk = kFp8 ? std::min(kKC, w.block_cols) : kKC;
  // Where column k of row r starts in the weight's bytes (for the prefetches).
  const auto bytes_at = [&](int64_t r, int64_t k) {
    return static_cast<const char*>(w.data) + (r * K + k) * kHalfBytes / 2;
  };
  thread_local IsaScratch<uint16_t> wd_buf;
  thread_local IsaScratch<float> ct_buf;
  uint16_t* wd = wd_buf.Get(static_cast<size_t>(kR * kKC));
  float* ct = ct_buf.Get(static_cast<size_t>(kR * ntp));
  float scale[kR], gscale[kR * kGroups];
  for (int64_t p0 = r0; p0 < r1; p0 += kR) {
    const int64_t nr = std::min<int64_t>(kR, r1 - p0);
    const int64_t next_nr = std::min<int64_t>(kR, r1 - (p0 + kR));
    for (int64_t k0 = 0; k0 < K; k0 += chunk) {
      const int64_t kc = std::min(chunk, K - k0);
      for (int64_t i = 0; i < kR; ++i) {
        if (i < next_nr) {  // the next panel's chunk into L2 while this one computes
          const char* a = bytes_at(p0 + kR + i, k0);
          for (int64_t o = 0; o < kc * kHalfBytes / 2; o += 64) _mm_prefetch(a + o, _MM_HINT_T1);
        }
        if (i >= nr) {
          std::memset(wd + i * kKC, 0, static_cast<size_t>(kc) * 2);
          scale[i] = 0.0f;
          for (int64_t g = 0; g < kGroups; ++g) gscale[i * kGroups + g] = 0.0f;
          continue;
        }
        DecodeRow<F>(w, p0 + i, k0, kc, wd + i * kKC);
        if constexpr (Grouped(F)) {
          const uint16_t* s = static_cast<const uint16_t*>(w.scale) + (p0 + i) * (K / kQuantGroup) + k0 / kQuantGroup;
          for (int64_t g = 0; g < kc / kQuantGroup; ++g) gscale[i * kGroups + g] = _cvtsh_ss(s[g]);
        } else {
          scale[i] = kFp8 ? static_cast<const float*>(w.scale)[(p0 + i) / w.block_rows * w.scale_cols() + k0 / w.block_cols] * 256.0f
                          : 1.0f;
        }
      }
      if (k0 + chunk < K) {  // this panel's next chunk from L2 into L1 while this one computes
        const int64_t next_bytes = std::min(chunk, K - (k0 + chunk)) * kHalfBytes / 2;
        for (int64_t i = 0; i < nr; ++i) {
          const char* a = bytes_at(p0 + i, k0 + chunk);
          for (int64_t o = 0; o < next_bytes; o += 64) _mm_prefetch(a + o, _MM_HINT_T0);
        }
      }
      for (int64_t tile = 0; tile < ntp; tile += kTokenTile) {
        const int64_t tw = std::min(kTokenTile, ntp - tile);
        const uint32_t* xtile = xt + tile * K / 2 + k0 / 2 * tw;
        int64_t t = 0;
        if constexpr (Grouped(F)) {
          for (; t + 32 <= tw; t += 32)
            for (int r = 0; r < kR; r += 6)
              MicroGroups<V16, 2, 6>(wd + r * kKC, gscale + r * kGroups, kc, xtile + t, tw, ct + r * ntp + tile + t,
                                     ntp, k0 == 0);
          for (; t + 16 <= tw; t += 16)
            MicroGroups<V16, 1, kR>(wd, gscale, kc, xtile + t, tw, ct + tile + t, ntp, k0 == 0);
          if (t < tw) MicroGroups<V8, 1, kR>(wd, gscale, kc, xtile + t, tw, ct + tile + t, ntp, k0 == 0);
        } else {
          for (; t + 32 <= tw; t += 32) Micro<V16, 2>(wd, kc, xtile + t, tw, ct + tile + t, ntp, scale, k0 == 0);
          for (; t + 16 <= tw; t += 16) Micro<V16, 1>(wd, kc, xtile + t, tw, ct + tile + t, ntp, scale, k0 == 0);
          if (t < tw) Micro<V8, 1>(wd, kc, xtile + t, tw, ct + tile + t, ntp, scale, k0 == 0);
        }
      }
    }
    // Token by token: a token's nr results are adjacent in y; row by row, every store
    // would fall in another page (y's rows are w.rows * 4 bytes apart), a TLB miss each.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < nr; ++i) y[t * w.rows + p0 + i] = ct[i * ntp + t];
  }
}

}  // namespace
}  // namespace m2::avx512bf16

namespace m2 {

void PackTokensBf16Avx512(const float* xt, int64_t ntp, int64_t K, uint32_t* out) {
  // Lanes of cvtne2ps_pbh(hi, lo): lo's 16 values, then hi's; interleaved into (lo, hi) pairs.
  alignas(64) static constexpr short kPairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                   8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kPairs);
  alignas(32) static constexpr short kPairs8[16] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  const __m256i idx8 = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairs8));
  for (int64_t tile = 0; tile < ntp; tile += kTokenTile) {
    const int64_t tw = std::min(kTokenTile, ntp - tile);
    const float* src = xt + tile * K;
    uint32_t* dst = out + tile * K / 2;
    for (int64_t p = 0; p < K / 2; ++p) {
      int64_t t = 0;
      for (; t + 16 <= tw; t += 16) {
        const __m512 lo = _mm512_loadu_ps(src + 2 * p * tw + t), hi = _mm512_loadu_ps(src + (2 * p + 1) * tw + t);
        const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        _mm512_storeu_si512(dst + p * tw + t, _mm512_permutexvar_epi16(idx, packed));
      }
      if (t < tw) {  // 8 tokens: the same pairs from the low halves of the index
        const __m512 both = _mm512_castpd_ps(
            _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(src + 2 * p * tw + t))),
                               _mm256_castps_pd(_mm256_loadu_ps(src + (2 * p + 1) * tw + t)), 1));
        const __m256i packed = (__m256i)_mm512_cvtneps_pbh(both);  // lo's 8, then hi's 8
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + p * tw + t),
                            _mm256_permutexvar_epi16(idx8, packed));
      }
    }
  }
}

double Bf16DotBurstAvx512(int64_t iters) {
  constexpr int kChains = 12;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(1e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(-1e-4f));
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return 2.0 * 32 * kChains * static_cast<double>(iters);
}

bool GemmRowsBf16Avx512(const LinearWeight& w, const uint32_t* xt, int64_t ntp, int64_t n, float* y, int64_t r0,
                        int64_t r1) {
  using avx512bf16::Fmt;
  switch (w.format) {
    case WeightFormat::kBF16: avx512bf16::Gemm<Fmt::kBf16>(w, xt, ntp, n, y, r0, r1); break;
    case WeightFormat::kFp8Block: avx512bf16::Gemm<Fmt::kFp8>(w, xt, ntp, n, y, r0, r1); break;
    case WeightFormat::kQ8: avx512bf16::Gemm<Fmt::kQ8>(w, xt, ntp, n, y, r0, r1); break;
    case WeightFormat::kQ4: avx512bf16::Gemm<Fmt::kQ4>(w, xt, ntp, n, y, r0, r1); break;
    default: return false;
  }
  return true;
}

}  // namespace m2
