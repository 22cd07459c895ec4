// The int8 prefill GEMM built with AVX2 (linear_int8_gemm_simd.inc; q4 weights) and the
// token packing for it.
#define M2_GEMM_NS int8gemm_avx2
#define M2_GEMM_VNNI 0
#define M2_GEMM_ENTRY GemmRowsInt8Avx2
#define M2_GEMM_PACK PackTokensInt8Avx2
#include "kernels/linear_int8_gemm_simd.inc"

namespace m2 {

double Int8DotBurstAvx2(int64_t iters) {
  constexpr int kChains = 12;
  __m256i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_epi16(static_cast<short>(i));
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(a, b));
  __m256i s = _mm256_setzero_si256();
  for (int i = 0; i < kChains; ++i) s = _mm256_add_epi16(s, acc[i]);
  volatile int sink = _mm256_extract_epi16(s, 0);
  (void)sink;
  return 2.0 * 32 * kChains * static_cast<double>(iters);
}

}  // namespace m2
