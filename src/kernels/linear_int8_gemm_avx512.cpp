// The int8 prefill GEMM built with AVX-512 VNNI (linear_int8_gemm_simd.inc), the token
// packing for it and the vpdpbusd ceiling.
#define M2_GEMM_NS int8gemm_avx512vnni
#define M2_GEMM_VNNI 1
#define M2_GEMM_ENTRY GemmRowsInt8Avx512Vnni
#define M2_GEMM_PACK PackTokensInt8Avx512
#include "kernels/linear_int8_gemm_simd.inc"

namespace m2 {

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
