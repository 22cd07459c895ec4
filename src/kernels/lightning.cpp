#include "kernels/lightning.h"

#include <cmath>

#include "base/check.h"
#include "base/cpu.h"

namespace m2 {

namespace {

// e^(-x) in fp32, computed in double (exact to the last bit for the tables); 0 below
// 1e-30 so that no denormal reaches the FMAs (a product of such a factor with the O(1)
// values of q, k, v, S is far below the fp32 resolution of an output).
float Decay(double x) {
  const double e = std::exp(-x);
  return e < 1e-30 ? 0.0f : static_cast<float>(e);
}

void CheckArgs(int64_t n, int64_t head_dim, float slope) {
  M2_CHECK(n >= 0 && head_dim > 0, "lightning attention over {} tokens of head dim {}", n, head_dim);
  M2_CHECK(slope >= 0.0f && std::isfinite(slope), "lightning attention slope {}", slope);
}

}  // namespace

namespace detail {

float LightningDecayTables(float slope, int64_t m, float* rev, float* qdecay) {
  const double s = slope;
  const int64_t mp = LightningPaddedBlock(m);
  for (int64_t x = 0; x < m; ++x) rev[x] = Decay(s * static_cast<double>(m - 1 - x));
  for (int64_t x = m; x < m + mp; ++x) rev[x] = 0.0f;
  for (int64_t i = 0; i < m; ++i) qdecay[i] = Decay(s * static_cast<double>(i + 1));
  return Decay(s * static_cast<double>(m));
}

float LightningStepDecay(float slope) { return Decay(slope); }

}  // namespace detail

int64_t LightningScratchFloats(int64_t head_dim, int64_t block) {
  return detail::LightningScratchLayout(head_dim, block).total;
}

// The portable loops: the definitions written out, ordered so that the innermost loop
// runs over contiguous floats (the compiler vectorizes it with the base ISA).
void LightningRecurrentPortable(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t D,
                                float slope, float* state, float* out, int64_t out_stride) {
  const float r = detail::LightningStepDecay(slope);
  for (int64_t t = 0; t < n; ++t) {
    const float* qt = q + t * stride;
    const float* kt = k + t * stride;
    const float* vt = v + t * stride;
    float* o = out + t * out_stride;
    for (int64_t e = 0; e < D; ++e) o[e] = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      float* row = state + d * D;
      const float kd = kt[d], qd = qt[d];
      for (int64_t e = 0; e < D; ++e) {
        row[e] = r * row[e] + kd * vt[e];
        o[e] += qd * row[e];
      }
    }
  }
}

void LightningBlockedPortable(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t D,
                              float slope, int64_t block, float* state, float* out, int64_t out_stride,
                              float* scratch) {
  const detail::LightningScratch layout = detail::LightningScratchLayout(D, block);
  float* rev = scratch + layout.rev;
  float* qdecay = scratch + layout.qdecay;
  int64_t table_m = 0;
  float state_decay = 0.0f;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t m = n - b0 < block ? n - b0 : block;
    if (m != table_m) state_decay = detail::LightningDecayTables(slope, m, rev, qdecay), table_m = m;
    const float* qb = q + b0 * stride;
    const float* kb = k + b0 * stride;
    const float* vb = v + b0 * stride;
    for (int64_t i = 0; i < m; ++i) {
      const float* qi = qb + i * stride;
      float* o = out + (b0 + i) * out_stride;
      // Inter-block: e^(-s(i+1)) q_i S.
      for (int64_t e = 0; e < D; ++e) o[e] = 0.0f;
      for (int64_t d = 0; d < D; ++d) {
        const float a = qi[d];
        const float* row = state + d * D;
        for (int64_t e = 0; e < D; ++e) o[e] += a * row[e];
      }
      for (int64_t e = 0; e < D; ++e) o[e] *= qdecay[i];
      // Intra-block: sum_{j<=i} e^(-s(i-j)) (q_i . k_j) v_j.
      for (int64_t j = 0; j <= i; ++j) {
        const float* kj = kb + j * stride;
        const float* vj = vb + j * stride;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
        const float w = dot * rev[m - 1 - i + j];
        for (int64_t e = 0; e < D; ++e) o[e] += w * vj[e];
      }
    }
    // S = e^(-s m) S + sum_j e^(-s(m-1-j)) k_j^T v_j.
    for (int64_t d = 0; d < D; ++d) {
      float* row = state + d * D;
      for (int64_t e = 0; e < D; ++e) row[e] *= state_decay;
      for (int64_t j = 0; j < m; ++j) {
        const float a = kb[j * stride + d] * rev[j];
        const float* vj = vb + j * stride;
        for (int64_t e = 0; e < D; ++e) row[e] += a * vj[e];
      }
    }
  }
}

void LightningBlocked(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                      float slope, int64_t block, float* state, float* out, int64_t out_stride, float* scratch) {
  CheckArgs(n, head_dim, slope);
  M2_CHECK(block > 0, "lightning attention block {}", block);
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512:
      return LightningBlockedAvx512(q, k, v, stride, n, head_dim, slope, block, state, out, out_stride, scratch);
    case KernelIsa::kAvx2:
      return LightningBlockedAvx2(q, k, v, stride, n, head_dim, slope, block, state, out, out_stride, scratch);
    default:
      return LightningBlockedPortable(q, k, v, stride, n, head_dim, slope, block, state, out, out_stride, scratch);
  }
}

void LightningRecurrent(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t head_dim,
                        float slope, float* state, float* out, int64_t out_stride) {
  CheckArgs(n, head_dim, slope);
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512:
      return LightningRecurrentAvx512(q, k, v, stride, n, head_dim, slope, state, out, out_stride);
    case KernelIsa::kAvx2:
      return LightningRecurrentAvx2(q, k, v, stride, n, head_dim, slope, state, out, out_stride);
    default:
      return LightningRecurrentPortable(q, k, v, stride, n, head_dim, slope, state, out, out_stride);
  }
}

}  // namespace m2
