#include "base/cpu.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

namespace m2 {

namespace {

bool OsSavesAvx512State() {
  uint32_t a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6) == 0xe6;  // SSE, AVX and the three AVX-512 state components
}

bool OsSavesAvxState() {
  uint32_t a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0x6) == 0x6;
}

CpuFeatures Detect() {
  CpuFeatures f;
  uint32_t a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool avx_os = OsSavesAvxState();
  f.fma = avx_os && (c & bit_FMA);
  f.f16c = avx_os && (c & bit_F16C);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = avx_os && (b & bit_AVX2);
  const bool z = OsSavesAvx512State();
  f.avx512f = z && (b & bit_AVX512F);
  f.avx512bw = z && (b & bit_AVX512BW);
  f.avx512vl = z && (b & bit_AVX512VL);
  f.avx512_vnni = z && (c & bit_AVX512VNNI);
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = z && (a & bit_AVX512BF16);
  return f;
}

}  // namespace

std::string CpuFeatures::Describe() const {
  std::string s;
  const auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_vnni, "avx512_vnni");
  return s.empty() ? "none" : s;
}

const CpuFeatures& Cpu() {
  static const CpuFeatures f = Detect();
  return f;
}

KernelIsa ActiveIsa() {
  static const KernelIsa isa = [] {
    KernelIsa best = Cpu().has_avx512() ? KernelIsa::kAvx512 : Cpu().has_avx2() ? KernelIsa::kAvx2 : KernelIsa::kPortable;
    if (const char* env = std::getenv("M2_KERNELS")) {
      if (std::strcmp(env, "portable") == 0) best = KernelIsa::kPortable;
      else if (std::strcmp(env, "avx2") == 0 && best == KernelIsa::kAvx512) best = KernelIsa::kAvx2;
    }
    return best;
  }();
  return isa;
}

const char* IsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512: return "avx512";
    case KernelIsa::kAvx2: return "avx2";
    default: return "portable";
  }
}

}  // namespace m2
