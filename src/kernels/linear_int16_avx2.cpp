// The int16-activation kernels with vpmaddwd (AVX2), and the AVX2 quantizer; see linear_int16_simd.inc.
#define M2_INT16_NS int16_avx2
#define M2_INT16_VNNI 0
#define M2_INT16_ENTRY LinearInt16RowsAvx2
#include "kernels/linear_int16_simd.inc"
