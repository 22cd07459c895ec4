// <immintrin.h> for the x86 kernels. GCC 12.1-12.2's AVX-512 intrinsics warn on their own
// _mm512_undefined_* wherever they are inlined (GCC bug 105593): silenced for the header's
// lines only, so the kernels' own code keeps every warning.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
