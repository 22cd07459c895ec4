// The int16 prefill GEMM with vpdpwssd (AVX-512 VNNI, 16 tokens per vector); see linear_int16_gemm_simd.inc.
#define M2_I16G_NS int16_gemm_avx512
#define M2_I16G_VNNI 1
#define M2_I16G_ENTRY GemmRowsInt16Avx512Vnni
#define M2_I16G_BURST Int16DotBurstAvx512Vnni
#include "kernels/linear_int16_gemm_simd.inc"
