#include "base/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace m2 {

std::string ShapeString(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace m2
