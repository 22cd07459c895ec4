// Shared inner loop of the portable kernels: a dot product with 8 independent
// accumulators, which the compiler maps to SIMD lanes without -ffast-math.
#pragma once

#include <cstdint>

namespace m2::detail {

// A dot product taken in pieces: DotAdd over consecutive runs whose lengths are multiples
// of 8 (the last one any length), then DotEnd gives the bits Dot gives for the whole.
struct DotParts {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float tail = 0.0f;
};

inline void DotAdd(DotParts& d, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) d.acc[k] += a[i + k] * b[i + k];
  for (; i < n; ++i) d.tail += a[i] * b[i];
}

inline float DotEnd(const DotParts& d) {
  const float* acc = d.acc;
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + d.tail;
}

inline float Dot(const float* a, const float* b, int64_t n) {
  DotParts d;
  DotAdd(d, a, b, n);
  return DotEnd(d);
}

// y[t, r] for every token t, given row r of W already in fp32.
inline void RowTimesTokens(const float* wrow, const float* x, int64_t n, int64_t cols, int64_t rows, int64_t r,
                           float* y) {
  for (int64_t t = 0; t < n; ++t) y[t * rows + r] = Dot(wrow, x + t * cols, cols);
}

}  // namespace m2::detail
