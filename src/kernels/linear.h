// The matmul seam: every linear layer of the model goes through Linear(), which picks
// the kernel for the weight's stored dtype. Weights are used where they lie (a mapped
// checkpoint) without conversion. Faster kernels replace the per-dtype functions in
// linear_<dtype>.cpp without touching model code.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace m2 {

// A weight matrix W [rows = out_features, cols = in_features], row-major, in its
// stored dtype. For F8_E4M3, `scale` holds one fp32 per [block_rows x block_cols]
// block, laid out [ceil(rows/block_rows), ceil(cols/block_cols)]; edge blocks are
// partial. Despite the checkpoint's name (weight_scale_inv) the scale multiplies:
// W[i, j] = fp8(Wq[i, j]) * scale[i / block_rows, j / block_cols].
struct LinearWeight {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  const float* scale = nullptr;
  int64_t block_rows = 128, block_cols = 128;

  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  bool valid() const { return data != nullptr && rows > 0 && cols > 0; }
};

// y[n, rows] = x[n, cols] * W^T, fp32 activations and accumulation.
// PRECONDITIONS: x holds n*cols floats, y has room for n*rows; they do not alias.
void Linear(const LinearWeight& w, const float* x, int64_t n, float* y);

// Row `row` of W, dequantized to fp32: out[cols]. Used for embedding lookups.
void DequantizeRow(const LinearWeight& w, int64_t row, float* out);

// Per-dtype kernels behind Linear(); each lives in its own translation unit.
void LinearF32(const LinearWeight& w, const float* x, int64_t n, float* y);
void LinearBf16(const LinearWeight& w, const float* x, int64_t n, float* y);
void LinearF16(const LinearWeight& w, const float* x, int64_t n, float* y);
void LinearFp8Block(const LinearWeight& w, const float* x, int64_t n, float* y);

}  // namespace m2
