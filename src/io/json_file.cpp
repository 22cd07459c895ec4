#include "io/json_file.h"

#include "base/mapped_file.h"

namespace m2 {

Result<nlohmann::json> ParseJson(std::string_view text, const std::string& what) {
  // nlohmann's non-throwing mode still throws on some inputs (a number that overflows
  // a double, found by fuzz/fuzz_model_config), so catch every JSON exception here.
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Error("{} is not valid JSON (at byte {}): {}", what, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {
    return Error("{} is not valid JSON: {}", what, e.what());
  }
}

Result<nlohmann::json> ReadJsonFile(const std::string& path) {
  M2_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseJson(text, "'" + path + "'");
}

}  // namespace m2
