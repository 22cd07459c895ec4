// A non-owning view of a tensor stored in a checkpoint (usually inside a mapped file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace m2 {

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data); }
};

// "[3, 4]"
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace m2
