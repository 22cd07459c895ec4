// Portable part of the int16-activation path (linear_int16.h): quantizing activations, the
// reference kernel the SIMD ones are tested against, and the choice of kernel.
#include "kernels/linear_int16.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

float Fp8GroupToInt16(const uint8_t* codes, float block_scale, int16_t* q) {
  int top = 0;
  for (int i = 0; i < kQuantGroup; ++i) top = std::max(top, codes[i] & 0x7f);
  if (top == 0x7f) {  // a NaN code
    for (int i = 0; i < kQuantGroup; ++i) q[i] = 0;
    return std::numeric_limits<float>::quiet_NaN();
  }
  const int s = std::max(0, (top >> 3) - 8);
  const float up = std::ldexp(1.0f, 9 - s);
  // v x 2^(9 - s) is exact in fp32 (|v| <= 448), so nearbyint is the one rounding.
  for (int i = 0; i < kQuantGroup; ++i) q[i] = static_cast<int16_t>(std::nearbyint(Fp8E4M3ToF32(codes[i]) * up));
  return block_scale * std::ldexp(1.0f, s - 9);
}

bool Fp8FitsInt16Groups(const LinearWeight& w) {
  return w.format == WeightFormat::kFp8Block && w.cols % kQuantGroup == 0 && w.block_cols % kQuantGroup == 0;
}

bool LinearInt16RowsReference(const LinearWeight& w, const Int16Activations& a, float* y, int64_t r0, int64_t r1) {
  const bool fp8 = Fp8FitsInt16Groups(w);
  if (w.format != WeightFormat::kQ8 && !fp8) return false;
  const int64_t K = w.cols, G = K / kQuantGroup;
  std::vector<int16_t> fq(fp8 ? static_cast<size_t>(K) : 0);
  std::vector<float> fs(fp8 ? static_cast<size_t>(G) : 0);
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* p = fp8 ? nullptr : static_cast<const int8_t*>(w.data) + r * K;
    const uint16_t* s = fp8 ? nullptr : static_cast<const uint16_t*>(w.scale) + r * G;
    if (fp8) ConvertFp8Row(w, r, Fp8GroupToInt16, fq.data(), fs.data());  // the row converted per group
    for (int64_t t = 0; t < a.n; ++t) {
      const int16_t* xq = a.q + t * K;
      float acc = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        int32_t dot = 0;
        if (fp8)
          for (int64_t i = g * kQuantGroup; i < (g + 1) * kQuantGroup; ++i) dot += fq[static_cast<size_t>(i)] * xq[i];
        else
          for (int64_t i = g * kQuantGroup; i < (g + 1) * kQuantGroup; ++i) dot += p[i] * xq[i];
        const float sw = fp8 ? fs[static_cast<size_t>(g)] : F16ToF32(s[g]);
        acc = std::fma(static_cast<float>(dot), sw * a.d[t * G + g], acc);
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
  if (n <= kMaxGemvTokens || Int16GemmLanes() == 0) return false;
  if (w.activations == ActivationMode::kInt16DecodeInt16Prefill) return w.format == WeightFormat::kQ8;
  return w.activations == ActivationMode::kInt16Prefill && Fp8FitsInt16Groups(w);
}

int64_t Int16GemmLanes() {
  const KernelIsa isa = ActiveIsa();
  if (isa == KernelIsa::kAvx512 && Cpu().avx512_vnni) return 16;
  return isa == KernelIsa::kPortable ? 0 : 8;
}

bool Int16KernelsAvailable() { return ActiveIsa() != KernelIsa::kPortable; }

}  // namespace m2
