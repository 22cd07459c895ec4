// Avx2 build of the SIMD attention kernel (see attention_simd.inc).
#define M2_SIMD_WIDTH 8
#define M2_SIMD_NS avx2
#include "kernels/attention_simd.inc"

namespace m2 {
void AttendQueriesAvx2(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t head_dim,
                       const KvHeadView& kv, float scale, float* scratch, float* out, int64_t out_stride) {
  if (!avx2::CanRun(group, head_dim))
    return AttendQueriesPortable(q, q_stride, nq, group, head_dim, kv, scale, scratch, out, out_stride);
  avx2::AttendQueriesSimd(q, q_stride, nq, group, head_dim, kv, scale, scratch, out, out_stride);
}
void AttendGroupAvx2(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                     float* scratch, float* out) {
  AttendQueriesAvx2(q, group * head_dim, 1, group, head_dim, kv, scale, scratch, out, group * head_dim);
}
}  // namespace m2
