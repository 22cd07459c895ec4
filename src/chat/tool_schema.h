// The tools of a request, by name, and typing of tool-call parameter values by their JSON
// schema.
//
// The chat template writes a call's argument values raw when they are strings and as JSON
// otherwise (`v | tojson if v is not string else v`), so the text between
// <parameter name="k"> and </parameter> only regains its type through the tool's schema:
// "42" is the integer 42 for {"type": "integer"} but the string "42" for {"type": "string"}.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "base/status.h"
#include "chat/py_format.h"

namespace m2::chat {

class ToolSet {
 public:
  ToolSet() = default;
  // `tools`: null, or an array of OpenAI tools {"type": "function", "function": {"name",
  // "parameters"}}; the flat {"name", "parameters"} and Anthropic's {"name", "input_schema"}
  // are accepted too. An error names the tool and what was found.
  static Result<ToolSet> FromJson(const Json& tools);

  bool empty() const { return tools_.empty(); }
  size_t size() const { return tools_.size(); }
  bool Has(std::string_view name) const { return tools_.find(std::string(name)) != tools_.end(); }
  // The schema of one parameter, or nullptr when the tool or the parameter is not declared.
  const Json* ParameterSchema(std::string_view tool, std::string_view parameter) const;

 private:
  std::map<std::string, Json> tools_;  // name -> "parameters" schema (an object, or null)
};

// Types one raw parameter value by its schema (nullptr: none declared).
//  - "null" (surrounding whitespace aside) -> null, whatever the schema (tojson's null);
//  - a schema allowing integer / number / boolean / object / array: the value parsed as
//    JSON (json_parse.h) when it parses to one of the allowed types ("true"/"false" in any
//    letter case for booleans);
//  - what the schema clearly means, when it does not also allow a string: for number and
//    integer, number text JSON does not allow - "+5" -> 5, "007" -> 7, ".5" -> 0.5,
//    "5." -> 5.0 (not hex, "inf", "1_000"); for boolean, "1" / "0" -> true / false. (With a
//    string allowed, "007" may well be meant as text, and stays text.);
//  - otherwise, and always for strings, the raw text unchanged (no trimming: the template
//    writes strings byte for byte, so this keeps render -> parse a round trip).
// Numbers: a number beyond the range of a double ("1e400") is no number - the value stays
// the raw text, as any text that does not parse does (inf never reaches the arguments). An
// integer beyond 64 bits keeps every digit as a string ("123456789012345678901234567890"),
// also inside objects and arrays: arguments hold only values nlohmann can print (callers
// dump them), and the template writes a string argument raw, so re-rendering the call gives
// back the digits the model wrote.
// "type" may be a string or a list; "enum"/"const" values, "anyOf"/"oneOf"/"allOf"
// contribute their types; a schema with no type information keeps the raw string.
Json ConvertParameterValue(std::string_view raw, const Json* schema);

}  // namespace m2::chat
