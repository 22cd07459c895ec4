// Avx2 build of the machine probes (see probe_simd.inc).
#define M2_SIMD_WIDTH 8
#define M2_SIMD_NS avx2
#include "kernels/probe.h"
#include "kernels/probe_simd.inc"

namespace m2 {
double ReadAllAvx2(const float* p, int64_t n, bool prefetch) {
  return prefetch ? avx2::ReadAllSimd<true>(p, n) : avx2::ReadAllSimd<false>(p, n);
}
double ReadStreamsAvx2(const float* p, int64_t n, int streams, bool prefetch) {
  return avx2::ReadStreamsAny(p, n, streams, prefetch);
}
double ReadWithFmasAvx2(const float* p, int64_t n, int fmas) { return avx2::ReadWithFmasAny(p, n, fmas); }
double FmaBurstAvx2(int64_t iters) { return avx2::FmaBurstSimd(iters); }
}  // namespace m2
