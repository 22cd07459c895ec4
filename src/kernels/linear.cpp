#include "kernels/linear.h"

#include "base/check.h"

namespace m2 {

void Linear(const LinearWeight& w, const float* x, int64_t n, float* y) {
  M2_CHECK(w.valid(), "Linear on an empty weight");
  switch (w.dtype) {
    case DType::kF32: return LinearF32(w, x, n, y);
    case DType::kBF16: return LinearBf16(w, x, n, y);
    case DType::kF16: return LinearF16(w, x, n, y);
    case DType::kF8E4M3: return LinearFp8Block(w, x, n, y);
    default: M2_CHECK(false, "no Linear kernel for dtype {}", DTypeName(w.dtype));
  }
}

void DequantizeRow(const LinearWeight& w, int64_t row, float* out) {
  M2_CHECK(row >= 0 && row < w.rows, "row {} of {}", row, w.rows);
  const int64_t c = w.cols;
  switch (w.dtype) {
    case DType::kF32: {
      const float* p = static_cast<const float*>(w.data) + row * c;
      for (int64_t j = 0; j < c; ++j) out[j] = p[j];
      return;
    }
    case DType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * c;
      for (int64_t j = 0; j < c; ++j) out[j] = Bf16ToF32(p[j]);
      return;
    }
    case DType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * c;
      for (int64_t j = 0; j < c; ++j) out[j] = F16ToF32(p[j]);
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * c;
      const float* s = w.scale + (row / w.block_rows) * w.scale_cols();
      for (int64_t j = 0; j < c; ++j) out[j] = Fp8E4M3ToF32(p[j]) * s[j / w.block_cols];
      return;
    }
    default: M2_CHECK(false, "no dequantization for dtype {}", DTypeName(w.dtype));
  }
}

}  // namespace m2
