// The int8 prefill GEMM built with AVX2 (linear_int8_gemm_simd.inc; q4 weights by
// vpmaddubsw on the nibbles, q8 by vpsignb + vpmaddubsw + vpmaddwd), the token packing for
// it and the ceilings of both steps.
#define M2_GEMM_NS int8gemm_avx2
#define M2_GEMM_VNNI 0
#define M2_GEMM_BURST Int8DotBurstAvx2
#define M2_GEMM_BURST_SIGNED Int8DotBurstAvx2Signed
#define M2_GEMM_ENTRY GemmRowsInt8Avx2
#define M2_GEMM_PACK PackTokensInt8Avx2
#include "kernels/linear_int8_gemm_simd.inc"
