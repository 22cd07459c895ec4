#include "kernels/ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/cpu.h"

namespace m2 {

double SumSquares(const float* x, int64_t n) {
  double ss = 0.0;  // double: the statistic must not depend on the summation order
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}

void RmsScale(const float* x, const float* w, int64_t n, double sumsq, int64_t count, double eps, float* out) {
  const float inv = static_cast<float>(1.0 / std::sqrt(sumsq / static_cast<double>(count) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

void RmsNorm(const float* x, const float* w, int64_t n, double eps, float* out) {
  RmsScale(x, w, n, SumSquares(x, n), n, eps, out);
}

void RopeInvFreq(double theta, int64_t rotary_dim, float* inv_freq) {
  // transformers: 1.0 / (base ** (arange(0, dim, 2, dtype=float32) / dim)), in fp32.
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    const float p = static_cast<float>(std::pow(theta, static_cast<double>(e)));
    inv_freq[i] = 1.0f / p;
  }
}

void RopeNeox(float* head, int64_t rotary_dim, const float* inv_freq, int64_t pos) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];  // fp32 product, as the reference
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = b * c + a * s;
  }
}

void SiluMulPortable(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void SiluMul(float* g, const float* u, int64_t n) {
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512: return SiluMulAvx512(g, u, n);
    case KernelIsa::kAvx2: return SiluMulAvx2(g, u, n);
    default: return SiluMulPortable(g, u, n);
  }
}

void Silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void SigmoidMul(float* x, const float* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * (1.0f / (1.0f + std::exp(-g[i])));
}

void WeightedSum(const float* a, float alpha, const float* b, float beta, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * alpha + b[i] * beta;
}

void Softmax(float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::fmax(m, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace m2

#include "base/check.h"
#include "base/cpu.h"
#include "base/thread_pool.h"
#include "kernels/probe.h"

namespace m2 {

double ReadAll(const float* p, int64_t n, bool prefetch) {
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512: return ReadAllAvx512(p, n, prefetch);
    case KernelIsa::kAvx2: return ReadAllAvx2(p, n, prefetch);
    default: {  // as integers, as the SIMD reads (probe.h): any bytes at the same speed
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        int32_t b;
        std::memcpy(&b, p + i, sizeof b);
        s += static_cast<double>(b);
      }
      return s;
    }
  }
}

double ReadStreams(const float* p, int64_t n, int streams, bool prefetch) {
  M2_CHECK(streams == 1 || streams == 2 || streams == 4 || streams == 8, "ReadStreams: {} streams (1, 2, 4 or 8)",
           streams);
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512: return ReadStreamsAvx512(p, n, streams, prefetch);
    case KernelIsa::kAvx2: return ReadStreamsAvx2(p, n, streams, prefetch);
    default: return ReadAll(p, n, prefetch);
  }
}

double ReadWithFmas(const float* p, int64_t n, int fmas) {
  M2_CHECK(std::find(std::begin(kReadFmaCounts), std::end(kReadFmaCounts), fmas) != std::end(kReadFmaCounts),
           "ReadWithFmas: {} FMAs per 64 bytes (one of 0, 4, 8, 12, 16, 20, 24, 32)", fmas);
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512: return ReadWithFmasAvx512(p, n, fmas);
    case KernelIsa::kAvx2: return ReadWithFmasAvx2(p, n, fmas);
    default: {  // portable: 8 scalar chains, `fmas` steps of each per 64 bytes
      float f[8] = {1, 1.01f, 1.02f, 1.03f, 1.04f, 1.05f, 1.06f, 1.07f};
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        int32_t b;
        std::memcpy(&b, p + i, sizeof b);
        s += static_cast<double>(b);
        if (i % 16 == 15)
          for (int k = 0; k < fmas; ++k) f[k % 8] = f[k % 8] * 0.999999f + 1e-7f;
      }
      for (float v : f) s += v;
      return s;
    }
  }
}

double ReadPatternBandwidth(ThreadPool& pool, const float* buf, int64_t n, int streams, bool prefetch) {
  std::vector<double> sums(static_cast<size_t>(pool.size()));  // keeps the reads alive
  const auto t0 = std::chrono::steady_clock::now();
  pool.ParallelFor(n, 4096, [&](int64_t b, int64_t e, int th) {
    sums[static_cast<size_t>(th)] += ReadStreams(buf + b, e - b, streams, prefetch);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n) * sizeof(float) / s;
}

double MeasureReadBandwidth(ThreadPool& pool, const float* buf, int64_t n, int rounds) {
  double best = 0;
  for (int round = 0; round < rounds; ++round)
    for (const int streams : {1, 4})
      for (const bool prefetch : {false, true})
        best = std::max(best, ReadPatternBandwidth(pool, buf, n, streams, prefetch));
  return best;
}

double FmaBurst(int64_t iters) {
  switch (ActiveIsa()) {
    case KernelIsa::kAvx512: return FmaBurstAvx512(iters);
    case KernelIsa::kAvx2: return FmaBurstAvx2(iters);
    default: {
      float a[8] = {0, 1, 2, 3, 4, 5, 6, 7};
      for (int64_t it = 0; it < iters; ++it)
        for (float& v : a) v = v * 0.999999f + 1e-7f;
      volatile float sink = a[0] + a[7];
      (void)sink;
      return 16.0 * static_cast<double>(iters);
    }
  }
}

}  // namespace m2
