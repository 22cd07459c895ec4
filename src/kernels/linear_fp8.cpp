// Portable kernel for fp8 e4m3 weights with block scales: each row is dequantized
// (value * its block's scale) to fp32 once, then used for every token. Activations
// stay fp32 (the "dequantize weights" reading of MODEL_SPEC's FP8 section).
#include <vector>

#include "kernels/dot.h"
#include "kernels/linear.h"

namespace m2 {

void LinearFp8Block(const LinearWeight& w, const float* x, int64_t n, float* y) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w, r, row.data());
    detail::RowTimesTokens(row.data(), x, n, w.cols, w.rows, r, y);
  }
}

}  // namespace m2
