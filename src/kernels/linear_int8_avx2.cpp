// AVX2 kernels of the int8-activation path (linear_int8.h), compiled with -mavx2 -mfma
// -mf16c. 256-bit only, so AVX-512 machines run this same code (AVX-512 VNNI would fuse
// the two multiply steps into one vpdpbusd; not written yet: no machine here has it).
//
// One group of 32 columns, one token: vpmaddubsw multiplies unsigned bytes by signed bytes
// and adds pairs into 16 int16 lanes, vpmaddwd by ones adds pairs again into 8 int32
// lanes, which are converted to fp32 and accumulated with the group's scale product.
//  - q4: the nibbles u in [0, 15] are the unsigned operand as they are; the offset of 8 is
//    folded into the activation correction c (linear_int8.h), dotted with the weight
//    scales once per row, 8 groups at a time.
//  - q8: vpmaddubsw needs one unsigned operand: |w| (vpsignb w, w) times x with w's sign
//    (vpsignb x, w). With w and x in [-127, 127] the int16 pair sums stay below 2^15.
// Weights are read once per token tile; rows are taken two at a time for one or two
// tokens (decode: the activations' loads shared), one at a time for tiles of 3-4 (the
// prefill tiles, whose weight panel stays in L2 while the tiles go by).
#include <immintrin.h>

#include "kernels/linear_int8.h"

namespace m2 {
namespace {

// How far ahead to prefetch weights: as the fp32 group kernels (linear_simd.inc).
constexpr int64_t kNearBytes = 3072;
// Rows per panel when there are more tokens than one tile: 16 rows of q8 at K = 3072 is 48
// KiB, kept in L2 while every tile of tokens streams past it.
constexpr int64_t kPanelRows = 16;

inline __m256i Nibbles(const uint8_t* p) {  // 16 bytes -> 32 values in [0, 15], column order
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
}

inline float HSum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// Rows [r0, r0 + R) x tokens [t0, t0 + T).
template <bool kQ4, int T, int R>
void Tile(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t t0, bool prefetch) {
  const int64_t K = w.cols, G = K / kQuantGroup;
  const int64_t row_bytes = kQ4 ? K / 2 : K, group_bytes = kQ4 ? 16 : 32;
  const uint8_t* p[R];
  const uint16_t* s[R];
  for (int i = 0; i < R; ++i) {
    p[i] = static_cast<const uint8_t*>(w.data) + (r0 + i) * row_bytes;
    s[i] = static_cast<const uint16_t*>(w.scale) + (r0 + i) * G;
  }
  const int8_t* xq = a.q + t0 * K;
  const float* xd = a.d + t0 * G;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m256i wv[R], wabs[R];
    __m256 sw[R];
    for (int i = 0; i < R; ++i) {
      const uint8_t* pg = p[i] + g * group_bytes;
      if (prefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(pg) + kNearBytes, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(pg) + kPrefetchFarBytes, _MM_HINT_T1);
      }
      if constexpr (kQ4) {
        wv[i] = Nibbles(pg);
      } else {
        wv[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pg));
        wabs[i] = _mm256_sign_epi8(wv[i], wv[i]);
      }
      sw[i] = _mm256_set1_ps(_cvtsh_ss(s[i][g]));
    }
    for (int t = 0; t < T; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * K + g * kQuantGroup));
      // A broadcast from memory is a load, not an ALU operation (a scalar product then a
      // register broadcast would be two): the scale product is one vector multiply.
      const __m256 dx = _mm256_broadcast_ss(xd + t * G + g);
      for (int i = 0; i < R; ++i) {
        const __m256i prod = kQ4 ? _mm256_maddubs_epi16(wv[i], xv)
                                 : _mm256_maddubs_epi16(wabs[i], _mm256_sign_epi8(xv, wv[i]));
        const __m256 sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(prod, ones));
        acc[i][t] = _mm256_fmadd_ps(sum, _mm256_mul_ps(sw[i], dx), acc[i][t]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    __m256 corr[T];
    if constexpr (kQ4) {
      // sum over groups of (weight scale x c): 8 groups per step, then the rest.
      for (int t = 0; t < T; ++t) corr[t] = _mm256_setzero_ps();
      int64_t g = 0;
      for (; g + 8 <= G; g += 8) {
        const __m256 sv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s[i] + g)));
        for (int t = 0; t < T; ++t) corr[t] = _mm256_fmadd_ps(sv, _mm256_loadu_ps(a.c + (t0 + t) * G + g), corr[t]);
      }
      for (int t = 0; t < T; ++t) {
        float rest = 0.0f;
        for (int64_t h = g; h < G; ++h) rest += _cvtsh_ss(s[i][h]) * a.c[(t0 + t) * G + h];
        y[(t0 + t) * w.rows + r0 + i] = HSum(acc[i][t]) + HSum(corr[t]) + rest;
      }
    } else {
      for (int t = 0; t < T; ++t) y[(t0 + t) * w.rows + r0 + i] = HSum(acc[i][t]);
    }
  }
}

// Rows [r0, r1) x tokens [t0, t0 + T).
template <bool kQ4, int T>
void Rows(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t r1, int64_t t0,
          bool prefetch) {
  constexpr int R = T <= 2 ? 2 : 1;
  int64_t r = r0;
  for (; r + R <= r1; r += R) Tile<kQ4, T, R>(w, a, y, r, t0, prefetch);
  if constexpr (R > 1)
    for (; r < r1; ++r) Tile<kQ4, T, 1>(w, a, y, r, t0, prefetch);
}

// All tokens, rows [r0, r1): tiles of 4 tokens (then the rest) over panels of rows. With
// a single tile the rows stream from memory with prefetching; with several the panel is
// read from memory by the first tile and from L2 by the others.
template <bool kQ4>
void AllTokens(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t r1) {
  const int64_t n = a.n;
  const bool one_tile = n <= 4;
  const int64_t panel = one_tile ? r1 - r0 : kPanelRows;
  for (int64_t p0 = r0; p0 < r1; p0 += panel) {
    const int64_t p1 = p0 + panel < r1 ? p0 + panel : r1;  // not std::min: see FloatScratch in linear_simd.inc
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) Rows<kQ4, 4>(w, a, y, p0, p1, t, t == 0);
    switch (n - t) {
      case 3: Rows<kQ4, 3>(w, a, y, p0, p1, t, t == 0); break;
      case 2: Rows<kQ4, 2>(w, a, y, p0, p1, t, t == 0); break;
      case 1: Rows<kQ4, 1>(w, a, y, p0, p1, t, t == 0); break;
      default: break;
    }
  }
}

}  // namespace

// As QuantizeActivationsInt8, with the same operations in the same order per value (the
// product x * (127 / max|x|) rounded to nearest even by vcvtps2dq under the default
// rounding mode), so both give identical bytes and scales.
void QuantizeActivationsInt8Avx2(const float* x, int64_t n, int64_t cols, int8_t* q, float* d, float* c) {
  const int64_t groups = cols / kQuantGroup;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 max_finite = _mm256_set1_ps(3.40282347e+38f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + t * cols + g * kQuantGroup;
      __m256 v[4], a[4];
      int finite = 0xff;
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xg + 8 * i);
        a[i] = _mm256_and_ps(v[i], abs_mask);
        finite &= _mm256_movemask_ps(_mm256_cmp_ps(a[i], max_finite, _CMP_LE_OQ));  // false for NaN and inf
      }
      const int64_t k = t * groups + g;
      int8_t* qg = q + t * cols + g * kQuantGroup;
      if (finite != 0xff) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qg), _mm256_setzero_si256());
        d[k] = c[k] = __builtin_nanf("");
        continue;
      }
      __m256 m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_movehdup_ps(h));
      const float amax = _mm_cvtss_f32(h);
      const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m256i i32[4];
      for (int i = 0; i < 4; ++i) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
      // int32 -> int16 -> int8 with packs (exact: |values| <= 127); packs interleave the
      // 128-bit lanes, the permute puts the 32 bytes back in column order.
      const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]), i16b = _mm256_packs_epi32(i32[2], i32[3]);
      const __m256i i8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16a, i16b),
                                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qg), i8);
      const __m256i s32 = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3]));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
      d[k] = amax / 127.0f;
      c[k] = -8.0f * d[k] * static_cast<float>(_mm_cvtsi128_si32(s));
    }
}

bool LinearInt8RowsAvx2(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t r1) {
  if (w.format == WeightFormat::kQ4) AllTokens<true>(w, a, y, r0, r1);
  else if (w.format == WeightFormat::kQ8) AllTokens<false>(w, a, y, r0, r1);
  else return false;
  return true;
}

}  // namespace m2
