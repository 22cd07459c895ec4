// The int8 prefill GEMM built with AVX2 (linear_int8_gemm_simd.inc; q4 weights) and the
// token packing for it.
#define M2_GEMM_NS int8gemm_avx2
#define M2_GEMM_VNNI 0
#define M2_GEMM_ENTRY GemmRowsInt8Avx2
#include "kernels/linear_int8_gemm_simd.inc"

namespace m2 {

void PackTokensInt8Avx2(const float* x, int64_t n, int64_t K, int64_t ntp, int64_t t0, int64_t t1, uint32_t* q,
                        int32_t* negsum, float* d) {
  const int64_t G = K / kQuantGroup;
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
      // One group through the AVX2 quantizer (the bytes and scale of QuantizeActivationsInt8;
      // a NaN or infinity gives q = 0 and d = NaN), then its integer sum: vpmaddubsw by ones
      // (|q| <= 127: pairs within int16), vpmaddwd by ones, across the lanes.
      alignas(32) uint32_t quads[8];
      float c;
      QuantizeActivationsInt8Avx2(x + t * K + g * kQuantGroup, 1, kQuantGroup, reinterpret_cast<int8_t*>(quads),
                                  dt + g * tw, &c);
      const __m256i qv = _mm256_load_si256(reinterpret_cast<const __m256i*>(quads));
      const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qv), _mm256_set1_epi16(1));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
      for (int j = 0; j < 8; ++j) qt[(g * 8 + j) * tw] = quads[j];
      st[g * tw] = -_mm_cvtsi128_si32(s4);
    }
  }
}

}  // namespace m2

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
