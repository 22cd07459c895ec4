#include "chat/py_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace m2::chat {

namespace {

struct CodePointRange {
  uint32_t first, last;
};

// Non-ASCII code points that Python's str.isprintable() rejects, sorted.
constexpr CodePointRange kNonPrintable[] = {
#include "chat/py_printable_table.inc"
};

bool PyIsPrintableNonAscii(uint32_t cp) {
  const auto* end = std::end(kNonPrintable);
  const auto* it = std::upper_bound(std::begin(kNonPrintable), end, cp,
                                    [](uint32_t c, const CodePointRange& r) { return c < r.first; });
  if (it == std::begin(kNonPrintable)) return true;
  --it;
  return cp > it->last;
}

// Decodes one UTF-8 sequence at s[i]; returns its length, or 0 when the bytes there are
// not valid UTF-8 (never the case for strings nlohmann parsed, which validates them).
size_t DecodeUtf8(const std::string& s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  size_t len;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  return len;
}

// repr(str), following CPython's unicode_repr: single quotes unless the text holds a ' and
// no ", backslash escapes for the quote, \\, \t, \n, \r, \xNN for other ASCII controls and
// DEL, and \xNN / \uNNNN / \UNNNNNNNN for non-printable non-ASCII code points.
void AppendStrRepr(const std::string& s, std::string& out) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out += quote;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    size_t len = DecodeUtf8(s, i, cp);
    if (len == 0) {  // Not UTF-8: pass the byte through rather than fail.
      out += s[i++];
      continue;
    }
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      out += fmt::format("\\x{:02x}", cp);
    } else if (cp < 0x7F || PyIsPrintableNonAscii(cp)) {
      out.append(s, i, len);
    } else if (cp <= 0xFF) {
      out += fmt::format("\\x{:02x}", cp);
    } else if (cp <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out += fmt::format("\\U{:08x}", cp);
    }
    i += len;
  }
  out += quote;
}

// json.dumps string escaping with ensure_ascii=False (json.encoder.py_encode_basestring):
// only ", \\ and the C0 controls are escaped; \u escapes use lowercase hex.
void AppendJsonString(const std::string& s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<uint8_t>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void AppendRepr(const Json& v, std::string& out) {
  switch (v.type()) {
    case Json::value_t::null: out += "None"; return;
    case Json::value_t::boolean: out += v.get<bool>() ? "True" : "False"; return;
    case Json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case Json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case Json::value_t::number_float: out += PyFloatRepr(v.get<double>()); return;
    case Json::value_t::string: AppendStrRepr(v.get_ref<const std::string&>(), out); return;
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& item : v) {
        if (!first) out += ", ";
        first = false;
        AppendRepr(item, out);
      }
      out += ']';
      return;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        AppendStrRepr(key, out);
        out += ": ";
        AppendRepr(item, out);
      }
      out += '}';
      return;
    }
    case Json::value_t::binary: out += IsBigInteger(v) ? BigIntegerText(v) : "None"; return;
    case Json::value_t::discarded: out += "None"; return;  // never produced by parsing
  }
}

void AppendJson(const Json& v, std::string& out) {
  switch (v.type()) {
    case Json::value_t::null: out += "null"; return;
    case Json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case Json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case Json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case Json::value_t::number_float: {
      // json.dumps uses float.__repr__, and writes non-finite values as JS literals.
      const double d = v.get<double>();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += PyFloatRepr(d);
      }
      return;
    }
    case Json::value_t::string: AppendJsonString(v.get_ref<const std::string&>(), out); return;
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& item : v) {
        if (!first) out += ", ";
        first = false;
        AppendJson(item, out);
      }
      out += ']';
      return;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        AppendJsonString(key, out);
        out += ": ";
        AppendJson(item, out);
      }
      out += '}';
      return;
    }
    case Json::value_t::binary: out += IsBigInteger(v) ? BigIntegerText(v) : "null"; return;
    case Json::value_t::discarded: out += "null"; return;
  }
}

}  // namespace

Json MakeBigInteger(std::string_view text) {
  return Json::binary(Json::binary_t::container_type(text.begin(), text.end()), kBigIntegerSubtype);
}

bool IsBigInteger(const Json& value) {
  return value.is_binary() && value.get_binary().has_subtype() && value.get_binary().subtype() == kBigIntegerSubtype;
}

std::string BigIntegerText(const Json& value) {
  if (!IsBigInteger(value)) return "";
  const auto& bytes = value.get_binary();
  return std::string(bytes.begin(), bytes.end());
}

bool PyTruthy(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return v.get<bool>();
    case Json::value_t::number_integer: return v.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case Json::value_t::number_float: return v.get<double>() != 0.0;
    case Json::value_t::string: return !v.get_ref<const std::string&>().empty();  // json::empty() is false for strings
    case Json::value_t::array:
    case Json::value_t::object: return !v.empty();
    case Json::value_t::binary: return IsBigInteger(v);  // never 0: it does not fit 64 bits
    case Json::value_t::discarded: return false;
  }
  return false;
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, as Python's repr (David Gay's algorithm, mode 0) picks them.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+02" or "5e-324"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  // Python: scientific when the exponent is < -4 or >= 16 (float_repr_style 'short', 'r').
  if (exp10 < -4 || exp10 >= 16) {
    std::string out = sign;
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out;
  }
  std::string out = sign;
  if (exp10 < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exp10 - 1), '0');
    out += digits;
  } else {
    const size_t int_len = static_cast<size_t>(exp10) + 1;
    if (digits.size() <= int_len) {
      out += digits;
      out.append(int_len - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return out;
}

std::string PyRepr(const Json& value) {
  std::string out;
  AppendRepr(value, out);
  return out;
}

std::string PyStr(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return PyRepr(value);
}

std::string PyJsonDumps(const Json& value) {
  std::string out;
  AppendJson(value, out);
  return out;
}

bool JsonNestingExceeds(const Json& value, int limit) {
  std::vector<std::pair<const Json*, int>> stack = {{&value, 1}};
  while (!stack.empty()) {
    auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth > limit) return true;
    for (const Json& child : *v) stack.emplace_back(&child, depth + 1);
  }
  return false;
}

std::string JsonTypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    case Json::value_t::binary: return IsBigInteger(v) ? "a number" : "an unknown value";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "an unknown value";
  }
}

}  // namespace m2::chat
