// JSON text -> Json values, as Python's json.loads reads a request, with the limits a server
// needs:
//   - object keys keep their order (nlohmann::ordered_json; duplicate keys: the last value,
//     at the first key's place, as a dict does);
//   - integers beyond 64 bits keep every digit (MakeBigInteger, py_format.h);
//   - a number beyond the range of a double (1e400) is an error naming where it is. (json.loads
//     would give inf, which json.dumps writes as Infinity - not JSON; nlohmann would throw.)
//     Underflow (1e-400) gives 0.0, as in Python;
//   - nesting deeper than kMaxJsonNesting is an error, found while parsing.
// Never throws.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "chat/py_format.h"

namespace m2::chat {

// Parses JSON text keeping object key order; `what` names the source in errors, which say
// where in the value the problem is ("tools[0].function.parameters.properties.a.default").
Result<Json> ParseOrderedJson(std::string_view text, const std::string& what);

}  // namespace m2::chat
