// The AVX-VNNI build of the int8 prefill GEMM (linear_int8_gemm_simd.inc with VNNI on
// 256-bit vectors) compiled for plain AVX2, with vpdpbusd replaced by an exact emulation,
// so that its code (tiles, corrections, scales, row panels) is checked on every AVX2
// machine against the reference (linear_test.cpp), not only on the CPUs that have AVX-VNNI.
#include <immintrin.h>

namespace m2::int8gemm_vnni8_emulated {
namespace {

// acc + the sums of 4 adjacent products of unsigned bytes u and signed bytes s per 32-bit
// lane, as vpdpbusd gives them (no saturation): the bytes widened to int16 (|u s| <= 255 x
// 128 fits), multiplied, pairs summed into int32 by vpmaddwd, then pairs of pairs.
inline __m256i EmulatedDpbusd(__m256i acc, __m256i u, __m256i s) {
  const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi16(1);
  const __m256i u_lo = _mm256_unpacklo_epi8(u, zero), u_hi = _mm256_unpackhi_epi8(u, zero);
  const __m256i s_lo = _mm256_srai_epi16(_mm256_unpacklo_epi8(zero, s), 8);
  const __m256i s_hi = _mm256_srai_epi16(_mm256_unpackhi_epi8(zero, s), 8);
  const __m256i lo = _mm256_madd_epi16(_mm256_mullo_epi16(u_lo, s_lo), ones);  // quads 0, 1 of each 128-bit lane
  const __m256i hi = _mm256_madd_epi16(_mm256_mullo_epi16(u_hi, s_hi), ones);  // quads 2, 3
  return _mm256_add_epi32(acc, _mm256_hadd_epi32(lo, hi));
}

}  // namespace
}  // namespace m2::int8gemm_vnni8_emulated

#define M2_GEMM_NS int8gemm_vnni8_emulated
#define M2_GEMM_VNNI 1
#define M2_GEMM_WIDTH 8
#define M2_GEMM_DPBUSD8 EmulatedDpbusd
#define M2_GEMM_ENTRY GemmRowsInt8AvxVnniEmulated
#include "kernels/linear_int8_gemm_simd.inc"
