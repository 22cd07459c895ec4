// What this CPU can do, detected once at run time (kernels dispatch on it).
#pragma once

#include <string>

namespace m2 {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_bf16 = false, avx512_vnni = false;

  bool has_avx512() const { return avx512f && avx512bw && avx512vl && fma && f16c; }
  bool has_avx2() const { return avx2 && fma && f16c; }
  std::string Describe() const;
};

const CpuFeatures& Cpu();

// Which kernel family runs: "avx512", "avx2" or "portable". M2_KERNELS=avx2|portable in
// the environment forces a lower one (for testing the fallbacks on a bigger CPU).
enum class KernelIsa { kPortable, kAvx2, kAvx512 };
KernelIsa ActiveIsa();
const char* IsaName(KernelIsa isa);

}  // namespace m2
