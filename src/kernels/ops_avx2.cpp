// AVX2 build of the SIMD element-wise ops (see ops_simd.inc).
#define M2_SIMD_WIDTH 8
#define M2_SIMD_NS avx2
#define M2_OPS_SILU_MUL SiluMulAvx2
#include "kernels/ops_simd.inc"
