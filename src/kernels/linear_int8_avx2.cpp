// The int8-activation kernels built with dot product vpmaddubsw + vpmaddwd (AVX2); see linear_int8_simd.inc.
#define M2_INT8_NS int8_avx2
#define M2_INT8_DOT 0
#define M2_INT8_ENTRY LinearInt8RowsAvx2
#include "kernels/linear_int8_simd.inc"
