// Error handling, channel two: broken invariants (a bug in the engine, not bad input).
// M2_CHECK aborts with file and line in every build type; it is never compiled out,
// unlike assert(). Never use it for conditions a user's file or request can cause.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace m2::detail {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "m2: internal check failed at %s:%d: %s %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace m2::detail

#define M2_CHECK(cond, ...)                                                            \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      ::m2::detail::CheckFailed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
