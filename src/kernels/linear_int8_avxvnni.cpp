// The int8-activation kernels built with dot product vpdpbusd (AVX-VNNI); see linear_int8_simd.inc.
#define M2_INT8_NS int8_avxvnni
#define M2_INT8_DOT 2
#define M2_INT8_ENTRY LinearInt8RowsAvxVnni
#include "kernels/linear_int8_simd.inc"
