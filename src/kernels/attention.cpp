#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/cpu.h"
#include "base/dtype.h"
#include "kernels/dot.h"

namespace m2 {

const char* KvDtypeName(KvDtype t) {
  switch (t) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kBf16: return "bf16";
    case KvDtype::kQ8: return "q8";
  }
  return "?";
}

void StoreKv(const float* src, int64_t n, KvDtype dtype, void* dst) {
  if (dtype == KvDtype::kF32) {
    float* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = src[i];
  } else if (dtype == KvDtype::kBf16) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
  } else {
    M2_CHECK(n % kKvQ8Group == 0, "a q8 KV row holds a multiple of {} values, not {}", kKvQ8Group, n);
    int8_t* d = static_cast<int8_t*>(dst);
    char* scales = static_cast<char*>(dst) + n;
    for (int64_t g = 0; g < n; g += kKvQ8Group) {
      float amax = 0.0f;
      bool finite = true;
      for (int64_t i = g; i < g + kKvQ8Group; ++i) {
        finite &= std::isfinite(src[i]);
        amax = std::max(amax, std::fabs(src[i]));
      }
      const float scale = finite ? amax / 127.0f : NAN;
      const float inv = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
      for (int64_t i = g; i < g + kKvQ8Group; ++i) {
        // |src * inv| <= 127 up to rounding; the clamp keeps a rounding up at the edge in range.
        const float r = finite ? std::nearbyint(src[i] * inv) : 0.0f;
        d[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
      }
      std::memcpy(scales + g / kKvQ8Group * sizeof(float), &scale, sizeof scale);
    }
  }
}

void LoadKv(const void* src, int64_t n, KvDtype dtype, float* dst) {
  if (dtype == KvDtype::kF32) {
    const float* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
  } else if (dtype == KvDtype::kBf16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
  } else {
    M2_CHECK(n % kKvQ8Group == 0, "a q8 KV row holds a multiple of {} values, not {}", kKvQ8Group, n);
    const int8_t* s = static_cast<const int8_t*>(src);
    const char* scales = static_cast<const char*>(src) + n;
    for (int64_t g = 0; g < n; g += kKvQ8Group) {
      float scale;
      std::memcpy(&scale, scales + g / kKvQ8Group * sizeof(float), sizeof scale);
      for (int64_t i = g; i < g + kKvQ8Group; ++i) dst[i] = static_cast<float>(s[i]) * scale;
    }
  }
}

namespace {

// Row j of K or V (base = kv.k_base or kv.v_base) in fp32: a pointer into the arena for
// fp32, else widened into tmp (D floats).
const float* RowF32(const void* base, const KvHeadView& kv, int64_t j, int64_t D, float* tmp) {
  const int64_t bt = kv.block_tokens;
  const int64_t off = kv.blocks[j / bt] * kv.block_stride + kv.head_offset + (j % bt) * kv.row_stride;
  if (kv.dtype == KvDtype::kF32) return static_cast<const float*>(base) + off;
  LoadKv(static_cast<const char*>(base) + off * KvDtypeBytes(kv.dtype), D, kv.dtype, tmp);
  return tmp;
}

}  // namespace

void AttendGroupPortable(const float* q, int64_t group, int64_t D, const KvHeadView& kv, float scale, float* scratch,
                         float* out) {
  const int64_t len = kv.length;
  std::vector<float> tmp(kv.dtype == KvDtype::kF32 ? 0 : D);  // a bf16 or q8 row widened
  for (int64_t j = 0; j < len; ++j) {
    const float* k = RowF32(kv.k_base, kv, j, D, tmp.data());
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
    const float* v = RowF32(kv.v_base, kv, j, D, tmp.data());
    for (int64_t h = 0; h < group; ++h) {
      const float p = scratch[h * len + j];
      for (int64_t d = 0; d < D; ++d) out[h * D + d] += p * v[d];
    }
  }
}

void AttendQueriesPortable(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t D,
                           const KvHeadView& kv, float scale, float* scratch, float* out, int64_t out_stride) {
  for (int64_t j = 0; j < nq; ++j) {
    KvHeadView one = kv;
    one.length = kv.length + j;
    AttendGroupPortable(q + j * q_stride, group, D, one, scale, scratch, out + j * out_stride);
  }
}

bool AttentionBf16Available() { return ActiveIsa() == KernelIsa::kAvx512 && Cpu().avx512_bf16; }

void AttendQueries(const float* q, int64_t q_stride, int64_t nq, int64_t group, int64_t D, const KvHeadView& kv,
                   float scale, float* scratch, float* out, int64_t out_stride, AttentionMath math) {
  if (math == AttentionMath::kBf16 && AttentionBf16Available())
    return AttendQueriesAvx512Bf16(q, q_stride, nq, group, D, kv, scale, scratch, out, out_stride);
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512: return AttendQueriesAvx512(q, q_stride, nq, group, D, kv, scale, scratch, out, out_stride);
    case KernelIsa::kAvx2: return AttendQueriesAvx2(q, q_stride, nq, group, D, kv, scale, scratch, out, out_stride);
    default: return AttendQueriesPortable(q, q_stride, nq, group, D, kv, scale, scratch, out, out_stride);
  }
}

void AttendGroup(const float* q, int64_t group, int64_t D, const KvHeadView& kv, float scale, float* scratch,
                 float* out) {
  AttendQueries(q, group * D, 1, group, D, kv, scale, scratch, out, group * D);
}

}  // namespace m2
