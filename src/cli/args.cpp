#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"

namespace m2::cli {

Result<std::vector<int32_t>> ParseIdList(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ',' || text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && text[j] != ',' && text[j] != ' ' && text[j] != '\n' && text[j] != '\t') ++j;
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (errno != 0 || end == item.c_str() || *end != '\0' || v < 0 || v > 0x7fffffff)
      return Error("token id list: expected non-negative integers separated by commas, found '{}'", item);
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (ids.empty()) return Error("token id list is empty: give ids like --ids 1,2,3");
  return ids;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "m2: error: %s\n", status.message().c_str());
  return 1;
}

}  // namespace m2::cli
