#include "runtime/stop_strings.h"

#include <algorithm>

namespace m2::runtime {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopStringFilter::Result StopStringFilter::Push(std::string_view piece) {
  Result r;
  if (stopped_) return r;
  held_.append(piece);
  // Earliest occurrence wins; among stops starting at the same place, the first listed.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at < best) {
      best = at;
      which = &s;
    }
  }
  if (which != nullptr) {
    r.text = held_.substr(0, best);
    r.stopped = stopped_ = true;
    r.stop = *which;
    held_.clear();
    return r;
  }
  // No stop yet: keep the longest tail that some stop string starts with. Held text is
  // shorter than the longest stop string, so this stays cheap.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return r;
}

std::string StopStringFilter::Flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

}  // namespace m2::runtime
