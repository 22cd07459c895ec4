// The int16 prefill GEMM with vpmaddwd (AVX2, 8 tokens per vector) and its token packing; see linear_int16_gemm_simd.inc.
#define M2_I16G_NS int16_gemm_avx2
#define M2_I16G_VNNI 0
#define M2_I16G_ENTRY GemmRowsInt16Avx2
#define M2_I16G_PACK PackTokensInt16Avx2
#define M2_I16G_BURST Int16DotBurstAvx2
#include "kernels/linear_int16_gemm_simd.inc"
