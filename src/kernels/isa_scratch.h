// Per-thread scratch buffers for the ISA-specific kernel objects (linear_simd.inc,
// linear_bf16_avx512.cpp, linear_int8_gemm_simd.inc). Not std::vector: its member
// functions are inline templates emitted in both the AVX-512 and the AVX2 object, and the
// linker keeps one copy for the whole program, possibly the one compiled for AVX-512, which
// then faults on an AVX2-only CPU (it did: std::vector<float>::_M_fill_assign, SIGILL). Only
// plain new[] here, and an unnamed namespace, so every object that includes this header
// has its own copy, compiled with its own flags (scripts/check_isa_symbols.sh checks that
// no such object shares an inline symbol).
#pragma once

#include <cstddef>

namespace m2 {
namespace {

template <class T>
struct IsaScratch {
  T* p = nullptr;
  size_t n = 0;
  IsaScratch() = default;
  IsaScratch(const IsaScratch&) = delete;
  IsaScratch& operator=(const IsaScratch&) = delete;
  ~IsaScratch() { delete[] p; }
  T* Get(size_t m) {  // at least m elements; contents unspecified
    if (m > n) {
      delete[] p;
      p = new T[m];
      n = m;
    }
    return p;
  }
};

}  // namespace
}  // namespace m2
