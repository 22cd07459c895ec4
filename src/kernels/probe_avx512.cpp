// Avx512 build of the machine probes (see probe_simd.inc).
#define M2_SIMD_WIDTH 16
#define M2_SIMD_NS avx512
#include "kernels/probe.h"
#include "kernels/probe_simd.inc"

namespace m2 {
double ReadAllAvx512(const float* p, int64_t n, bool prefetch) {
  return prefetch ? avx512::ReadAllSimd<true>(p, n) : avx512::ReadAllSimd<false>(p, n);
}
double ReadStreamsAvx512(const float* p, int64_t n, int streams, bool prefetch) {
  return avx512::ReadStreamsAny(p, n, streams, prefetch);
}
double ReadWithFmasAvx512(const float* p, int64_t n, int fmas) { return avx512::ReadWithFmasAny(p, n, fmas); }
double FmaBurstAvx512(int64_t iters) { return avx512::FmaBurstSimd(iters); }
}  // namespace m2
