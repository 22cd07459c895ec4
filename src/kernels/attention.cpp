#include "kernels/attention.h"

#include <cmath>

#include "base/cpu.h"
#include "kernels/dot.h"

namespace m2 {

void AttendGroupPortable(const float* q, int64_t group, int64_t D, const KvHeadView& kv, float scale, float* scratch,
                         float* out) {
  const int64_t len = kv.length, bt = kv.block_tokens;
  for (int64_t j = 0; j < len; ++j) {
    const float* k = kv.k_blocks[j / bt] + kv.head_offset + (j % bt) * kv.row_stride;
    for (int64_t h = 0; h < group; ++h) scratch[h * len + j] = detail::Dot(q + h * D, k, D) * scale;
  }
  for (int64_t h = 0; h < group; ++h) {
    float* s = scratch + h * len;
    float m = s[0];
    for (int64_t j = 1; j < len; ++j) m = std::fmax(m, s[j]);
    double sum = 0;
    for (int64_t j = 0; j < len; ++j) sum += (s[j] = std::exp(s[j] - m));
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < len; ++j) s[j] *= inv;
  }
  for (int64_t i = 0; i < group * D; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < len; ++j) {
    const float* v = kv.v_blocks[j / bt] + kv.head_offset + (j % bt) * kv.row_stride;
    for (int64_t h = 0; h < group; ++h) {
      const float p = scratch[h * len + j];
      for (int64_t d = 0; d < D; ++d) out[h * D + d] += p * v[d];
    }
  }
}

void AttendGroup(const float* q, int64_t group, int64_t D, const KvHeadView& kv, float scale, float* scratch,
                 float* out) {
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512: return AttendGroupAvx512(q, group, D, kv, scale, scratch, out);
    case KernelIsa::kAvx2: return AttendGroupAvx2(q, group, D, kv, scale, scratch, out);
    default: return AttendGroupPortable(q, group, D, kv, scale, scratch, out);
  }
}

}  // namespace m2
