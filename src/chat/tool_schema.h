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
//    JSON when it parses to one of the allowed types ("true"/"false" in any letter case for
//    booleans);
//  - otherwise, and always for strings, the raw text unchanged (no trimming: the template
//    writes strings byte for byte, so this keeps render -> parse a round trip).
// "type" may be a string or a list; "enum"/"const" values, "anyOf"/"oneOf"/"allOf"
// contribute their types; a schema with no type information keeps the raw string.
Json ConvertParameterValue(std::string_view raw, const Json* schema);

}  // namespace m2::chat
