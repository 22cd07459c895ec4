// How Python and Jinja turn JSON-shaped values into text, byte for byte.
//
// The official chat template is rendered by jinja2 over Python values (json.loads of the
// request), so every byte it prints comes from one of three conversions:
//   - `{{ x }}` prints str(x): strings raw, True/False/None, floats by repr, and dicts/lists
//     through repr() of their items ({'a': 1, 'b': [None, True]});
//   - the `tojson` filter, which transformers defines as json.dumps(x, ensure_ascii=False)
//     with the default separators ", " and ": " (testdata/reference/README.md);
//   - truthiness in `{% if x %}` (empty string/list/dict, 0, 0.0, None and False are false).
// The values are nlohmann::ordered_json so that object keys keep the request's order, as a
// Python dict does (std::map-backed nlohmann::json would sort them and change the bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace m2::chat {

using Json = nlohmann::ordered_json;

// Integers beyond 64 bits. json.loads keeps every digit of an integer (a Python int has no
// size limit) and the printers below write them all back; nlohmann::json would hold one as a
// double and lose digits. Request JSON parsed by ParseOrderedJson (json_parse.h) holds such
// an integer as its decimal text in a binary value of subtype kBigIntegerSubtype, which every
// function here treats as the int it stands for. nlohmann's dump() does not know them (it
// writes {"bytes": [...], "subtype": ...}): print values that may hold one with PyJsonDumps.
// The output parser never produces them (tool_schema.h).
inline constexpr std::uint64_t kBigIntegerSubtype = 0x49;  // 'I'
// `text`: an optional '-' and decimal digits, as JSON writes an integer.
Json MakeBigInteger(std::string_view text);
bool IsBigInteger(const Json& value);
// The decimal text of a big integer ("" for any other value).
std::string BigIntegerText(const Json& value);

// Python truthiness of the value json.loads would give.
bool PyTruthy(const Json& value);

// repr(float) in Python 3: the shortest text that round-trips, in fixed notation when the
// decimal exponent is in [-4, 16) ("0.0001", "100.0"), else scientific ("1e-05", "1e+16").
std::string PyFloatRepr(double value);

// repr(x) of the Python value: strings quoted and escaped as Python does.
std::string PyRepr(const Json& value);

// str(x): what `{{ x }}` prints. Equal to PyRepr except that strings print raw.
std::string PyStr(const Json& value);

// json.dumps(x, ensure_ascii=False) with the default separators: the template's `tojson`.
std::string PyJsonDumps(const Json& value);

// Values nested deeper than this are refused where they enter the chat code (request
// files, tool-call arguments, model output): the printers here recurse, and so does
// copying a Json. (Python itself gives up near 1000 levels, with RecursionError.)
inline constexpr int kMaxJsonNesting = 512;
// True when arrays/objects in `value` nest deeper than `limit` levels; iterative.
bool JsonNestingExceeds(const Json& value, int limit = kMaxJsonNesting);

// Short description of a value's JSON type for error messages ("a string", "null", ...).
std::string JsonTypeName(const Json& value);

}  // namespace m2::chat
