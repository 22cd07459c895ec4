// Avx512 build of the SIMD attention kernel (see attention_simd.inc).
#define M2_SIMD_WIDTH 16
#define M2_SIMD_NS avx512
#include "kernels/attention_simd.inc"

namespace m2 {
void AttendGroupAvx512(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                     float* scratch, float* out) {
  if (!avx512::CanRun(group, head_dim)) return AttendGroupPortable(q, group, head_dim, kv, scale, scratch, out);
  avx512::AttendGroupSimd(q, group, head_dim, kv, scale, scratch, out);
}
}  // namespace m2
