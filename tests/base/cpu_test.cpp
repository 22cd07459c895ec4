// M2_KERNELS: the three family names pick that family when the CPU has it; anything else,
// or a family the CPU lacks, is an error that names the choices (never a silent fallback).
#include "base/cpu.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace m2 {
namespace {

CpuFeatures Avx2Only() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  return f;
}
CpuFeatures WithAvx512() {
  CpuFeatures f = Avx2Only();
  f.avx512f = f.avx512bw = f.avx512vl = true;
  return f;
}

TEST(KernelsEnv, UnsetOrEmptyPicksTheBest) {
  EXPECT_EQ(*ResolveKernelIsa(nullptr, WithAvx512()), KernelIsa::kAvx512);
  EXPECT_EQ(*ResolveKernelIsa("", Avx2Only()), KernelIsa::kAvx2);
  EXPECT_EQ(*ResolveKernelIsa(nullptr, CpuFeatures{}), KernelIsa::kPortable);
}

TEST(KernelsEnv, NamesForceThatFamily) {
  EXPECT_EQ(*ResolveKernelIsa("portable", WithAvx512()), KernelIsa::kPortable);
  EXPECT_EQ(*ResolveKernelIsa("avx2", WithAvx512()), KernelIsa::kAvx2);
  EXPECT_EQ(*ResolveKernelIsa("avx512", WithAvx512()), KernelIsa::kAvx512);
  EXPECT_EQ(*ResolveKernelIsa("avx2", Avx2Only()), KernelIsa::kAvx2);
  EXPECT_EQ(*ResolveKernelIsa("portable", CpuFeatures{}), KernelIsa::kPortable);
}

// avxvnni: the avx2 family, with the int8 products on AVX-VNNI; refused on a CPU without it.
// Without asking, an AVX-512 CPU's avx2 family keeps vpmaddubsw (it stands for an AVX2-only
// CPU) and a CPU with AVX-VNNI and no AVX-512 uses it.
TEST(KernelsEnv, AvxVnniIsTheAvx2FamilyWithVnni) {
  CpuFeatures client = Avx2Only();
  client.avx_vnni = true;
  CpuFeatures server = WithAvx512();
  server.avx_vnni = true;
  EXPECT_EQ(*ResolveKernelIsa("avxvnni", client), KernelIsa::kAvx2);
  EXPECT_EQ(*ResolveKernelIsa("avxvnni", server), KernelIsa::kAvx2);
  for (const CpuFeatures& lacking : {Avx2Only(), WithAvx512(), CpuFeatures{}}) {
    auto r = ResolveKernelIsa("avxvnni", lacking);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("lacks AVX-VNNI"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(Avx2FamilyUsesAvxVnni(client, false));
  EXPECT_TRUE(Avx2FamilyUsesAvxVnni(client, true));
  EXPECT_FALSE(Avx2FamilyUsesAvxVnni(server, false));
  EXPECT_TRUE(Avx2FamilyUsesAvxVnni(server, true));
  EXPECT_FALSE(Avx2FamilyUsesAvxVnni(WithAvx512(), true));
}

TEST(KernelsEnv, UnknownValueIsAnErrorNamingTheChoices) {
  for (const char* bad : {"AVX2", "avx-512", "sse", "avx2 ", "auto"}) {
    auto r = ResolveKernelIsa(bad, WithAvx512());
    ASSERT_FALSE(r.ok()) << bad;
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("M2_KERNELS"), std::string::npos) << m;
    EXPECT_NE(m.find("portable, avx2, avxvnni or avx512"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("'") + bad + "'"), std::string::npos) << m;
  }
}

// A bad value of an environment switch: an error naming the variable, the choices and the value.
template <class R>
void ExpectEnvError(const R& r, const char* var, const char* choices, const char* bad) {
  ASSERT_FALSE(r.ok()) << var << "=" << bad;
  const std::string& m = r.status().message();
  EXPECT_NE(m.find(var), std::string::npos) << m;
  EXPECT_NE(m.find(choices), std::string::npos) << m;
  EXPECT_NE(m.find(std::string("'") + bad + "'"), std::string::npos) << m;
}

// M2_AMX: unset, empty or 1 allow the tile unit, 0 forbids it, anything else is an error
// that names the variable, the choices and the value.
TEST(KernelsEnv, AmxSwitch) {
  EXPECT_TRUE(*ResolveAmx(nullptr));
  EXPECT_TRUE(*ResolveAmx(""));
  EXPECT_TRUE(*ResolveAmx("1"));
  EXPECT_FALSE(*ResolveAmx("0"));
  for (const char* bad : {"2", "on", "off", "true", " 1"}) ExpectEnvError(ResolveAmx(bad), "M2_AMX", "expected 0", bad);
}

// The two-way switches (M2_DECODE_ROWS, M2_DECODE_PREFETCH, M2_FP8_DECODE): the two
// choices or unset; anything else an error naming the variable, the choices and the value.
TEST(KernelsEnv, TwoWaySwitches) {
  struct Switch {
    Result<int> (*resolve)(const char*);
    const char *var, *on, *off;
    std::vector<const char*> bad;
  };
  for (const Switch& s : {Switch{ResolveDecodeRows, "M2_DECODE_ROWS", "1", "own", {"2", "0", "one", "OWN", " 1"}},
                          Switch{ResolveDecodePrefetch, "M2_DECODE_PREFETCH", "l2", "l1+l2", {"L2", "l1", "1", "none", " l2"}},
                          Switch{ResolveFp8Decode, "M2_FP8_DECODE", "gfni", "table", {"GFNI", "tables", "1", "exact", " gfni"}}}) {
    EXPECT_EQ(*s.resolve(nullptr), -1) << s.var;
    EXPECT_EQ(*s.resolve(""), -1) << s.var;
    EXPECT_EQ(*s.resolve(s.on), 1) << s.var;
    EXPECT_EQ(*s.resolve(s.off), 0) << s.var;
    const std::string expected = std::string("expected ") + s.on;
    for (const char* bad : s.bad) ExpectEnvError(s.resolve(bad), s.var, expected.c_str(), bad);
  }
}

// The vendor and family as CPUID reports them: on x86 one vendor at most, and a family of
// 6 or more (Intel's cores) or 0x15 and up (AMD's since Bulldozer) on the CPUs this project
// runs on.
TEST(Cpu, VendorAndFamily) {
  EXPECT_FALSE(Cpu().intel && Cpu().amd);
  if (Cpu().intel) {
    EXPECT_GE(Cpu().family, 6);
  }
  if (Cpu().amd) {
    EXPECT_GE(Cpu().family, 0x15);
  }
}

TEST(KernelsEnv, AFamilyTheCpuLacksIsAnError) {
  auto r = ResolveKernelIsa("avx512", Avx2Only());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lacks AVX-512"), std::string::npos) << r.status().message();
  r = ResolveKernelIsa("avx2", CpuFeatures{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lacks AVX2"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace m2
