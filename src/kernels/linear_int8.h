// The int8-activation path for q8 / q4 weights (`--activations int8`): each token's
// activations are quantized per group of 32 columns (the weights' own group) to int8 with
// one fp32 scale, and every group's product is an exact integer dot product, scaled once
// by (weight scale x activation scale). On AVX2 that is vpmaddubsw + vpmaddwd: 32
// multiply-adds in two instructions where the fp32 path first widens each weight to fp32.
//
// Quantization of a group x[0..32): d = max|x| / 127, q[i] = round-to-nearest-even(x[i] *
// (127 / max|x|)), so q is in [-127, 127] (an all-zero group has d = 0 and q = 0). A group
// holding a NaN or an infinity gets d = NaN, so its outputs are NaN (never a silently
// finite result from bad input). The error per product is at most half a step of x's
// group scale; `m2 perplexity --activations int8 --reference SAME_MODEL` measures it.
//
// Linear() takes this path for a q8 / q4 weight whose LinearWeight::activations says so
// (ActivationMode in linear.h; the model sets it on load, LoadOptions::activations); every
// other format, and the weights left at kExact, stay on the exact fp32-activation kernels.
// The result for a token does not depend on the other tokens of the batch (per-token
// quantization, exact integer dots, the same fp32 summation order for any tile).
#pragma once

#include <cstdint>

#include "base/cpu.h"
#include "kernels/linear.h"

namespace m2 {

// Activations of n tokens quantized for the int8 path. Pointers into caller storage:
//  q [n][cols] int8; d [n][cols/32] fp32 scales; c [n][cols/32] = -8 * d * sum(q of the
//  group), the q4 kernels' correction for their unsigned nibbles (W = (u - 8) * s).
struct Int8Activations {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const float* c = nullptr;
  int64_t n = 0, cols = 0;
  int64_t groups() const { return cols / kQuantGroup; }
};

// max|x| over a group of 32 values into *amax; false if one of them is a NaN or an
// infinity (the int8 and int16 quantizers' shared first step).
bool GroupAbsMax(const float* xg, float* amax);
// Quantizes x [n][cols] (cols % 32 == 0) into q, d, c (sized as above).
void QuantizeActivationsInt8(const float* x, int64_t n, int64_t cols, int8_t* q, float* d, float* c);
// The same with AVX2 (identical results; needs AVX2).
void QuantizeActivationsInt8Avx2(const float* x, int64_t n, int64_t cols, int8_t* q, float* d, float* c);

// FP8 weights in the int8 GEMM (ActivationMode::kInt8Prefill): the 32 codes of a group of
// a row (one 128 x 128 block scale covers them), decoded exactly (the NaN codes 0x7f / 0xff
// as NaN) and quantized by the activations' rule (QuantizeActivationsInt8: q in [-127, 127],
// d = max|v| / 127, a NaN making d NaN); the group's weight is then q x (d x block_scale),
// the product d x block_scale rounded once to fp32 (returned). Portable; the GEMMs' own
// unpacking gives the same bytes and scale.
float QuantizeFp8GroupInt8(const uint8_t* codes, float block_scale, int8_t* q);
// Whether an FP8 weight can take that path: its blocks hold whole 32-column groups.
bool Fp8FitsInt8Groups(const LinearWeight& w);
// Row r of an FP8 weight converted group by group with `group` (QuantizeFp8GroupInt8, or
// Fp8GroupToInt16 in linear_int16.h), each group with its block's scale: the values into q
// [cols], the groups' scales into s [cols / 32]. What the portable references do per row.
template <class Q>
void ConvertFp8Row(const LinearWeight& w, int64_t r, float (*group)(const uint8_t*, float, Q*), Q* q, float* s) {
  const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * w.cols;
  const float* bs = static_cast<const float*>(w.scale) + (r / w.block_rows) * w.scale_cols();
  for (int64_t g = 0; g < w.cols / kQuantGroup; ++g)
    s[g] = group(p + g * kQuantGroup, bs[g * kQuantGroup / w.block_cols], q + g * kQuantGroup);
}

// y[t][r] for rows [r0, r1) of a q8 / q4 weight (or an FP8 one, requantized per group as
// above; the reference only) and all n tokens of `a`. The portable
// reference (integer dot per group, then fp32 sums in group order) and the x86 kernels
// (linear_int8_simd.inc), which give each other's bits: AVX2 (needs AVX2, FMA and F16C),
// AVX-512 VNNI (also AVX-512 F/BW/VL) and AVX-VNNI (AVX2 + AVX-VNNI). All return false for
// a format they do not handle. Int8RowsKernel picks one.
bool LinearInt8RowsReference(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t r1);
bool LinearInt8RowsAvx2(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t r1);
bool LinearInt8RowsAvx512Vnni(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t r1);
bool LinearInt8RowsAvxVnni(const LinearWeight& w, const Int8Activations& a, float* y, int64_t r0, int64_t r1);

// The int8 prefill GEMM (ActivationMode::kInt8DecodeInt8Prefill and kInt8Prefill,
// `--activations int8+int8`; linear_int8_gemm_simd.inc): products of more than
// kMaxGemvTokens tokens with q8 / q4 weights, and FP8 ones requantized per group as they
// are unpacked (QuantizeFp8GroupInt8; then as q8). Three builds: AVX-512 VNNI (q8 and q4; vpdpbusd, 64 multiply-adds per
// instruction, twice vdpbf16ps and four times an fp32 FMA), AVX-VNNI (q8 and q4; the VEX
// vpdpbusd on 256-bit vectors, 32 multiply-adds) and AVX2 (q4: vpmaddubsw with int16 sums
// over each group; q8: vpsignb + vpmaddubsw + vpmaddwd, int32 sums). All give the bits of LinearInt8RowsReference for every token,
// whatever its batch: the same quantization, the same exact integer group dots, the same
// fp32 operations in the same order.
enum class Int8GemmKernel { kNone, kAvx2, kAvxVnni, kAvx512Vnni };
// The GEMM a weight of format f gets here: AVX-512 VNNI on the avx512 family with VNNI;
// else AVX-VNNI where the CPU has it (on the avx2 family only without AVX-512, so that
// M2_KERNELS=avx2 runs the AVX2 build there, as the int8 decode kernels do); else AVX2 on
// the avx2 / avx512 families; else (the portable kernels) none.
Int8GemmKernel Int8GemmFor(WeightFormat f);
bool UsesInt8Gemm(const LinearWeight& w, int64_t n);  // whether Linear() takes it here
// Tokens per vector of a kernel (16 or 8): the GEMM pads the token count to a multiple.
int64_t Int8GemmLanes(Int8GemmKernel k);

// Tokens quantized for the GEMM, in tiles of kTokenTile as the other GEMMs (linear.h): ntp
// tokens (n of them real, the rest zero padding; ntp a multiple of the kernel's lanes). Tile
// j (tokens [32j, 32j + tw), tw = min(32, ntp - 32j)) holds, at q + 32j * cols / 4, [cols /
// 4][tw] quads (4 adjacent int8 of a token in one 32-bit element); at negsum + 32j * groups
// and d + 32j * groups, [groups][tw] of -sum(q of the group) and the group's scale.
struct Int8TokenTiles {
  const uint32_t* q = nullptr;
  const int32_t* negsum = nullptr;
  const float* d = nullptr;
  int64_t ntp = 0, n = 0;
};
// Quantize tokens [t0, t1) of x [n][K] (the padding tokens n <= t < ntp included, as zeros)
// into the tiles (sized ntp * K / 4, ntp * K / 32 and ntp * K / 32). Quantization as
// QuantizeActivationsInt8 (the same bytes and scales); both give the same tiles. The first
// needs AVX-512 F/BW/VL, the second AVX2.
void PackTokensInt8Avx512(const float* x, int64_t n, int64_t K, int64_t ntp, int64_t t0, int64_t t1, uint32_t* q,
                          int32_t* negsum, float* d);
void PackTokensInt8Avx2(const float* x, int64_t n, int64_t K, int64_t ntp, int64_t t0, int64_t t1, uint32_t* q,
                        int32_t* negsum, float* d);
// y[t][r] for rows [r0, r1) of a weight and the n tokens of x: q8 / q4 / FP8 with AVX-512
// F/BW/VL and VNNI (ntp a multiple of 16), with AVX2 and AVX-VNNI (ntp a multiple of 8;
// tokens packed by PackTokensInt8Avx2), with AVX2 (ntp a multiple of 8); false for another
// format (or FP8 whose blocks split a group).
bool GemmRowsInt8Avx512Vnni(const LinearWeight& w, const Int8TokenTiles& x, float* y, int64_t r0, int64_t r1);
bool GemmRowsInt8AvxVnni(const LinearWeight& w, const Int8TokenTiles& x, float* y, int64_t r0, int64_t r1);
bool GemmRowsInt8Avx2(const LinearWeight& w, const Int8TokenTiles& x, float* y, int64_t r0, int64_t r1);

using Int8RowsFn = bool (*)(const LinearWeight&, const Int8Activations&, float*, int64_t, int64_t);
// The kernel for a kernel family on a CPU: portable -> the reference; avx512 -> AVX-512
// VNNI where the CPU has it, else AVX-VNNI, else AVX2; avx2 -> AVX-VNNI on a CPU that has
// it and no AVX-512 (Intel's cores since Alder Lake), else plain AVX2, so that
// M2_KERNELS=avx2 on an AVX-512 machine runs what an AVX2-only CPU runs.
Int8RowsFn Int8RowsKernel(KernelIsa isa, const CpuFeatures& cpu);
// The kernel Linear() runs for n tokens of a weight of format f: Int8RowsKernel's, except
// that q8 at one or two tokens on Intel runs plain AVX2 whatever VNNI the CPU has (the same
// bits): on a Sapphire Rapids-class VM it decoded the q8 slice 9% faster (17.5-18.0 against
// 16.0-16.4 tokens/s, three alternating rounds; `gemv_bench --int8` 1536 x 3072, one token:
// 91-103% of the read probe against 82-91%), though in L2 the VNNI kernels are the faster
// (63-64 against 60 GB/s) and at 4-8 tokens or for q4 they win from memory too.
Int8RowsFn Int8RowsKernelFor(KernelIsa isa, const CpuFeatures& cpu, WeightFormat f, int64_t n);
// Its name, for benchmarks and logs: "reference", "avx2", "avx512vnni" or "avxvnni".
const char* Int8RowsKernelName(Int8RowsFn fn);

}  // namespace m2
