// Every Linear kernel against a scalar reference in double precision. The tolerance
// comes from the data: fp32 summation of n products has error at most about
// (n_per_lane + log2(lanes)) * eps * sum_j |x_j w_j|, plus the widening of each weight,
// which is exact. We allow twice that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/linear.h"

namespace m2 {
namespace {

struct Case {
  DType dtype;
  int64_t rows, cols, n;
};

// Stores random weights in `dtype`; returns the exact fp32 values they stand for.
std::vector<float> MakeWeight(const Case& c, std::mt19937& rng, std::vector<uint8_t>& storage,
                              std::vector<float>& scale, LinearWeight& w) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> exact(static_cast<size_t>(c.rows * c.cols));
  w.dtype = c.dtype;
  w.rows = c.rows;
  w.cols = c.cols;
  storage.assign(exact.size() * DTypeSize(c.dtype), 0);
  if (c.dtype == DType::kF8E4M3) {
    w.block_rows = w.block_cols = 128;
    scale.resize(static_cast<size_t>(w.scale_rows() * w.scale_cols()));
    for (auto& s : scale) s = std::exp(nd(rng));  // a different scale in every block
  }
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < c.cols; ++j) {
      const size_t k = static_cast<size_t>(i * c.cols + j);
      const float v = nd(rng);
      switch (c.dtype) {
        case DType::kF32: std::memcpy(&storage[k * 4], &v, 4); exact[k] = v; break;
        case DType::kBF16: {
          const uint16_t b = F32ToBf16(v);
          std::memcpy(&storage[k * 2], &b, 2);
          exact[k] = Bf16ToF32(b);
          break;
        }
        case DType::kF16: {
          const uint16_t h = F32ToF16(v);
          std::memcpy(&storage[k * 2], &h, 2);
          exact[k] = F16ToF32(h);
          break;
        }
        case DType::kF8E4M3: {
          uint8_t q = static_cast<uint8_t>(rng() & 0xff);
          if ((q & 0x7f) == 0x7f) q = 0x38;  // avoid NaN codes
          storage[k] = q;
          exact[k] = Fp8E4M3ToF32(q) * scale[(i / 128) * w.scale_cols() + j / 128];
          break;
        }
        default: ADD_FAILURE();
      }
    }
  }
  w.data = storage.data();
  w.scale = scale.empty() ? nullptr : scale.data();
  return exact;
}

TEST(LinearTest, EveryDtypeMatchesScalarReference) {
  const std::vector<Case> cases = {
      {DType::kF32, 7, 33, 3},     {DType::kBF16, 16, 96, 5},  {DType::kF16, 9, 40, 2},
      {DType::kF8E4M3, 200, 160, 4},  // partial 128x128 blocks on both axes
      {DType::kF8E4M3, 128, 256, 1}, {DType::kF8E4M3, 5, 3, 2},
  };
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& c : cases) {
    std::vector<uint8_t> storage;
    std::vector<float> scale;
    LinearWeight w;
    const auto exact = MakeWeight(c, rng, storage, scale, w);
    std::vector<float> x(static_cast<size_t>(c.n * c.cols));
    for (auto& v : x) v = nd(rng);
    std::vector<float> y(static_cast<size_t>(c.n * c.rows), NAN);
    Linear(w, x.data(), c.n, y.data());
    const double eps = std::ldexp(1.0, -24);
    const double terms = static_cast<double>(c.cols) / 8 + 4;
    for (int64_t t = 0; t < c.n; ++t) {
      for (int64_t r = 0; r < c.rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t j = 0; j < c.cols; ++j) {
          const double p = static_cast<double>(x[t * c.cols + j]) * exact[r * c.cols + j];
          ref += p;
          mag += std::fabs(p);
        }
        const double tol = 2 * terms * eps * mag + 1e-30;
        ASSERT_LE(std::fabs(y[t * c.rows + r] - ref), tol)
            << DTypeName(c.dtype) << " " << c.rows << "x" << c.cols << " token " << t << " row " << r;
      }
    }
    // DequantizeRow gives the exact stored values.
    std::vector<float> row(static_cast<size_t>(c.cols));
    DequantizeRow(w, c.rows - 1, row.data());
    for (int64_t j = 0; j < c.cols; ++j) ASSERT_EQ(row[j], exact[(c.rows - 1) * c.cols + j]);
  }
}

}  // namespace
}  // namespace m2
