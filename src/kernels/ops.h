// Element-wise and row-wise ops of the forward pass. fp32 throughout.
#pragma once

#include <cstdint>

namespace m2 {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], for one row of n values (may alias).
void RmsNorm(const float* x, const float* w, int64_t n, double eps, float* out);
// The two halves of RmsNorm, for a row whose sum of squares is assembled from pieces (the
// attention's q/k norm spans every head, and the heads may live on several ranks):
// SumSquares(x, n) is the statistic of n values (in double, in index order), and
// RmsScale writes out[i] = x[i] / sqrt(sumsq / count + eps) * w[i] for n of its values.
// RmsNorm(x, w, n, eps, out) == RmsScale(x, w, n, SumSquares(x, n), n, eps, out).
double SumSquares(const float* x, int64_t n);
void RmsScale(const float* x, const float* w, int64_t n, double sumsq, int64_t count, double eps, float* out);

// Inverse frequencies of RoPE: inv_freq[i] = theta^(-2i/rotary_dim), i < rotary_dim/2,
// computed in fp32 as transformers does.
void RopeInvFreq(double theta, int64_t rotary_dim, float* inv_freq);

// NeoX ("rotate_half") RoPE on the first rotary_dim channels of one head vector:
// channel i pairs with i + rotary_dim/2. Channels >= rotary_dim are untouched.
void RopeNeox(float* head, int64_t rotary_dim, const float* inv_freq, int64_t pos);

// silu(g) * u, element-wise into g: the SIMD build of the active kernels (ops_simd.inc:
// e^x by a polynomial, within 1e-6 relative of the portable result), else the portable
// one (std::exp). Each element's result depends on its own inputs only, not on n or its
// place. The builds, for the tests: SiluMulAvx512 / SiluMulAvx2 only on a CPU with them.
void SiluMul(float* g, const float* u, int64_t n);
void SiluMulPortable(float* g, const float* u, int64_t n);
void SiluMulAvx2(float* g, const float* u, int64_t n);
void SiluMulAvx512(float* g, const float* u, int64_t n);

// silu(x) = x * sigmoid(x), element-wise in place.
void Silu(float* x, int64_t n);

// x *= sigmoid(g), element-wise (the Lightning output gate).
void SigmoidMul(float* x, const float* g, int64_t n);

// out[i] = a[i] * alpha + b[i] * beta (out may alias a or b): the decoder layer's residual.
// With alpha = beta = 1 it is exactly a + b (a product by 1 is exact).
void WeightedSum(const float* a, float alpha, const float* b, float beta, int64_t n, float* out);

// In-place softmax of n values.
void Softmax(float* x, int64_t n);

}  // namespace m2
