#include "io/json_file.h"

#include "base/mapped_file.h"

namespace m2 {

Result<nlohmann::json> ParseJson(std::string_view text, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-parse with exceptions only to get the position for the message.
    try {
      const auto again = nlohmann::json::parse(text);
      (void)again;
    } catch (const nlohmann::json::parse_error& e) {
      return Error("{} is not valid JSON (at byte {}): {}", what, e.byte, e.what());
    }
    return Error("{} is not valid JSON", what);
  }
  return j;
}

Result<nlohmann::json> ReadJsonFile(const std::string& path) {
  M2_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseJson(text, "'" + path + "'");
}

}  // namespace m2
