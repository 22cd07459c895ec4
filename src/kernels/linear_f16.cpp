// Portable f16 kernel: each weight row is widened to fp32 once, then used for every token.
#include <vector>

#include "kernels/dot.h"
#include "kernels/linear.h"

namespace m2 {

void LinearF16(const LinearWeight& w, const float* x, int64_t n, float* y) {
  const auto* base = static_cast<const uint16_t*>(w.data);
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint16_t* p = base + r * w.cols;
    for (int64_t j = 0; j < w.cols; ++j) row[j] = F16ToF32(p[j]);
    detail::RowTimesTokens(row.data(), x, n, w.cols, w.rows, r, y);
  }
}

}  // namespace m2
