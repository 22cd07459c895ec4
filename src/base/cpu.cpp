#include "base/cpu.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/check.h"

namespace m2 {

namespace {

// Whether the OS saves all the state components in `mask` (XCR0 bits) on a context switch.
bool OsSavesState(uint32_t mask) {
  uint32_t a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & mask) == mask;
}
bool OsSavesAvxState() { return OsSavesState(0x6); }          // SSE and AVX
bool OsSavesAvx512State() { return OsSavesState(0xe6); }      // and the three AVX-512 components
bool OsSavesTileState() { return OsSavesState(0x60000); }     // XTILECFG and XTILEDATA

CpuFeatures Detect() {
  CpuFeatures f;
  uint32_t a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  f.intel = std::strcmp(vendor, "GenuineIntel") == 0;
  f.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const int base_family = static_cast<int>((a >> 8) & 0xf);
  f.family = base_family == 0xf ? base_family + static_cast<int>((a >> 20) & 0xff) : base_family;
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
  f.avx512_vbmi = z && (c & bit_AVX512VBMI);
  f.gfni = avx_os && (c & bit_GFNI);
  f.amx_bf16 = z && OsSavesTileState() && (d & (1u << 24)) && (d & (1u << 22));  // AMX-TILE, AMX-BF16
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx512_bf16 = z && (a & bit_AVX512BF16);
    f.avx_vnni = avx_os && (a & (1u << 4));  // CPUID.(EAX=7,ECX=1):EAX[4]
  }
  return f;
}

}  // namespace

std::string CpuFeatures::Describe() const {
  std::string s;
  const auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_vbmi, "avx512_vbmi");
  add(gfni, "gfni");
  add(avx_vnni, "avx_vnni");
  add(amx_bf16, "amx_bf16");
  return s.empty() ? "none" : s;
}

const CpuFeatures& Cpu() {
  static const CpuFeatures f = Detect();
  return f;
}

Result<KernelIsa> ResolveKernelIsa(const char* m2_kernels, const CpuFeatures& cpu) {
  const KernelIsa best = cpu.has_avx512() ? KernelIsa::kAvx512 : cpu.has_avx2() ? KernelIsa::kAvx2 : KernelIsa::kPortable;
  if (m2_kernels == nullptr || *m2_kernels == '\0') return best;
  const std::string v = m2_kernels;
  KernelIsa want;
  if (v == "portable") want = KernelIsa::kPortable;
  else if (v == "avx2") want = KernelIsa::kAvx2;
  else if (v == "avxvnni") want = KernelIsa::kAvx2;
  else if (v == "avx512") want = KernelIsa::kAvx512;
  else
    return Error("M2_KERNELS: expected portable, avx2, avxvnni or avx512 (or unset for the best this CPU has), found '{}'",
                 v);
  if (v == "avxvnni" && (!cpu.has_avx2() || !cpu.avx_vnni))
    return Error("M2_KERNELS=avxvnni, but this CPU lacks AVX-VNNI or AVX2 (the avxvnni kernels need avx2, fma, f16c and "
                 "avx_vnni; it has: {}); use avx2 or portable, or unset it",
                 cpu.Describe());
  if (want == KernelIsa::kAvx512 && !cpu.has_avx512())
    return Error("M2_KERNELS=avx512, but this CPU lacks AVX-512 (the avx512 kernels need avx512f, avx512bw, avx512vl, fma "
                 "and f16c; it has: {}); use avx2 or portable, or unset it",
                 cpu.Describe());
  if (want == KernelIsa::kAvx2 && !cpu.has_avx2())
    return Error("M2_KERNELS=avx2, but this CPU lacks AVX2 (the avx2 kernels need avx2, fma and f16c; it has: {}); use "
                 "portable, or unset it",
                 cpu.Describe());
  return want;
}

Status CheckKernelsEnv() {
  auto isa = ResolveKernelIsa(std::getenv("M2_KERNELS"), Cpu());
  if (!isa.ok()) return isa.status();
  auto amx = ResolveAmx(std::getenv("M2_AMX"));
  if (!amx.ok()) return amx.status();
  auto rows = ResolveDecodeRows(std::getenv("M2_DECODE_ROWS"));
  if (!rows.ok()) return rows.status();
  auto prefetch = ResolveDecodePrefetch(std::getenv("M2_DECODE_PREFETCH"));
  if (!prefetch.ok()) return prefetch.status();
  auto fp8 = ResolveFp8Decode(std::getenv("M2_FP8_DECODE"));
  return fp8.ok() ? Status() : fp8.status();
}

namespace {
// A two-way switch from the environment: `on` gives 1, `off` 0, unset or empty -1; anything
// else an error naming the variable, what each choice does and the value found.
Result<int> ResolveSwitch(const char* value, const char* var, const char* on, const char* off, const char* choices) {
  if (value == nullptr || *value == '\0') return -1;
  if (std::strcmp(value, on) == 0) return 1;
  if (std::strcmp(value, off) == 0) return 0;
  return Error("{}: expected {}, found '{}'", var, choices, value);
}
}  // namespace

Result<int> ResolveFp8Decode(const char* m2_fp8_decode) {
  return ResolveSwitch(m2_fp8_decode, "M2_FP8_DECODE", "gfni", "table",
                       "gfni (the bf16 FP8 decode kernel moves each code's bits into bf16; subnormal codes drop out), "
                       "table (byte-table lookups: every code exact, slower) or unset (gfni)");
}

Result<int> ResolveDecodePrefetch(const char* m2_decode_prefetch) {
  return ResolveSwitch(m2_decode_prefetch, "M2_DECODE_PREFETCH", "l2", "l1+l2",
                       "l2 (the decode kernels prefetch weights into L2 only), l1+l2 (into L1 and L2) or unset (l2 "
                       "where they take one row a pass)");
}

Result<int> ResolveDecodeRows(const char* m2_decode_rows) {
  return ResolveSwitch(m2_decode_rows, "M2_DECODE_ROWS", "1", "own",
                       "1 (the decode kernels take one weight row a pass), own (each kernel's own count) or unset (what "
                       "this CPU was measured to want)");
}

bool AvxVnniAsked() {
  static const bool asked = [] {
    const char* v = std::getenv("M2_KERNELS");
    return v != nullptr && std::strcmp(v, "avxvnni") == 0;
  }();
  return asked;
}

bool Avx2FamilyUsesAvxVnni(const CpuFeatures& cpu, bool asked) { return cpu.avx_vnni && (!cpu.has_avx512() || asked); }

const char* ActiveKernelsName() {
  return ActiveIsa() == KernelIsa::kAvx2 && AvxVnniAsked() ? "avxvnni" : IsaName(ActiveIsa());
}

Result<bool> ResolveAmx(const char* m2_amx) {
  if (m2_amx == nullptr || *m2_amx == '\0' || std::strcmp(m2_amx, "1") == 0) return true;
  if (std::strcmp(m2_amx, "0") == 0) return false;
  return Error("M2_AMX: expected 0 (never use the tile unit) or 1 (use it where the CPU has it; the same as unset), "
               "found '{}'",
               m2_amx);
}

KernelIsa ActiveIsa() {
  static const KernelIsa isa = [] {
    auto r = ResolveKernelIsa(std::getenv("M2_KERNELS"), Cpu());
    M2_CHECK(r.ok(), "{}", r.status().message());
    return *r;
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
