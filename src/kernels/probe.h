// Micro-benchmarks that measure the machine's ceilings in the same run as a benchmark:
// memory read bandwidth and peak fp32 FMA throughput, with the kernel family in use.
#pragma once

#include <cstdint>

namespace m2 {

// Sum of n floats, read with SIMD loads and independent accumulators (a streaming read).
// prefetch: also prefetch 16 KiB ahead into L2, as the GEMV kernels do; on some machines
// that reads faster than the plain loop, so a bandwidth ceiling takes the best of both.
double ReadAll(const float* p, int64_t n, bool prefetch = false);
// Runs `iters` rounds of independent fp32 FMA chains; returns the FLOPs performed
// (2 per lane per FMA). The result feeds a sink so the work cannot be optimised away.
double FmaBurst(int64_t iters);

double ReadAllAvx512(const float* p, int64_t n, bool prefetch);
double ReadAllAvx2(const float* p, int64_t n, bool prefetch);
double FmaBurstAvx512(int64_t iters);
// As FmaBurst with vdpbf16ps (32 multiply-adds per instruction): the ceiling of the bf16
// prefill GEMM (linear_bf16.h). Needs AVX-512 BF16 (in linear_bf16_avx512.cpp).
double Bf16DotBurstAvx512(int64_t iters);
// As FmaBurst with vpdpbusd (64 int8 multiply-adds per instruction): the ceiling of the
// int8 prefill GEMM (linear_int8.h), in operations per second. Needs AVX-512 VNNI (in
// linear_int8_gemm_avx512.cpp).
double Int8DotBurstAvx512Vnni(int64_t iters);
// The same for the AVX2 build: vpmaddubsw + vpaddw, 32 multiply-adds per pair of
// instructions (in linear_int8_gemm_avx2.cpp).
double Int8DotBurstAvx2(int64_t iters);
double FmaBurstAvx2(int64_t iters);

}  // namespace m2
