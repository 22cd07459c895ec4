// The int16-activation path for q8 weights' decode steps (`--activations int16`, and what
// `--activations auto` gives q8 weights' decode steps where these kernels run). Each token's
// activations are quantized per group of 32 columns (the weights' own group) to int16 with
// one fp32 scale; every group's product is then an exact integer dot product (int8 weights
// widened to int16 by one vpmovsxbw, then vpdpwssd or vpmaddwd), scaled once by (weight
// scale x activation scale).
//
// Why: the exact q8 decode kernel widens every weight to fp32 before its FMA (sign-extend,
// convert, multiply-add: three operations per 16 or 8 weights), which on a CPU whose cores
// read memory fast is more work than the memory takes (72-74% of the read on a Zen 4 VM in
// its fast minutes). Here a group of 32 weights costs two widenings and two vpdpwssd
// (AVX-512 VNNI) or two vpmaddwd and an add (AVX2), one conversion and one multiply-add.
//
// What it costs: a group's step is max|x| / 32767, so each activation is off by at most
// 2^-16 of its group's largest (bf16 rounding, by comparison: 2^-9 of each value; int8:
// 2^-8 of the group's largest). `m2 perplexity --activations int16 --reference SAME_MODEL`
// measures it (README, "int16 activations").
//
// Quantization of a group x[0..32): d = max|x| / 32767, q[i] = round-to-nearest-even(x[i] *
// (32767 / max|x|)), so q is in [-32767, 32767] (an all-zero group has d = 0 and q = 0). A
// group holding a NaN or an infinity gets d = NaN, so its outputs are NaN.
//
// The kernels (portable reference, AVX2, AVX-512 VNNI) compute the same exact integer
// group dots. The AVX2 and VNNI ones then give each other's bits (the same 8 int32 lanes
// per group, the same fp32 operations); the reference sums each group's dot whole, in
// group order, so it agrees with them to fp32 rounding, not to the bit.
#pragma once

#include <cstdint>

#include "base/cpu.h"
#include "kernels/linear.h"

namespace m2 {

// Activations of n tokens quantized for the int16 path (pointers into caller storage):
// q [n][cols] int16, d [n][cols/32] fp32 scales.
struct Int16Activations {
  const int16_t* q = nullptr;
  const float* d = nullptr;
  int64_t n = 0, cols = 0;
  int64_t groups() const { return cols / kQuantGroup; }
};

// Quantizes x [n][cols] (cols % 32 == 0) into q and d. Portable; the AVX2 one gives the
// same values (the same operations per value; it needs AVX2).
void QuantizeActivationsInt16(const float* x, int64_t n, int64_t cols, int16_t* q, float* d);
void QuantizeActivationsInt16Avx2(const float* x, int64_t n, int64_t cols, int16_t* q, float* d);

// FP8 weights in the int16 GEMM (ActivationMode::kInt16Prefill, `--activations int16+int16`
// on an FP8 checkpoint): the 32 codes of a group of a row (one 128 x 128 block scale covers
// them) as int16 integers q with one power-of-two step per group, so that the GEMM's group
// dots stay exact integers. With E the largest exponent field of the group's codes (a code's
// low 7 bits order its magnitude) and s = max(0, E - 8), q = round-to-nearest-even(v x
// 2^(9 - s)) for each code's exact value v, and the group's scale is block_scale x 2^(s - 9)
// (exact: a power of two). Every code whose exponent is within 7 of the group's largest is
// exact (v x 2^(9 - s) is then an integer); smaller ones are off by at most half a step,
// 2^-12 of the group's largest magnitude (int8 requantization, kInt8Prefill: up to 2^-8).
// |q| <= 15 x 2^7 = 1920, so a group's dot with int16 activations stays below 32 x 1920 x
// 32767 < 2^31. A group holding a NaN code (0x7f, 0xff) gets q = 0 and a NaN scale, so its
// outputs are NaN. Returns the scale. Portable; the GEMM's own unpacking gives the same.
float Fp8GroupToInt16(const uint8_t* codes, float block_scale, int16_t* q);
// Whether an FP8 weight can take the int16 GEMM: its blocks hold whole 32-column groups.
bool Fp8FitsInt16Groups(const LinearWeight& w);

// y[t][r] for rows [r0, r1) of a q8 weight and all n tokens of `a`: the portable reference
// (integer dot per group, then fp32 sums in group order), AVX2 (needs AVX2, FMA and F16C)
// and AVX-512 VNNI (also AVX-512 F/BW/VL). False for a format other than q8; the reference
// also takes FP8 weights that fit (Fp8FitsInt16Groups), converted per group as above (what
// the GEMM computes for them; no decode kernel reads FP8 with int16 activations).
bool LinearInt16RowsReference(const LinearWeight& w, const Int16Activations& a, float* y, int64_t r0, int64_t r1);
bool LinearInt16RowsAvx2(const LinearWeight& w, const Int16Activations& a, float* y, int64_t r0, int64_t r1);
bool LinearInt16RowsAvx512Vnni(const LinearWeight& w, const Int16Activations& a, float* y, int64_t r0, int64_t r1);

// The int16 prefill GEMM (ActivationMode::kInt16DecodeInt16Prefill and kInt16Prefill,
// `--activations int16+int16`; linear_int16_gemm_simd.inc): products of more than
// kMaxGemvTokens tokens with q8 weights, and FP8 ones converted per group as they are
// unpacked (Fp8GroupToInt16), the reference's bits for every token. Tokens in tiles of kTokenTile as
// the int8 GEMM's: ntp tokens (n real, the rest zero padding; ntp a multiple of the build's
// 16 or 8 lanes); tile j (tokens [32j, 32j + tw), tw = min(32, ntp - 32j)) holds at q +
// 32j * cols / 2 [cols / 2][tw] pairs (2 adjacent int16 of a token in one 32-bit element)
// and at d + 32j * groups [groups][tw] scales.
struct Int16TokenTiles {
  const uint32_t* q = nullptr;
  const float* d = nullptr;
  int64_t ntp = 0, n = 0;
};
// Quantize tokens [t0, t1) of x [n][K] (padding tokens n <= t < ntp as zeros) into the
// tiles (sized ntp * K / 2 and ntp * K / 32), as QuantizeActivationsInt16. Needs AVX2.
void PackTokensInt16Avx2(const float* x, int64_t n, int64_t K, int64_t ntp, int64_t t0, int64_t t1, uint32_t* q,
                         float* d);
// Rows [r0, r1) of a q8 or FP8 (Fp8FitsInt16Groups) weight times the tiles: AVX-512
// F/BW/VL + VNNI (ntp a multiple of 16), AVX2 (ntp a multiple of 8). False for another format.
bool GemmRowsInt16Avx512Vnni(const LinearWeight& w, const Int16TokenTiles& x, float* y, int64_t r0, int64_t r1);
bool GemmRowsInt16Avx2(const LinearWeight& w, const Int16TokenTiles& x, float* y, int64_t r0, int64_t r1);
// Whether Linear() takes the int16 GEMM for n tokens of w here (kInt16 stays on the decode
// kernels for every token count, as kInt8 does: one kernel's bits).
bool UsesInt16Gemm(const LinearWeight& w, int64_t n);
// The GEMM builds' ceilings (m2 bench): independent chains of their dot step, int16
// operations (2 per multiply-add) per call. AVX2 / AVX-512 VNNI.
double Int16DotBurstAvx2(int64_t iters);
double Int16DotBurstAvx512Vnni(int64_t iters);
// Token lanes of the GEMM this CPU runs for the active kernels: 16 (AVX-512 VNNI), 8 (AVX2),
// 0 (the portable kernels: none).
int64_t Int16GemmLanes();

using Int16RowsFn = bool (*)(const LinearWeight&, const Int16Activations&, float*, int64_t, int64_t);
// The kernel for a kernel family on a CPU: portable -> the reference; avx512 -> AVX-512
// VNNI where the CPU has it, else AVX2; avx2 -> AVX2.
Int16RowsFn Int16RowsKernel(KernelIsa isa, const CpuFeatures& cpu);
// Its name, for benchmarks: "reference", "avx2" or "avx512vnni".
const char* Int16RowsKernelName(Int16RowsFn fn);
// Whether the int16 path has SIMD kernels here (the avx2 or avx512 families): what
// `--activations auto` asks before giving q8 decode steps int16 activations.
bool Int16KernelsAvailable();

}  // namespace m2
