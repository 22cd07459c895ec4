#include "chat/tool_schema.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace m2::chat {

namespace {

const char* SchemaTypeOf(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "array";
    case Json::value_t::object: return "object";
    default: return "";
  }
}

// Gathers the JSON types a schema allows. Depth-limited: schemas come from requests.
void CollectTypes(const Json& schema, std::set<std::string>& types, int depth) {
  if (!schema.is_object() || depth > 16) return;
  if (auto it = schema.find("type"); it != schema.end()) {
    if (it->is_string()) types.insert(it->get<std::string>());
    if (it->is_array()) {
      for (const Json& t : *it) {
        if (t.is_string()) types.insert(t.get<std::string>());
      }
    }
  }
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array()) {
    for (const Json& v : *it) types.insert(SchemaTypeOf(v));
  }
  if (auto it = schema.find("const"); it != schema.end()) types.insert(SchemaTypeOf(*it));
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (auto it = schema.find(key); it != schema.end() && it->is_array()) {
      for (const Json& sub : *it) CollectTypes(sub, types, depth + 1);
    }
  }
}

std::string_view TrimJsonSpace(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool Allows(const std::set<std::string>& types, const Json& value) {
  if (value.is_number()) return types.count("number") || types.count("integer");
  return types.count(SchemaTypeOf(value)) > 0;
}

}  // namespace

Result<ToolSet> ToolSet::FromJson(const Json& tools) {
  ToolSet set;
  if (tools.is_null()) return set;
  if (!tools.is_array()) return Error("tools: expected an array of tools or null, found {}", JsonTypeName(tools));
  if (JsonNestingExceeds(tools)) {
    return Error("tools: expected JSON nested at most {} levels deep, found deeper", kMaxJsonNesting);
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    if (!tool.is_object()) return Error("tools[{}]: expected an object, found {}", i, JsonTypeName(tool));
    const bool nested = tool.contains("function");
    const Json& function = nested ? tool.at("function") : tool;
    const std::string where = nested ? fmt::format("tools[{}].function", i) : fmt::format("tools[{}]", i);
    if (!function.is_object()) return Error("{}: expected an object, found {}", where, JsonTypeName(function));
    auto name = function.find("name");
    if (name == function.end() || !name->is_string()) {
      return Error("{}.name: expected a string, found {}", where,
                   name == function.end() ? std::string("nothing") : JsonTypeName(*name));
    }
    Json parameters = nullptr;
    for (const char* key : {"parameters", "input_schema"}) {
      if (auto it = function.find(key); it != function.end() && !it->is_null()) {
        if (!it->is_object()) {
          return Error("{}.{}: expected a JSON schema object, found {}", where, key, JsonTypeName(*it));
        }
        parameters = *it;
        break;
      }
    }
    set.tools_[name->get<std::string>()] = std::move(parameters);
  }
  return set;
}

const Json* ToolSet::ParameterSchema(std::string_view tool, std::string_view parameter) const {
  auto it = tools_.find(std::string(tool));
  if (it == tools_.end() || !it->second.is_object()) return nullptr;
  auto properties = it->second.find("properties");
  if (properties == it->second.end() || !properties->is_object()) return nullptr;
  auto schema = properties->find(std::string(parameter));
  return schema == properties->end() ? nullptr : &*schema;
}

Json ConvertParameterValue(std::string_view raw, const Json* schema) {
  const std::string_view text = TrimJsonSpace(raw);
  if (text == "null") return nullptr;
  std::set<std::string> types;
  if (schema != nullptr) CollectTypes(*schema, types, 0);
  types.erase("string");
  types.erase("null");
  if (!types.empty()) {
    Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    // Absurdly deep values stay text: copying a Json recurses.
    if (!parsed.is_discarded() && Allows(types, parsed) && !JsonNestingExceeds(parsed)) return parsed;
    if (types.count("boolean")) {
      std::string lower(text);
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      if (lower == "true") return true;
      if (lower == "false") return false;
    }
  }
  return std::string(raw);
}

}  // namespace m2::chat
