// Avx2 build of the SIMD attention kernel (see attention_simd.inc).
#define M2_SIMD_WIDTH 8
#define M2_SIMD_NS avx2
#include "kernels/attention_simd.inc"

namespace m2 {
void AttendGroupAvx2(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                     float* scratch, float* out) {
  if (!avx2::CanRun(group, head_dim)) return AttendGroupPortable(q, group, head_dim, kv, scale, scratch, out);
  avx2::AttendGroupSimd(q, group, head_dim, kv, scale, scratch, out);
}
}  // namespace m2
