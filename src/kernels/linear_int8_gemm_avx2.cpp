// The int8 prefill GEMM built with AVX2 (linear_int8_gemm_simd.inc; q4 weights), the token
// packing for it and the vpmaddubsw ceiling.
#define M2_GEMM_NS int8gemm_avx2
#define M2_GEMM_VNNI 0
#define M2_GEMM_BURST Int8DotBurstAvx2
#define M2_GEMM_ENTRY GemmRowsInt8Avx2
#define M2_GEMM_PACK PackTokensInt8Avx2
#include "kernels/linear_int8_gemm_simd.inc"
