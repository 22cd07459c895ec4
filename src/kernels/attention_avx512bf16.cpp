// AVX-512 BF16 build of the SIMD attention kernel with bf16 products (see
// attention_simd.inc: AttendQueriesBf16), for AttentionMath::kBf16.
#define M2_SIMD_WIDTH 16
#define M2_SIMD_NS avx512bf16attn
#define M2_ATTN_BF16_PRODUCTS 1
#include "kernels/attention_simd.inc"

namespace m2 {
void AttendQueriesAvx512Bf16(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t head_dim,
                             const KvHeadView& kv, float scale, float* scratch, float* out, int64_t out_stride) {
  if (!avx512bf16attn::CanRunBf16(group, head_dim, kv))
    return AttendQueriesAvx512(q, q_stride, nq, group, head_dim, kv, scale, scratch, out, out_stride);
  avx512bf16attn::AttendQueriesBf16(q, q_stride, nq, group, head_dim, kv, scale, scratch, out, out_stride);
}
}  // namespace m2
