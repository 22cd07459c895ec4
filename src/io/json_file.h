#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace m2 {

// Reads and parses a JSON file; a syntax error names the file and the byte offset.
Result<nlohmann::json> ReadJsonFile(const std::string& path);
// Parses JSON text; `what` names the source in error messages.
Result<nlohmann::json> ParseJson(std::string_view text, const std::string& what);

}  // namespace m2
