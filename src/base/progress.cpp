#include "base/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace m2 {

namespace {
std::string Amount(uint64_t v, const std::string& unit) {
  if (unit != "bytes") return fmt::format("{} {}", v, unit);
  if (v >= (1ull << 30)) return fmt::format("{:.2f} GiB", v / double(1ull << 30));
  if (v >= (1ull << 20)) return fmt::format("{:.1f} MiB", v / double(1ull << 20));
  return fmt::format("{:.1f} KiB", v / 1024.0);
}
}  // namespace

Progress::Progress(std::string label, uint64_t total, std::string unit, bool enabled)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), enabled_(enabled) {
  tty_ = ::isatty(STDERR_FILENO) != 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
  if (enabled_ && !tty_) std::fprintf(stderr, "%s: %s ...\n", label_.c_str(), Amount(total_, unit_).c_str());
}

Progress::~Progress() { Finish(); }

void Progress::Update(uint64_t done) {
  done_ = done;
  if (!enabled_ || !tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  Draw(false);
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) Draw(true);
}

void Progress::Draw(bool final) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double pct = total_ ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 100.0;
  std::string line = fmt::format("{}: {:5.1f}% ({} of {}) {:.1f}s", label_, pct, Amount(done_, unit_),
                                 Amount(total_, unit_), secs);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else if (final) {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace m2
