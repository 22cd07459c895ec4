// Portable fp32 kernel (reference quality; the fast kernels come with the CPU-speed work).
#include "kernels/dot.h"
#include "kernels/linear.h"

namespace m2 {

void LinearF32(const LinearWeight& w, const float* x, int64_t n, float* y) {
  const float* base = static_cast<const float*>(w.data);
  for (int64_t r = 0; r < w.rows; ++r) detail::RowTimesTokens(base + r * w.cols, x, n, w.cols, w.rows, r, y);
}

}  // namespace m2
