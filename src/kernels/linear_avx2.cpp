// AVX2 build of the SIMD Linear kernels (compiled with -mavx2 -mfma -mf16c; only called
// when the CPU has them, see base/cpu.h).
#define M2_SIMD_WIDTH 8
#define M2_SIMD_NS avx2
#include "kernels/linear_simd.inc"

namespace m2 {
bool LinearRowsAvx2(const LinearWeight& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  return avx2::LinearRows(w, x, n, y, r0, r1);
}
}  // namespace m2

namespace m2 {
bool GemmRowsTransposedAvx2(const LinearWeight& w, const float* xt, int64_t ntp, int64_t n, float* y, int64_t r0,
                            int64_t r1) {
  return avx2::GemmRowsTransposed(w, xt, ntp, n, y, r0, r1);
}
}  // namespace m2
