// Group quantization of weight rows into the engine's own formats (m2 quantize).
// Symmetric, 32 columns per group, f16 scale per group (see WeightFormat in linear.h).
#pragma once

#include <cstdint>

namespace m2 {

// One row of `cols` floats (cols % 32 == 0) to q8: q[cols] int8 and scales[cols/32]
// (f16 bits). s = max|w| / 127 rounded to f16; q = round(w / s).
void QuantizeRowQ8(const float* w, int64_t cols, int8_t* q, uint16_t* scales);
// To q4: packed[cols/2] and scales[cols/32]; s = max|w| / 7 rounded to f16;
// u = clamp(round(w / s), -8, 7) + 8, packed as in WeightFormat::kQ4.
void QuantizeRowQ4(const float* w, int64_t cols, uint8_t* packed, uint16_t* scales);

}  // namespace m2
