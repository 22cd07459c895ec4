// Portable part of the bf16-activation prefill path (linear_bf16.h).
#include "kernels/linear_bf16.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/cpu.h"

namespace m2 {

bool Bf16GemmAvailable() { return ActiveIsa() == KernelIsa::kAvx512 && Cpu().avx512_bf16; }

bool RequestAmxPermission() {
  // Linux keeps the tile data state off until a process asks for it (arch_prctl
  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); the permission then holds for all its threads.
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

namespace {
std::atomic<bool> amx_on{true};
}  // namespace

void SetAmxBf16ForTesting(bool on) { amx_on.store(on, std::memory_order_relaxed); }

bool AmxBf16Available() {
  static const bool ok = [] {
    auto allowed = ResolveAmx(std::getenv("M2_AMX"));
    M2_CHECK(allowed.ok(), "{}", allowed.status().message());
    return *allowed && Bf16GemmAvailable() && Cpu().amx_bf16 && Cpu().avx512_vbmi && RequestAmxPermission();
  }();
  return ok && amx_on.load(std::memory_order_relaxed);
}

bool Bf16PrefillBeatsFp32(WeightFormat f) {
  const bool vector = Bf16GemmAvailable() && !Cpu().intel;  // AMD's vdpbf16ps: every format the GEMM takes
  switch (f) {
    case WeightFormat::kBF16:
    case WeightFormat::kFp8Block:
      return vector || AmxBf16Available();
    case WeightFormat::kQ8:
    case WeightFormat::kQ4:
      return vector;
    case WeightFormat::kF32:
    case WeightFormat::kF16:
      return false;
  }
  return false;
}

bool UsesBf16Gemv(const LinearWeight& w, int64_t n) {
  if (w.activations != ActivationMode::kBf16Prefill || n < 1 || n > kMaxGemvTokens) return false;
  // Not on Intel: there vdpbf16ps does 16 multiply-adds a cycle where two FMA ports do 32,
  // and vpermi2b is three uops; with the weights in L2 the kernel ran at 13 GB/s against the
  // exact one's 18 on a Sapphire Rapids VM (on Zen 4 it doubles the exact one's rate).
  if (w.format != WeightFormat::kFp8Block || !Bf16GemmAvailable() || Cpu().intel) return false;
  return GemvBf16Supports(w, Cpu().avx512_vbmi && Cpu().gfni);
}

bool UsesBf16Gemm(const LinearWeight& w, int64_t n) {
  if (w.activations != ActivationMode::kBf16Prefill && w.activations != ActivationMode::kInt8DecodeBf16Prefill &&
      w.activations != ActivationMode::kInt16DecodeBf16Prefill)
    return false;
  if (n <= kMaxGemvTokens || w.cols % 2 != 0) return false;
  if (w.format == WeightFormat::kBF16 || w.format == WeightFormat::kQ8 || w.format == WeightFormat::kQ4) return true;
  return w.format == WeightFormat::kFp8Block && w.block_cols >= 16 && (w.block_cols & (w.block_cols - 1)) == 0;
}

uint16_t RoundToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // zero or subnormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN, quieted
  u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even (a carry into the exponent is right)
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace m2
