// Micro-benchmarks that measure the machine's ceilings in the same run as a benchmark:
// memory read bandwidth and peak fp32 FMA throughput, with the kernel family in use.
#pragma once

#include <cstdint>

namespace m2 {

class ThreadPool;

// The reads below take n floats' worth of memory (4n bytes) and add them up as 32-bit
// integers, never as floats, so any bytes read at the same speed (a benchmark can read a
// model's FP8 or int8 weights themselves); the sums only keep the loads alive.
// Sum of n floats, read with SIMD loads and independent accumulators (a streaming read).
// prefetch: also prefetch 16 KiB ahead into L2, as the GEMV kernels do; on some machines
// that reads faster than the plain loop, so a bandwidth ceiling takes the best of both.
double ReadAll(const float* p, int64_t n, bool prefetch = false);
// Runs `iters` rounds of independent fp32 FMA chains; returns the FLOPs performed
// (2 per lane per FMA). The result feeds a sink so the work cannot be optimised away.
double FmaBurst(int64_t iters);

// `streams` (1, 2, 4 or 8) equal parts of [0, n) read side by side, as a GEMV reads
// several rows at once; prefetch: 1 KiB ahead into L1 and 16 KiB into L2 per stream.
double ReadStreams(const float* p, int64_t n, int streams, bool prefetch);

// One timed pass of ReadStreams by `pool`'s threads over buf[0, n), bytes per second.
double ReadPatternBandwidth(ThreadPool& pool, const float* buf, int64_t n, int streams, bool prefetch);
// The read bandwidth of `pool`'s threads over buf[0, n) (far larger than the caches, in
// 2 MiB pages like the weights: base/huge_buffer.h), bytes per second: the best of
// `rounds` rounds of four patterns, one stream and four per thread, each with and without
// prefetching (which is fastest differs between machines; on a Zen 4 VM a GEMV, reading
// 4-8 rows at once, outran a one-stream probe by 15%, so a ceiling that left the
// multi-stream read out flattered every ratio to it).
double MeasureReadBandwidth(ThreadPool& pool, const float* buf, int64_t n, int rounds);

// A streaming read of n floats (as ReadAll, no prefetch) that also runs `fmas` fp32 FMAs of
// the kernel family's width, on 8 independent chains, for every 64 bytes: how much of the
// read bandwidth a loop with that much compute per byte keeps, i.e. how well the core
// overlaps a decode GEMV's arithmetic with its memory reads (gemv_bench --overlap). fmas:
// one of kReadFmaCounts, else an error naming them.
inline constexpr int kReadFmaCounts[] = {0, 4, 8, 12, 16, 20, 24, 32};
double ReadWithFmas(const float* p, int64_t n, int fmas);
double ReadWithFmasAvx512(const float* p, int64_t n, int fmas);
double ReadWithFmasAvx2(const float* p, int64_t n, int fmas);

double ReadAllAvx512(const float* p, int64_t n, bool prefetch);
double ReadStreamsAvx512(const float* p, int64_t n, int streams, bool prefetch);
double ReadStreamsAvx2(const float* p, int64_t n, int streams, bool prefetch);
double ReadAllAvx2(const float* p, int64_t n, bool prefetch);
double FmaBurstAvx512(int64_t iters);
// As FmaBurst with vdpbf16ps (32 multiply-adds per instruction): the ceiling of the bf16
// prefill GEMM (linear_bf16.h). Needs AVX-512 BF16 (in linear_bf16_avx512.cpp).
double Bf16DotBurstAvx512(int64_t iters);
// The same on the tile unit: TDPBF16PS (8192 multiply-adds per instruction), four
// independent 16 x 16 accumulators. Needs AmxBf16Available() (in linear_bf16_amx.cpp).
double AmxBf16Burst(int64_t iters);
// As FmaBurst with vpdpbusd (64 int8 multiply-adds per instruction): the ceiling of the
// int8 prefill GEMM (linear_int8.h), in operations per second. Needs AVX-512 VNNI (in
// linear_int8_gemm_avx512.cpp).
double Int8DotBurstAvx512Vnni(int64_t iters);
// The same for the AVX2 build: vpmaddubsw + vpaddw, 32 multiply-adds per pair of
// instructions (in linear_int8_gemm_avx2.cpp).
double Int8DotBurstAvx2(int64_t iters);
// The AVX2 build's q8 step: vpsignb + vpmaddubsw + vpmaddwd + vpaddd per 32 multiply-adds
// (in linear_int8_gemm_avx2.cpp).
double Int8DotBurstAvx2Signed(int64_t iters);
// The same for the AVX-VNNI build: the VEX vpdpbusd, 32 multiply-adds per instruction (in
// linear_int8_gemm_avxvnni.cpp; needs AVX-VNNI).
double Int8DotBurstAvxVnni(int64_t iters);
double FmaBurstAvx2(int64_t iters);

}  // namespace m2
