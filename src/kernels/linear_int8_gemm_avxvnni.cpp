// The int8 prefill GEMM built with AVX2 + AVX-VNNI (linear_int8_gemm_simd.inc: the VEX
// vpdpbusd on 256-bit vectors; q8 and q4) and its vpdpbusd ceiling. The tokens are packed
// by PackTokensInt8Avx2.
#define M2_GEMM_NS int8gemm_avxvnni
#define M2_GEMM_VNNI 1
#define M2_GEMM_WIDTH 8
#define M2_GEMM_BURST Int8DotBurstAvxVnni
#define M2_GEMM_ENTRY GemmRowsInt8AvxVnni
#include "kernels/linear_int8_gemm_simd.inc"
