// Byte tables that decode FP8 e4m3 codes to bf16 with AVX-512 VBMI (vpermi2b), shared by
// the bf16 decode kernel (linear_bf16_gemv_avx512.cpp) and the tile unit's GEMM
// (linear_bf16_amx.cpp). Every e4m3 value is a bf16 value, subnormals included, so the
// decode is exact. Data only, in an unnamed namespace: each object that includes it keeps
// its own copy, compiled with its own flags (scripts/check_isa_symbols.sh).
#pragma once

#include <cstdint>

namespace m2 {
namespace {

// The bf16 bits of an e4m3 magnitude code m (0..127): value 2^(e-7) (1 + f/8) for
// e = m >> 3 > 0, f x 2^-9 for e = 0; code 127 is NaN.
constexpr uint16_t Fp8MagnitudeToBf16(int m) {
  const int e = m >> 3, f = m & 7;
  if (m == 0x7f) return 0x7fc0;
  if (e > 0) return static_cast<uint16_t>(((e + 120) << 7) | (f << 4));
  if (f == 0) return 0;
  const int h = f >= 4 ? 2 : f >= 2 ? 1 : 0;  // f = 2^h (1 + (f - 2^h) / 2^h)
  return static_cast<uint16_t>(((h + 118) << 7) | ((f - (1 << h)) << (7 - h)));
}

struct Fp8Bf16Tables {
  alignas(64) uint8_t lo[128];  // the bf16 value's low byte, by magnitude code
  alignas(64) uint8_t hi[128];  // its high byte (the sign is ORed in from the code)
  // A byte order to apply to 64 codes before the lookups so that vpunpcklbw / vpunpckhbw
  // of the two looked-up halves give columns 0-31 and 32-63 in order: position 16L + i
  // (i < 8, 128-bit lane L) takes column 8L + i, position 16L + 8 + i column 32 + 8L + i.
  alignas(64) uint8_t order[64];
};
constexpr Fp8Bf16Tables MakeFp8Bf16Tables() {
  Fp8Bf16Tables t{};
  for (int m = 0; m < 128; ++m) {
    t.lo[m] = static_cast<uint8_t>(Fp8MagnitudeToBf16(m) & 0xff);
    t.hi[m] = static_cast<uint8_t>(Fp8MagnitudeToBf16(m) >> 8);
  }
  for (int lane = 0; lane < 4; ++lane)
    for (int i = 0; i < 8; ++i) {
      t.order[16 * lane + i] = static_cast<uint8_t>(8 * lane + i);
      t.order[16 * lane + 8 + i] = static_cast<uint8_t>(32 + 8 * lane + i);
    }
  return t;
}
constexpr Fp8Bf16Tables kFp8Bf16Tables = MakeFp8Bf16Tables();

}  // namespace
}  // namespace m2
