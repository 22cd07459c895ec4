// Avx2 build of the SIMD lightning attention kernels (see lightning_simd.inc).
#define M2_SIMD_WIDTH 8
#define M2_SIMD_NS avx2
#include "kernels/lightning_simd.inc"

namespace m2 {
void LightningBlockedAvx2(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                          float slope, int64_t block, float* state, float* out, int64_t out_stride, float* scratch) {
  if (!avx2::CanRun(head_dim))
    return LightningBlockedPortable(q, k, v, stride, n, head_dim, slope, block, state, out, out_stride, scratch);
  avx2::Blocked(q, k, v, stride, n, head_dim, slope, block, state, out, out_stride, scratch);
}
void LightningRecurrentAvx2(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                            float slope, float* state, float* out, int64_t out_stride) {
  if (!avx2::CanRun(head_dim))
    return LightningRecurrentPortable(q, k, v, stride, n, head_dim, slope, state, out, out_stride);
  avx2::Recurrent(q, k, v, stride, n, head_dim, slope, state, out, out_stride);
}
}  // namespace m2
