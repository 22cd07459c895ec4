// The int16-activation kernels with vpdpwssd (AVX-512 VNNI, on 256-bit vectors); see linear_int16_simd.inc.
#define M2_INT16_NS int16_avx512vnni
#define M2_INT16_VNNI 1
#define M2_INT16_ENTRY LinearInt16RowsAvx512Vnni
#include "kernels/linear_int16_simd.inc"
