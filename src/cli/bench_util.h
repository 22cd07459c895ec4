// Measurements shared by the benchmark commands: the machine's ceilings (read bandwidth,
// fp32 FMA peak), peak RSS, weights brought into memory, and a model's per-token costs.
#pragma once

#include <chrono>
#include <cstdint>

#include "base/thread_pool.h"
#include "io/tensor_store.h"
#include "kernels/linear_int8.h"
#include "model/model.h"

namespace m2::cli {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b);
// Best of six parallel passes over 1 GiB (in 2 MiB pages where the kernel allows, as the
// weights are mapped), plain and prefetching reads alternately.
double MeasureBandwidth(ThreadPool& pool);
double MeasurePeakFlops(ThreadPool& pool);
// The same with vdpbf16ps (the bf16 prefill's ceiling); only on CPUs with AVX-512 BF16.
double MeasurePeakBf16Flops(ThreadPool& pool);
// TDPBF16PS on the tile unit (AMX): the ceiling of the bf16 prefill GEMM where it runs there.
double MeasurePeakAmxFlops(ThreadPool& pool);
// The same with the int8 prefill GEMM's instructions (its ceiling, in int8 operations):
// vpdpbusd (AVX-512 VNNI or, on 256-bit vectors, AVX-VNNI); on AVX2 vpmaddubsw + vpaddw for
// q4 weights, vpsignb + vpmaddubsw + vpmaddwd + vpaddd for q8 (the AVX2 build's two steps).
double MeasurePeakInt8Ops(ThreadPool& pool, Int8GemmKernel kernel, WeightFormat format);
// The instructions that ceiling times, for the report.
const char* Int8PeakName(Int8GemmKernel kernel, WeightFormat format);
// Best of 3 rounds of `burst` on every thread of the pool at once, in FLOP/s.
double MeasurePeak(ThreadPool& pool, double (*burst)(int64_t));
int64_t PeakRssBytes();
// Brings every page of the weights into memory (timings then measure compute and memory).
void Prefault(const TensorStore& store);
// The same for the weights this rank of a split model reads (the whole store otherwise).
void Prefault(const Model& m);

struct Costs {
  double linear_flops_per_token = 0;  // every layer's projections, router and top-k experts
  double weight_bytes_per_token = 0;  // decode: weights read for one token
  double lm_head_flops = 0;
  double shared_bytes = 0;  // read once per step whatever the batch: attention, router, lm_head
  double expert_bytes = 0;  // one expert (w1, w3, w2) of one layer
  // Lightning layers: their fp32 states, read and written once per decoded token (the
  // recurrence), whatever the context.
  double state_bytes_per_token = 0;
};
Costs CountCosts(const Model& m);
// Attention FLOPs of a token at position p: in each softmax layer QK^T and PV over p+1
// positions; in each Lightning layer what its kernel runs, which does not depend on p:
// decode (the recurrence) decays the state, adds k^T v and multiplies by q, 4 H D^2;
// prefill (the blocked form, blocks of B) adds q k^T and (q k^T) v within the block,
// 4 H D^2 + 4 H B D (counted for full blocks, as computed).
double AttentionFlops(const ModelConfig& c, int64_t p, bool prefill = false);

}  // namespace m2::cli
