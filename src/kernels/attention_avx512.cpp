// Avx512 build of the SIMD attention kernel (see attention_simd.inc).
#define M2_SIMD_WIDTH 16
#define M2_SIMD_NS avx512
#include "kernels/attention_simd.inc"

namespace m2 {
void AttendQueriesAvx512(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t head_dim,
                         const KvHeadView& kv, float scale, float* scratch, float* out, int64_t out_stride) {
  if (!avx512::CanRun(group, head_dim))
    return AttendQueriesPortable(q, q_stride, nq, group, head_dim, kv, scale, scratch, out, out_stride);
  avx512::AttendQueriesSimd(q, q_stride, nq, group, head_dim, kv, scale, scratch, out, out_stride);
}
void AttendGroupAvx512(const float* q, int64_t group, int64_t head_dim, const KvHeadView& kv, float scale,
                       float* scratch, float* out) {
  AttendQueriesAvx512(q, group * head_dim, 1, group, head_dim, kv, scale, scratch, out, group * head_dim);
}
}  // namespace m2
