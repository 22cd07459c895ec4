// AVX-512 build of the SIMD element-wise ops (see ops_simd.inc).
#define M2_SIMD_WIDTH 16
#define M2_SIMD_NS avx512
#define M2_OPS_SILU_MUL SiluMulAvx512
#include "kernels/ops_simd.inc"
