#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace m2 {
namespace {

TEST(DTypeTest, F32ToFp8E4M3RoundsToTheNearestCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // the NaN codes
    const float v = Fp8E4M3ToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(F32ToFp8E4M3(v), c == 0x80 ? 0x80 : c) << c;  // every value back to its code, -0 too
  }
  EXPECT_EQ(F32ToFp8E4M3(1.0625f), 0x38);   // between 1 and 1.125: a tie, to the smaller
  EXPECT_EQ(F32ToFp8E4M3(1.07f), 0x39);     // nearer 1.125
  EXPECT_EQ(F32ToFp8E4M3(-1.07f), 0xb9);
  EXPECT_EQ(F32ToFp8E4M3(1000.0f), 0x7e);   // saturates at 448, never a NaN code
  EXPECT_EQ(F32ToFp8E4M3(-1e30f), 0xfe);
  EXPECT_EQ(F32ToFp8E4M3(0x1p-12f), 0x00);  // below half the smallest subnormal (2^-9)
  EXPECT_EQ(F32ToFp8E4M3(0x1p-9f), 0x01);
  EXPECT_EQ(F32ToFp8E4M3(NAN) & 0x7f, 0x00);
}

TEST(DTypeTest, GaussianFp8CodesLookLikeACheckpoints) {
  const std::vector<uint8_t> t = GaussianFp8Codes(100.0f);
  ASSERT_EQ(t.size(), 65536u);
  int zero_or_subnormal = 0, nan = 0;
  double sum = 0, sum2 = 0, largest = 0;
  for (int u = 0; u < 65536; ++u) {
    const uint8_t c = t[static_cast<size_t>(u)];
    nan += (c & 0x7f) == 0x7f;
    zero_or_subnormal += (c & 0x78) == 0;
    const double v = Fp8E4M3ToF32(c);
    sum += v, sum2 += v * v, largest = std::max(largest, std::fabs(v));
    if (u > 0) { EXPECT_LE(Fp8E4M3ToF32(t[static_cast<size_t>(u - 1)]), v) << u; }  // quantiles rise
  }
  EXPECT_EQ(nan, 0);
  EXPECT_LE(zero_or_subnormal, 30);  // about 1.2e-4 of a normal distribution of sigma 100
  EXPECT_NEAR(sum / 65536, 0.0, 0.5);
  EXPECT_NEAR(std::sqrt(sum2 / 65536), 100.0, 3.0);
  EXPECT_GE(largest, 384.0);
  EXPECT_LE(largest, 448.0);
}

TEST(DTypeTest, Fp8E4M3KnownValues) {
  EXPECT_EQ(Fp8E4M3ToF32(0x00), 0.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x38), 1.0f);                     // exponent 7 = bias
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.0f);                   // the largest finite value
  EXPECT_EQ(Fp8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x01), std::ldexp(1.0f, -9));     // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToF32(0x08), std::ldexp(1.0f, -6));     // smallest normal
  EXPECT_EQ(Fp8E4M3ToF32(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0x7f)));             // no infinities: S.1111.111 is NaN
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0xff)));
  EXPECT_EQ(Fp8E4M3ToF32(0x78), 256.0f);                   // 1.1110.000 exponent 15 is finite
  int nans = 0;
  for (int v = 0; v < 256; ++v) nans += std::isnan(Fp8E4M3ToF32(static_cast<uint8_t>(v)));
  EXPECT_EQ(nans, 2);
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f)), 1.0f);
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // exactly half way: stays even
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // half way, odd below: rounds up
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
  for (float f : {0.1f, -3.75f, 1e30f, -1e-30f}) EXPECT_NEAR(Bf16ToF32(F32ToBf16(f)), f, std::fabs(f) / 128);
}

TEST(DTypeTest, F16ConversionsRoundTrip) {
  for (int h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << h;
  }
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI64, DType::kU8}) {
    auto back = DTypeFromName(DTypeName(t));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, t);
  }
  EXPECT_FALSE(DTypeFromName("F8_E5M2").has_value());
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
}

TEST(StatusTest, ResultCarriesValueOrError) {
  Result<int> ok = 3;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 3);
  Result<int> bad = Error("expected {}, found {}", 1, 2);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "expected 1, found 2");
  Status s = Error("inner");
  s.WithContext("outer");
  EXPECT_EQ(s.message(), "outer: inner");
}

}  // namespace
}  // namespace m2
