// Strict number arguments for the bench programs: "12x", "abc", "" or a value out of range
// is an error naming the argument, what it must be and what was given, never read as 0 or 12
// (std::atoi / std::atof would).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace m2::bench {

// `text` as a whole number in [lo, hi] into *out; false after printing "PROGRAM: WHAT must be ...".
inline bool ParseWhole(const char* program, const char* what, const char* text, long long lo, long long hi,
                       long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) {
    std::fprintf(stderr, "%s: %s must be a whole number from %lld to %lld, not '%s'\n", program, what, lo, hi, text);
    return false;
  }
  *out = v;
  return true;
}

// `text` as a decimal number in [lo, hi] into *out; false after printing the error.
inline bool ParseDecimal(const char* program, const char* what, const char* text, double lo, double hi, double* out) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !std::isfinite(v) || v < lo || v > hi) {
    std::fprintf(stderr, "%s: %s must be a number from %g to %g, not '%s'\n", program, what, lo, hi, text);
    return false;
  }
  *out = v;
  return true;
}

}  // namespace m2::bench
