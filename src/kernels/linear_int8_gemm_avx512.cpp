// The int8 prefill GEMM built with AVX-512 VNNI (linear_int8_gemm_simd.inc), the token
// packing for it and the vpdpbusd ceiling.
#define M2_GEMM_NS int8gemm_avx512vnni
#define M2_GEMM_VNNI 1
#define M2_GEMM_ENTRY GemmRowsInt8Avx512Vnni
#include "kernels/linear_int8_gemm_simd.inc"

namespace m2 {

void PackTokensInt8Avx512(const float* x, int64_t n, int64_t K, int64_t ntp, int64_t t0, int64_t t1, uint32_t* q,
                          int32_t* negsum, float* d) {
  const int64_t G = K / kQuantGroup;
  const __m512 max_finite = _mm512_set1_ps(3.40282347e+38f);
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t tile = t / kTokenTile * kTokenTile, tw = ntp - tile < kTokenTile ? ntp - tile : kTokenTile;
    const int64_t lane = t - tile;
    uint32_t* qt = q + tile * K / 4 + lane;
    int32_t* st = negsum + tile * G + lane;
    float* dt = d + tile * G + lane;
    if (t >= n) {  // padding: contributes nothing
      for (int64_t p = 0; p < K / 4; ++p) qt[p * tw] = 0;
      for (int64_t g = 0; g < G; ++g) st[g * tw] = 0, dt[g * tw] = 0.0f;
      continue;
    }
    for (int64_t g = 0; g < G; ++g) {
      // The operations of QuantizeActivationsInt8, value by value: amax, 127 / amax, the
      // product rounded to nearest even (vcvtps2dq), d = amax / 127.
      const float* xg = x + t * K + g * kQuantGroup;
      const __m512 v0 = _mm512_loadu_ps(xg), v1 = _mm512_loadu_ps(xg + 16);
      const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
      const __mmask16 ok = _mm512_cmp_ps_mask(a0, max_finite, _CMP_LE_OQ) & _mm512_cmp_ps_mask(a1, max_finite, _CMP_LE_OQ);
      if (ok != 0xffff) {  // NaN or infinity: q = 0, d = NaN, so the outputs are NaN
        for (int j = 0; j < 8; ++j) qt[(g * 8 + j) * tw] = 0;
        st[g * tw] = 0;
        dt[g * tw] = __builtin_nanf("");
        continue;
      }
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
      const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
      alignas(32) uint32_t quads[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(quads), _mm512_cvtepi32_epi8(i0));  // |values| <= 127: exact
      _mm_store_si128(reinterpret_cast<__m128i*>(quads + 4), _mm512_cvtepi32_epi8(i1));
      for (int j = 0; j < 8; ++j) qt[(g * 8 + j) * tw] = quads[j];
      st[g * tw] = -_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
      dt[g * tw] = amax / 127.0f;
    }
  }
}

double Int8DotBurstAvx512Vnni(int64_t iters) {
  constexpr int kChains = 12;
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i s = _mm512_setzero_si512();
  for (int i = 0; i < kChains; ++i) s = _mm512_add_epi32(s, acc[i]);
  volatile int sink = _mm512_reduce_add_epi32(s);
  (void)sink;
  return 2.0 * 64 * kChains * static_cast<double>(iters);
}

}  // namespace m2
