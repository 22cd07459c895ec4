// The bf16-activation prefill path (`--activations bf16`): on CPUs with AVX-512 BF16, the
// prefill GEMM of bf16 and FP8 weights rounds the activations to bf16 and multiplies with
// vdpbf16ps, which does two multiply-adds per fp32 lane where an FMA does one (the
// products are exact in fp32; the sums are fp32 as before).
//
// The weights stay exact: bf16 weights are bf16 already, and an FP8 weight's value / 256
// (4 significant bits, exponent within bf16's normal range) is a bf16 value; the FP8 block
// scale (x 256) multiplies each 128-column block's fp32 partial sum, as in the exact
// decode kernels. So the only change from the exact path is x rounded to bf16 (round to
// nearest even; values below bf16's smallest normal read as zero, as vdpbf16ps treats
// them): a relative error of at most 2^-9 per activation. `m2 perplexity --activations
// bf16 --reference SAME_MODEL` measures what it does to the output distribution.
//
// Decode steps (up to kMaxGemvTokens tokens) keep the exact kernels: they are limited by
// reading the weights, not by multiplying. Other weight formats keep their own paths.
#pragma once

#include <cstdint>

#include "kernels/linear.h"

namespace m2 {

// Whether this CPU and the active kernel family can run the bf16 path: AVX-512 BF16 and
// M2_KERNELS unset or avx512.
bool Bf16GemmAvailable();
// Whether the bf16 prefill GEMM of weights in format f beats the fp32 one on this CPU, so
// that --activations auto takes it: bf16 and FP8 weights on the tile unit (AMX; Sapphire
// Rapids VM, M2 slice prefill 512: 126 -> 350 tokens/s), and bf16, FP8, q8 and q4 weights
// with vdpbf16ps on AMD (Zen 4 / Zen 5, where it does twice the FMA's multiply-adds: FP8
// 1.5-1.9x, q8 1.7x); not on Intel's vector units alone, where it runs at the FMA's rate
// (the same VM with M2_AMX=0: 100 against 126 tokens/s), which is all q8 and q4 get there
// (the tile unit takes bf16 and FP8 panels only).
bool Bf16PrefillBeatsFp32(WeightFormat f);
// Whether Linear() takes the bf16 decode kernel (GemvRowsBf16Avx512 below) for this weight
// and token count: a weight with bf16 activations (kBf16Prefill, which despite its name also
// covers decode steps of FP8 weights), FP8 that the kernel takes, 1..kMaxGemvTokens tokens,
// on a CPU where it beats the exact kernel (AMD; not Intel's, see linear_bf16.cpp).
// bf16 weights keep the exact decode kernel (no gain: their decode is memory-bound already).
bool UsesBf16Gemv(const LinearWeight& w, int64_t n);
// Whether Linear() takes the bf16 path for this weight and token count.
bool UsesBf16Gemm(const LinearWeight& w, int64_t n);

// fp32 -> bf16 bits as vcvtneps2bf16 does it: round to nearest even, subnormals to
// signed zero, NaN stays NaN (quieted).
uint16_t RoundToBf16(float f);

// Tokens of the bf16 GEMM are padded to a multiple of this (not of 16): its last 8 tokens
// go to a 256-bit kernel.
inline constexpr int64_t kBf16TokenPad = 8;

// Activations for the kernel: xt is x transposed in fp32 as for the fp32 GEMM (linear.h:
// ntp tokens, here a multiple of kBf16TokenPad, in tiles of kTokenTile; tile j starts at xt + 32j * K
// and holds [K][tw]); out gets the same tiles with each pair of columns rounded to bf16 and
// packed into 32 bits (low half column 2p, high half 2p + 1): tile j starts at out + 32j * K
// / 2 and holds [K / 2][tw]. K even. Needs AVX-512 BF16.
void PackTokensBf16Avx512(const float* xt, int64_t ntp, int64_t K, uint32_t* out);

// y[t][r] for rows [r0, r1) of a bf16 or FP8 weight (FP8 block_cols a power of two >= 16)
// and the n tokens of xt (packed as above). Needs AVX-512 F/BW/VL and BF16; false for another
// format.
bool GemmRowsBf16Avx512(const LinearWeight& w, const uint32_t* xt, int64_t ntp, int64_t n, float* y, int64_t r0,
                        int64_t r1);

// ---- The same GEMM on the tile unit (linear_bf16_amx.cpp) ----------------------------
// Where the CPU has AMX-BF16 (Intel Sapphire Rapids and later) and M2_AMX is not 0, the
// bf16 prefill of bf16 and FP8 weights multiplies 16 x 32 tiles (TDPBF16PS), the same
// products as GemmRowsBf16Avx512 (weights exact, x rounded to bf16, fp32 sums, FP8 block
// sums scaled in fp32) in another order of summation.

// Asks Linux for the tile data state (once per process; false where it refuses).
bool RequestAmxPermission();
// Whether Linear() runs the bf16 GEMM on the tile unit: Bf16GemmAvailable(), AMX-BF16,
// AVX-512 VBMI, M2_AMX not 0 and the permission granted. Decided once.
bool AmxBf16Available();
// Turns the tile unit off (false) or back on where available: tests and gemv_bench compare
// the two GEMMs in one process with it.
void SetAmxBf16ForTesting(bool on);
// Whether the AMX kernel takes this weight: bf16 with cols a multiple of 32; FP8 with cols
// and block_cols multiples of 64, block_rows of 16.
bool GemmAmxSupports(const LinearWeight& w);
// Tokens of the AMX GEMM are padded to a multiple of this (a B tile's 16 tokens).
inline constexpr int64_t kAmxTokenPad = 16;
// As GemmRowsBf16Avx512 (the same packed tokens, ntp a multiple of kAmxTokenPad), on the
// tile unit; rows past the last whole 16 go to GemmRowsBf16Avx512. Needs AmxBf16Available().
bool GemmRowsBf16Amx(const LinearWeight& w, const uint32_t* xt, int64_t ntp, int64_t n, float* y, int64_t r0,
                     int64_t r1);

// ---- Decode with bf16 activations (linear_bf16_gemv_avx512.cpp) ----------------------
// Products of up to 4 tokens with bf16 or FP8 weights, x rounded to bf16 (as above) and
// multiplied with vdpbf16ps: bf16 weights as they are (one instruction per 32 weights),
// FP8 weights decoded by two GFNI bit moves per 64 (exact but for subnormal codes, which
// drop out; Fp8GemvGfni in linear.h) or by two AVX-512 VBMI byte-table lookups (exact).
// Linear() uses them for FP8 weights with bf16 activations (UsesBf16Gemv); `gemv_bench
// --bf16` checks them against a double-precision reference before it times them.

// Whether the decode kernel takes this weight: bf16, or FP8 with block_cols a multiple of
// 64 on a CPU with VBMI and GFNI; cols a multiple of 64.
bool GemvBf16Supports(const LinearWeight& w, bool vbmi_and_gfni);
// x [n][K] (fp32) -> out [n][K] bf16 in the order the kernel reads: column order for bf16
// weights; fp8_order: within each 64 columns, the two halves that vpunpcklbw / vpunpckhbw
// make of a line of FP8 bytes (columns 16L + 0..7, then 16L + 8..15, for lanes L = 0..3),
// each value times 2^shift, the shift returned: the largest |x| lands in [2^63, 2^64) (the
// FP8 kernel's GFNI decode gives the weights' values times 2^-120, and the products must
// stay far above fp32's subnormals, which vdpbf16ps flushes). Column order: shift 0. K a
// multiple of 64. Needs AVX-512 BF16.
int PackGemvBf16Avx512(const float* x, int64_t n, int64_t K, bool fp8_order, uint16_t* out);
// y[t][r] for rows [r0, r1) and n (1..4) tokens packed as above, x_shift what the packing
// returned. Needs AVX-512 BF16 (and VBMI and GFNI for FP8); false for another format or n.
bool GemvRowsBf16Avx512(const LinearWeight& w, const uint16_t* xb, int x_shift, int64_t n, float* y, int64_t r0,
                        int64_t r1);

}  // namespace m2
