// Portable part of the int16-activation path (linear_int16.h): quantizing activations, the
// reference kernel the SIMD ones are tested against, and the choice of kernel.
#include "kernels/linear_int16.h"

#include <cmath>
#include <limits>

#include "base/dtype.h"
#include "kernels/linear_int8.h"

namespace m2 {

void QuantizeActivationsInt16(const float* x, int64_t n, int64_t cols, int16_t* q, float* d) {
  const int64_t groups = cols / kQuantGroup;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + t * cols + g * kQuantGroup;
      int16_t* qg = q + t * cols + g * kQuantGroup;
      float amax;
      const bool finite = GroupAbsMax(xg, &amax);
      const int64_t k = t * groups + g;
      if (!finite) {
        for (int i = 0; i < kQuantGroup; ++i) qg[i] = 0;
        d[k] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
      // |x * inv| <= 32767 (1 + 2^-23): rounds to at most 32767.
      for (int i = 0; i < kQuantGroup; ++i) qg[i] = static_cast<int16_t>(std::nearbyint(xg[i] * inv));
      d[k] = amax / 32767.0f;
    }
  }
}

bool LinearInt16RowsReference(const LinearWeight& w, const Int16Activations& a, float* y, int64_t r0, int64_t r1) {
  if (w.format != WeightFormat::kQ8) return false;
  const int64_t K = w.cols, G = K / kQuantGroup;
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* p = static_cast<const int8_t*>(w.data) + r * K;
    const uint16_t* s = static_cast<const uint16_t*>(w.scale) + r * G;
    for (int64_t t = 0; t < a.n; ++t) {
      const int16_t* xq = a.q + t * K;
      float acc = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        int32_t dot = 0;
        for (int64_t i = g * kQuantGroup; i < (g + 1) * kQuantGroup; ++i) dot += p[i] * xq[i];
        acc = std::fma(static_cast<float>(dot), F16ToF32(s[g]) * a.d[t * G + g], acc);
      }
      y[t * w.rows + r] = acc;
    }
  }
  return true;
}

Int16RowsFn Int16RowsKernel(KernelIsa isa, const CpuFeatures& cpu) {
  switch (isa) {
    case KernelIsa::kPortable: return LinearInt16RowsReference;
    case KernelIsa::kAvx512: return cpu.avx512_vnni ? LinearInt16RowsAvx512Vnni : LinearInt16RowsAvx2;
    case KernelIsa::kAvx2: return LinearInt16RowsAvx2;
  }
  return LinearInt16RowsReference;
}

const char* Int16RowsKernelName(Int16RowsFn fn) {
  if (fn == LinearInt16RowsAvx2) return "avx2";
  if (fn == LinearInt16RowsAvx512Vnni) return "avx512vnni";
  return "reference";
}

bool UsesInt16Gemm(const LinearWeight& w, int64_t n) {
  return n > kMaxGemvTokens && w.format == WeightFormat::kQ8 &&
         w.activations == ActivationMode::kInt16DecodeInt16Prefill && Int16GemmLanes() > 0;
}

int64_t Int16GemmLanes() {
  const KernelIsa isa = ActiveIsa();
  if (isa == KernelIsa::kAvx512 && Cpu().avx512_vnni) return 16;
  return isa == KernelIsa::kPortable ? 0 : 8;
}

bool Int16KernelsAvailable() { return ActiveIsa() != KernelIsa::kPortable; }

}  // namespace m2
