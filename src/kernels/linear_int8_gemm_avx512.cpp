// The int8 prefill GEMM built with AVX-512 VNNI (linear_int8_gemm_simd.inc), the token
// packing for it and the vpdpbusd ceiling.
#define M2_GEMM_NS int8gemm_avx512vnni
#define M2_GEMM_VNNI 1
#define M2_GEMM_BURST Int8DotBurstAvx512Vnni
#define M2_GEMM_ENTRY GemmRowsInt8Avx512Vnni
#define M2_GEMM_PACK PackTokensInt8Avx512
#include "kernels/linear_int8_gemm_simd.inc"
