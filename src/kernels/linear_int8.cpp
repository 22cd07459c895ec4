// Portable part of the int8-activation path: quantizing activations and the reference
// kernel the AVX2 one is tested against (linear_int8.h).
#include "kernels/linear_int8.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/cpu.h"
#include "base/dtype.h"

namespace m2 {

bool GroupAbsMax(const float* xg, float* amax) {
  float m = 0.0f;
  bool finite = true;
  for (int i = 0; i < kQuantGroup; ++i) {
    finite = finite && std::isfinite(xg[i]);
    m = std::max(m, std::fabs(xg[i]));
  }
  *amax = m;
  return finite;
}

void QuantizeActivationsInt8(const float* x, int64_t n, int64_t cols, int8_t* q, float* d, float* c) {
  const int64_t groups = cols / kQuantGroup;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + t * cols + g * kQuantGroup;
      int8_t* qg = q + t * cols + g * kQuantGroup;
      float amax;
      const bool finite = GroupAbsMax(xg, &amax);
      const int64_t k = t * groups + g;
      if (!finite) {
        for (int i = 0; i < kQuantGroup; ++i) qg[i] = 0;
        d[k] = c[k] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int i = 0; i < kQuantGroup; ++i) {
        const int v = static_cast<int>(std::nearbyint(xg[i] * inv));  // |v| <= 127: x * inv <= 127 exactly rounded
        qg[i] = static_cast<int8_t>(v);
        sum += v;
      }
      d[k] = amax / 127.0f;
      c[k] = -8.0f * d[k] * static_cast<float>(sum);
    }
  }
}

float QuantizeFp8GroupInt8(const uint8_t* codes, float block_scale, int8_t* q) {
  float v[kQuantGroup], d, c;
  for (int i = 0; i < kQuantGroup; ++i) v[i] = Fp8E4M3ToF32(codes[i]);  // the table: NaN codes as NaN
  QuantizeActivationsInt8(v, 1, kQuantGroup, q, &d, &c);
  return d * block_scale;
}

bool Fp8FitsInt8Groups(const LinearWeight& w) {
  return w.format == WeightFormat::kFp8Block && w.cols % kQuantGroup == 0 && w.block_cols % kQuantGroup == 0;
}

bool LinearInt8RowsReference(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t r1) {
  const bool q4 = w.format == WeightFormat::kQ4, fp8 = Fp8FitsInt8Groups(w);
  if (!q4 && !fp8 && w.format != WeightFormat::kQ8) return false;
  const int64_t K = w.cols, G = K / kQuantGroup;
  std::vector<int8_t> fq(fp8 ? static_cast<size_t>(K) : 0);
  std::vector<float> fs(fp8 ? static_cast<size_t>(G) : 0);
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* s = fp8 ? nullptr : static_cast<const uint16_t*>(w.scale) + r * G;
    if (fp8) ConvertFp8Row(w, r, QuantizeFp8GroupInt8, fq.data(), fs.data());  // the row requantized per group
    for (int64_t t = 0; t < a.n; ++t) {
      const int8_t* xq = a.q + t * K;
      float acc = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        int32_t dot = 0;
        if (q4) {
          const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * (K / 2) + g * 16;
          for (int i = 0; i < 16; ++i) {
            dot += ((p[i] & 0xf) - 8) * xq[g * kQuantGroup + i];
            dot += ((p[i] >> 4) - 8) * xq[g * kQuantGroup + 16 + i];
          }
        } else {
          const int8_t* p = fp8 ? fq.data() + g * kQuantGroup : static_cast<const int8_t*>(w.data) + r * K + g * kQuantGroup;
          for (int i = 0; i < kQuantGroup; ++i) dot += p[i] * xq[g * kQuantGroup + i];
        }
        // One fused multiply-add per group, as the int8 GEMM's epilogue (linear_int8_gemm_simd.inc).
        const float sw = fp8 ? fs[static_cast<size_t>(g)] : F16ToF32(s[g]);
        acc = std::fma(static_cast<float>(dot), sw * a.d[t * G + g], acc);
      }
      y[t * w.rows + r] = acc;
    }
  }
  return true;
}

Int8GemmKernel Int8GemmFor(WeightFormat f) {
  if (f != WeightFormat::kQ8 && f != WeightFormat::kQ4 && f != WeightFormat::kFp8Block) return Int8GemmKernel::kNone;
  const KernelIsa isa = ActiveIsa();
  const CpuFeatures& cpu = Cpu();
  if (isa == KernelIsa::kAvx512 && cpu.avx512_vnni) return Int8GemmKernel::kAvx512Vnni;
  if (cpu.avx_vnni && (isa == KernelIsa::kAvx512 || (isa == KernelIsa::kAvx2 && Avx2FamilyUsesAvxVnni(cpu, AvxVnniAsked()))))
    return Int8GemmKernel::kAvxVnni;
  if (isa != KernelIsa::kPortable) return Int8GemmKernel::kAvx2;
  return Int8GemmKernel::kNone;
}

int64_t Int8GemmLanes(Int8GemmKernel k) { return k == Int8GemmKernel::kAvx512Vnni ? 16 : 8; }

bool UsesInt8Gemm(const LinearWeight& w, int64_t n) {
  if (n <= kMaxGemvTokens) return false;
  if (w.activations == ActivationMode::kInt8DecodeInt8Prefill)
    return w.format == WeightFormat::kQ8 || w.format == WeightFormat::kQ4;
  return w.activations == ActivationMode::kInt8Prefill && Fp8FitsInt8Groups(w);
}

Int8RowsFn Int8RowsKernel(KernelIsa isa, const CpuFeatures& cpu) {
  switch (isa) {
    case KernelIsa::kPortable: return LinearInt8RowsReference;
    case KernelIsa::kAvx512:
      if (cpu.avx512_vnni) return LinearInt8RowsAvx512Vnni;
      return cpu.avx_vnni ? LinearInt8RowsAvxVnni : LinearInt8RowsAvx2;
    case KernelIsa::kAvx2: return Avx2FamilyUsesAvxVnni(cpu, AvxVnniAsked()) ? LinearInt8RowsAvxVnni : LinearInt8RowsAvx2;
  }
  return LinearInt8RowsReference;
}

Int8RowsFn Int8RowsKernelFor(KernelIsa isa, const CpuFeatures& cpu, WeightFormat f, int64_t n) {
  if (f == WeightFormat::kQ8 && n <= 2 && cpu.intel && isa != KernelIsa::kPortable) return LinearInt8RowsAvx2;
  return Int8RowsKernel(isa, cpu);
}

const char* Int8RowsKernelName(Int8RowsFn fn) {
  if (fn == LinearInt8RowsAvx2) return "avx2";
  if (fn == LinearInt8RowsAvx512Vnni) return "avx512vnni";
  if (fn == LinearInt8RowsAvxVnni) return "avxvnni";
  return "reference";
}

}  // namespace m2
