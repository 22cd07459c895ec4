// The int8-activation kernels built with dot product vpdpbusd (AVX-512 VNNI: 256-bit, and 512-bit for q4 at 2-4 tokens); see linear_int8_simd.inc.
#define M2_INT8_NS int8_avx512vnni
#define M2_INT8_DOT 1
#define M2_INT8_ENTRY LinearInt8RowsAvx512Vnni
#include "kernels/linear_int8_simd.inc"
