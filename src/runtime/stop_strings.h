// Stop strings over streamed text: generation ends where one of them appears, the stop
// string itself is never shown, and text that could still turn out to be the start of
// one is held back until the next piece decides it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace m2::runtime {

class StopStringFilter {
 public:
  // Empty strings are ignored (they would match before any text).
  explicit StopStringFilter(std::vector<std::string> stops);

  struct Result {
    std::string text;  // safe to show now
    bool stopped = false;
    std::string stop;  // the stop string found, when stopped
  };

  // Appends `piece` to what is held. When a stop string now occurs, returns the text
  // before its earliest occurrence and stopped = true (later calls return nothing).
  // Otherwise returns all text except the longest tail that is a proper prefix of some
  // stop string.
  Result Push(std::string_view piece);
  // The stream ended without a stop: releases the held tail.
  std::string Flush();

  bool stopped() const { return stopped_; }
  const std::string& held() const { return held_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace m2::runtime
