// Element types found in checkpoints, and scalar conversions to fp32.
#pragma once

#include <array>
#include <cstdint>
#include <vector>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace m2 {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa, no inf, 0x7f/0xff = NaN
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF64,
};

// Bytes per element.
size_t DTypeSize(DType t);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);

inline float Bf16ToF32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, NaN kept quiet (what torch does for .to(torch.bfloat16)).
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToF32(uint16_t v);
uint16_t F32ToF16(float f);

// All 256 float8_e4m3fn values, decoded (built at compile time in dtype.cpp).
extern const std::array<float, 256> kFp8E4M3Table;
inline float Fp8E4M3ToF32(uint8_t v) { return kFp8E4M3Table[v]; }
// The nearest float8_e4m3fn code (saturating at +-448, never a NaN code; a tie goes to the
// smaller magnitude). For making test and benchmark weights, not on a hot path.
uint8_t F32ToFp8E4M3(float f);
// 65536 codes, entry u the code nearest sigma x the normal quantile of (u + 0.5) / 65536,
// so that entry [16 random bits] draws codes as a checkpoint's FP8 weights are distributed
// (about normal, the block's largest near 448 for sigma = 100: 4.3 sigma), not uniformly
// over the codes (which would make 1 in 16 a zero or subnormal code).
std::vector<uint8_t> GaussianFp8Codes(float sigma);

}  // namespace m2
