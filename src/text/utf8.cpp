#include "text/utf8.h"

namespace m2::text {

namespace {

// The well-formed byte sequences, Unicode Standard table 3-7: the first byte fixes the
// length and the allowed range of the second byte; later bytes are 80..BF.
struct LeadInfo {
  uint8_t length;  // 0: not a valid lead byte
  uint8_t lo, hi;  // allowed range of the second byte
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};  // continuation byte, or C0/C1 (always overlong)
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};  // no overlongs
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};  // no overlongs
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

// How many bytes of a well-formed sequence starting at s[0] are present (<= length), and
// whether they are all well-formed so far.
size_t ValidPrefix(std::string_view s, const LeadInfo& info) {
  size_t n = 1;
  for (; n < info.length && n < s.size(); ++n) {
    uint8_t c = static_cast<uint8_t>(s[n]);
    uint8_t lo = n == 1 ? info.lo : 0x80, hi = n == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) break;
  }
  return n;
}

}  // namespace

size_t Utf8CharLength(std::string_view s, size_t* maximal_subpart) {
  uint8_t b = static_cast<uint8_t>(s[0]);
  if (b < 0x80) return 1;
  LeadInfo info = Lead(b);
  if (info.length == 0) {
    if (maximal_subpart) *maximal_subpart = 1;
    return 0;
  }
  size_t n = ValidPrefix(s, info);
  if (n == info.length) return n;
  // The maximal subpart is the lead byte plus the continuation bytes that were still
  // allowed: all of them are replaced by a single U+FFFD.
  if (maximal_subpart) *maximal_subpart = n;
  return 0;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path: 8 bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    size_t n = Utf8CharLength(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string RepairUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0;
    size_t n = Utf8CharLength(s.substr(i), &bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out.append(kReplacementChar);
      i += bad;
    }
  }
  return out;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    LeadInfo info = Lead(b);
    if (info.length == 0) {
      ++i;  // a lone bad byte: a lossy decoder replaces it whatever comes next
      continue;
    }
    size_t n = ValidPrefix(s.substr(i), info);
    if (n == info.length) {
      i += n;
    } else if (i + n == s.size()) {
      return i;  // a character still being completed: hold it back
    } else {
      i += n;  // ill-formed subpart followed by a byte that ends it: final already
    }
  }
  return i;
}

uint32_t DecodeUtf8Char(std::string_view s, size_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  switch (n) {
    case 1: return p[0];
    case 2: return (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) |
             (p[3] & 0x3F);
  }
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace m2::text
