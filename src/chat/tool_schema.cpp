#include "chat/tool_schema.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

#include "chat/json_parse.h"

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
    case Json::value_t::binary: return IsBigInteger(value) ? "integer" : "";
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

bool IsNumber(const Json& value) { return value.is_number() || IsBigInteger(value); }

bool Allows(const std::set<std::string>& types, const Json& value) {
  if (IsNumber(value)) return types.count("number") || types.count("integer");
  return types.count(SchemaTypeOf(value)) > 0;
}

// Parsed arguments hold only values nlohmann can print (callers dump them): an integer
// beyond 64 bits becomes the string of its digits, wherever it is.
void BigIntegersToStrings(Json& value) {
  if (IsBigInteger(value)) {
    value = BigIntegerText(value);
  } else if (value.is_structured()) {
    for (Json& item : value) BigIntegersToStrings(item);  // depth is bounded by the parser
  }
}

// Number text a reader takes for a number though JSON does not: a '+' sign, leading zeros,
// a bare fraction (".5") or point ("5."). Returns it in JSON form ("5", "0.5", "5.0"), or
// nothing when `s` is no number at all (hex, "inf", "1_000", ...).
std::optional<std::string> LenientNumberAsJson(std::string_view s) {
  std::string sign;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    if (s[0] == '-') sign = "-";
    s.remove_prefix(1);
  }
  const auto digits = [](std::string_view t) {
    return t.find_first_not_of("0123456789") == std::string_view::npos;
  };
  std::string_view exponent;
  if (size_t e = s.find_first_of("eE"); e != std::string_view::npos) {
    exponent = s.substr(e);
    s = s.substr(0, e);
    std::string_view exp_digits = exponent.substr(1);
    if (!exp_digits.empty() && (exp_digits[0] == '+' || exp_digits[0] == '-')) exp_digits.remove_prefix(1);
    if (exp_digits.empty() || !digits(exp_digits)) return std::nullopt;
  }
  std::string_view int_part = s, frac_part;
  bool has_point = false;
  if (size_t p = s.find('.'); p != std::string_view::npos) {
    int_part = s.substr(0, p);
    frac_part = s.substr(p + 1);
    has_point = true;
  }
  if (!digits(int_part) || !digits(frac_part) || (int_part.empty() && frac_part.empty())) return std::nullopt;
  while (int_part.size() > 1 && int_part[0] == '0') int_part.remove_prefix(1);
  std::string out = sign;
  out += int_part.empty() ? "0" : std::string(int_part);
  if (has_point) {
    out += '.';
    out += frac_part.empty() ? "0" : std::string(frac_part);
  }
  out += exponent;
  return out;
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
  const bool string_allowed = types.erase("string") > 0;
  types.erase("null");
  if (types.empty()) return std::string(raw);
  // Absurdly deep values, and numbers beyond a double, do not parse and stay text.
  if (auto parsed = ParseOrderedJson(text, "value"); parsed.ok() && Allows(types, *parsed)) {
    BigIntegersToStrings(*parsed);
    return std::move(*parsed);
  }
  const bool numeric = types.count("number") || types.count("integer");
  if (numeric && !string_allowed) {
    if (std::optional<std::string> json = LenientNumberAsJson(text)) {
      if (auto number = ParseOrderedJson(*json, "value"); number.ok() && IsNumber(*number)) {
        BigIntegersToStrings(*number);
        return std::move(*number);
      }
    }
  }
  if (types.count("boolean")) {
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower == "true" || (lower == "1" && !string_allowed)) return true;
    if (lower == "false" || (lower == "0" && !string_allowed)) return false;
  }
  return std::string(raw);
}

}  // namespace m2::chat
