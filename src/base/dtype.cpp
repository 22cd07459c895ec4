#include "base/dtype.h"

#include <array>
#include <cmath>
#include <utility>

namespace m2 {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 11> kInfo = {{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
    {DType::kF64, "F64", 8},
}};

constexpr float Pow2(int e) {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}

constexpr float DecodeFp8(int v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
  float mag = 0.0f;
  if (exp == 0xf && man == 7) {
    mag = __builtin_nanf("");  // e4m3fn has no infinities; only S.1111.111 is NaN
  } else if (exp == 0) {
    mag = static_cast<float>(man) * Pow2(-9);  // subnormal: man/8 * 2^-6
  } else {
    mag = (1.0f + static_cast<float>(man) / 8.0f) * Pow2(exp - 7);
  }
  return sign ? -mag : mag;
}

template <size_t... I>
constexpr std::array<float, 256> MakeFp8Table(std::index_sequence<I...>) {
  return {DecodeFp8(static_cast<int>(I))...};
}
}  // namespace

// Constant-initialised, so it is usable from any static initialiser.
constexpr std::array<float, 256> kFp8E4M3Table = MakeFp8Table(std::make_index_sequence<256>{});

uint8_t F32ToFp8E4M3(float f) {
  // Codes 0..126 are the non-negative values in increasing order (127 is NaN).
  const float a = std::fabs(f);
  int lo = 0, hi = 126;
  while (lo < hi) {  // the first code whose value is >= a (126 if none)
    const int mid = (lo + hi) / 2;
    if (kFp8E4M3Table[static_cast<size_t>(mid)] < a) lo = mid + 1;
    else hi = mid;
  }
  int best = lo;
  if (lo > 0 && a - kFp8E4M3Table[static_cast<size_t>(lo - 1)] <= kFp8E4M3Table[static_cast<size_t>(lo)] - a) best = lo - 1;
  if (!(a == a)) best = 0;  // NaN in: zero, never a NaN code
  return static_cast<uint8_t>(best | (std::signbit(f) ? 0x80 : 0));
}

std::vector<uint8_t> GaussianFp8Codes(float sigma) {
  std::vector<uint8_t> table(65536);
  for (int u = 0; u < 65536; ++u) {
    const double p = (u + 0.5) / 65536.0;
    double lo = -10.0, hi = 10.0;  // the normal quantile of p by bisection on the CDF
    for (int it = 0; it < 60; ++it) {
      const double mid = 0.5 * (lo + hi);
      (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
    }
    table[static_cast<size_t>(u)] = F32ToFp8E4M3(static_cast<float>(sigma * 0.5 * (lo + hi)));
  }
  return table;
}

size_t DTypeSize(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i.size;
  return 0;
}

std::string_view DTypeName(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i.name;
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 0x1f) {
    mag = man ? NAN : INFINITY;
  } else {
    mag = std::ldexp(1.0f + man / 1024.0f, static_cast<int>(exp) - 15);
  }
  return sign ? -mag : mag;
}

uint16_t F32ToF16(float f) {
  // Round to nearest even via the standard bit manipulation.
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (x >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (x < 0x38800000u) {                                               // subnormal or zero
    float mag;
    std::memcpy(&mag, &x, sizeof mag);
    const float scaled = mag * 16777216.0f;  // 2^24: units of the smallest subnormal
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t rounded = x + 0x0fffu + ((x >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace m2
