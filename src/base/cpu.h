// What this CPU can do, detected once at run time (kernels dispatch on it).
#pragma once

#include <string>

#include "base/status.h"

namespace m2 {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_bf16 = false, avx512_vnni = false;
  bool avx512_vbmi = false;
  bool gfni = false;  // Galois-field byte affine transforms (vgf2p8affineqb): any bit permutation of each byte
  bool avx_vnni = false;  // the VEX-encoded vpdpbusd (needs only AVX state)
  // The tile unit (AMX-TILE with AMX-BF16), its state enabled by the OS in XCR0. Linux also
  // wants each process to ask for it (RequestAmxPermission in kernels/linear_bf16.h).
  bool amx_bf16 = false;
  // The vendor (CPUID leaf 0): GenuineIntel. Intel cores, for one, take a microcode assist
  // (about 100 cycles) for a multiply whose input or result is an fp32 subnormal, AMD's do
  // not (kernels/linear.h, SubnormalsAreSlow).
  bool intel = false;
  bool amd = false;  // AuthenticAMD
  // The display family (CPUID leaf 1: base family, plus the extended family where the base
  // is 15): 0x19 for Zen 3 / Zen 4, 0x1A for Zen 5; 6 for Intel's cores.
  int family = 0;

  bool has_avx512() const { return avx512f && avx512bw && avx512vl && fma && f16c; }
  bool has_avx2() const { return avx2 && fma && f16c; }
  std::string Describe() const;
};

const CpuFeatures& Cpu();

// Which kernel family runs: "avx512", "avx2" or "portable", the best this CPU has unless
// M2_KERNELS in the environment names one (for testing the other paths on a bigger CPU).
// M2_KERNELS unset or empty: the best; avxvnni: avx2 with AVX-VNNI (AvxVnniAsked below).
// A value that is not one of these, or a family this CPU lacks, is an error
// (ResolveKernelIsa), never silently replaced by another.
enum class KernelIsa { kPortable, kAvx2, kAvx512 };
// The family for an M2_KERNELS value (nullptr or "": unset) on a CPU with `cpu`.
Result<KernelIsa> ResolveKernelIsa(const char* m2_kernels, const CpuFeatures& cpu);
// Checks the environment's M2_KERNELS; programs call it at start to report a bad value as
// an error. ActiveIsa() stops the program (a check failure with the same message) if
// nobody did.
Status CheckKernelsEnv();
KernelIsa ActiveIsa();
// M2_KERNELS=avxvnni: the avx2 family with its int8 products on AVX-VNNI (the 256-bit
// vpdpbusd) instead of vpmaddubsw + vpmaddwd, as a CPU with AVX2 and AVX-VNNI but no AVX-512
// runs it (Intel's client cores from Alder Lake on, where M2_KERNELS unset picks the same).
// So an AVX-512 machine with AVX-VNNI measures that kind of CPU too; M2_KERNELS=avx2 there
// stands for an AVX2-only CPU and keeps vpmaddubsw. ActiveIsa() is kAvx2 under it.
bool AvxVnniAsked();
// Whether the avx2 family's int8 products run on AVX-VNNI on a CPU with `cpu`: where it has
// AVX-VNNI and either no AVX-512 or `asked` (M2_KERNELS=avxvnni).
bool Avx2FamilyUsesAvxVnni(const CpuFeatures& cpu, bool asked);
// The active kernels' name for reports: IsaName(ActiveIsa()), or "avxvnni" under
// M2_KERNELS=avxvnni.
const char* ActiveKernelsName();
// M2_AMX: unset, empty or 1: the bf16 prefill GEMM uses the tile unit where the CPU has
// one (AMX-BF16); 0: never (the AVX-512 BF16 kernels). Another value is an error.
Result<bool> ResolveAmx(const char* m2_amx);
// M2_DECODE_ROWS: how many weight rows the one-token decode kernels take a pass (one
// stream of weights per row): "1" one row, "own" each kernel's own count (2 to 8), unset or
// empty: what this CPU was measured to want (kernels/linear.h, DecodeOneRow). Returns 1, 0
// or -1 (unset); another value is an error.
Result<int> ResolveDecodeRows(const char* m2_decode_rows);
// M2_DECODE_PREFETCH: how the decode kernels prefetch the weights they stream
// (kernels/linear.h, RowPrefetch): "l2" into L2 only, "l1+l2" into L1 and L2, unset or
// empty: l2 where the kernels take one row a pass, else l1+l2. Returns 1 (l2), 0 (l1+l2) or
// -1 (unset); another value is an error.
Result<int> ResolveDecodePrefetch(const char* m2_decode_prefetch);
// M2_FP8_DECODE: how the bf16-activation FP8 decode kernel turns codes into bf16
// (kernels/linear.h, Fp8GemvGfni): "gfni" bit moves (subnormal codes drop out of the sums),
// "table" byte-table lookups (every code exact, slower), unset or empty: gfni. Returns 1
// (gfni), 0 (table) or -1 (unset); another value is an error.
Result<int> ResolveFp8Decode(const char* m2_fp8_decode);
const char* IsaName(KernelIsa isa);

}  // namespace m2
