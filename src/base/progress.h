// A one-line progress display on stderr for long operations (loading, converting,
// benchmarking). Redraws at most a few times a second, and only when stderr is a
// terminal; otherwise it prints the start and end lines only, so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace m2 {

class Progress {
 public:
  // `total` in units of `unit` ("bytes" are shown as MB/GB).
  Progress(std::string label, uint64_t total, std::string unit = "bytes", bool enabled = true);
  ~Progress();
  void Advance(uint64_t delta) { Update(done_ + delta); }
  void Update(uint64_t done);
  void Finish();

 private:
  void Draw(bool final);
  std::string label_, unit_;
  uint64_t total_, done_ = 0;
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace m2
