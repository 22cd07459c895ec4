#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>

#include "base/dtype.h"
#include "kernels/linear.h"

namespace m2 {

namespace {
// The f16 scale for a group whose largest magnitude is `amax`, and its fp32 value.
// Quantizing with the rounded scale keeps the dequantized values consistent with it.
uint16_t GroupScale(float amax, float levels, float& s) {
  const uint16_t h = F32ToF16(amax / levels);
  s = F16ToF32(h);
  return h;
}
}  // namespace

void QuantizeRowQ8(const float* w, int64_t cols, int8_t* q, uint16_t* scales) {
  for (int64_t g = 0; g < cols / kQuantGroup; ++g) {
    const float* x = w + g * kQuantGroup;
    float amax = 0;
    for (int i = 0; i < kQuantGroup; ++i) amax = std::max(amax, std::fabs(x[i]));
    float s;
    scales[g] = GroupScale(amax, 127.0f, s);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < kQuantGroup; ++i)
      q[g * kQuantGroup + i] = static_cast<int8_t>(std::clamp(std::lround(x[i] * inv), -127L, 127L));
  }
}

void QuantizeRowQ4(const float* w, int64_t cols, uint8_t* packed, uint16_t* scales) {
  for (int64_t g = 0; g < cols / kQuantGroup; ++g) {
    const float* x = w + g * kQuantGroup;
    float amax = 0;
    for (int i = 0; i < kQuantGroup; ++i) amax = std::max(amax, std::fabs(x[i]));
    float s;
    scales[g] = GroupScale(amax, 7.0f, s);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    uint8_t* out = packed + g * 16;
    for (int i = 0; i < 16; ++i) {
      const long lo = std::clamp(std::lround(x[i] * inv), -8L, 7L) + 8;
      const long hi = std::clamp(std::lround(x[i + 16] * inv), -8L, 7L) + 8;
      out[i] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace m2
