#include "text/added_tokens.h"

#include <unicode/uchar.h>

#include "text/utf8.h"

namespace m2::text {

namespace {

// The code point ending at s[end) (s valid UTF-8, end > 0).
uint32_t LastChar(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return DecodeUtf8Char(s.substr(b), end - b);
}

uint32_t FirstChar(std::string_view s, size_t begin) {
  size_t n = Utf8CharLength(s.substr(begin));
  return DecodeUtf8Char(s.substr(begin), n ? n : 1);
}

size_t CharStartBefore(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return b;
}

// Unicode \w as in Rust's regex crate, which HF uses for single_word: Alphabetic, marks,
// decimal numbers, connector punctuation and Join_Control.
bool IsWordChar(uint32_t cp) {
  UChar32 c = static_cast<UChar32>(cp);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
}

// \s in Rust's regex crate: Unicode White_Space.
bool IsSpace(uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

}  // namespace

void AddedTokenMatcher::Build(std::vector<const AddedToken*> tokens, const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node());
  tokens_.clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : p) {
      int32_t next = -1;
      for (auto [byte, child] : nodes_[node].children)
        if (byte == c) next = child;
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.push_back({c, next});
        nodes_.push_back(Node());
      }
      node = next;
    }
    // Two tokens with the same pattern: Aho-Corasick reports the first one added.
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
    }
    tokens_.push_back(tokens[i]);
    first_byte_[static_cast<unsigned char>(p[0])] = true;
  }
}

bool AddedTokenMatcher::FindNext(std::string_view text, size_t from, size_t* start, size_t* end, int* token) const {
  const auto* data = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = from; i < text.size(); ++i) {
    if (!first_byte_[data[i]]) continue;
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      int32_t next = -1;
      for (auto [byte, child] : nodes_[node].children)
        if (byte == data[j]) next = child;
      if (next < 0) break;
      node = next;
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = j + 1;
      }
    }
    if (best >= 0) {
      *start = i;
      *end = best_end;
      *token = best;
      return true;
    }
  }
  return false;
}

void AddedTokenMatcher::Split(std::string_view text, bool parse_special, std::vector<TextSplit>& out) const {
  if (text.empty() || tokens_.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t offset = 0;  // end of the last emitted split
  size_t search = 0;  // where the next search starts (end of the last raw match)
  size_t s, e;
  int t;
  while (search < text.size() && FindNext(text, search, &s, &e, &t)) {
    search = e;
    const AddedToken& tok = *tokens_[t];
    if (!parse_special && tok.special) continue;
    if (tok.single_word) {
      bool space_before = s == 0 || !IsWordChar(LastChar(text, s));
      bool space_after = e == text.size() || !IsWordChar(FirstChar(text, e));
      if (!space_before || !space_after) continue;
    }
    if (tok.lstrip) {
      size_t b = s;
      while (b > 0) {
        size_t c = CharStartBefore(text, b);
        if (!IsSpace(LastChar(text, b))) break;
        b = c;
      }
      // Spaces already absorbed by the previous split stay there.
      s = std::max(b, offset);
    }
    if (tok.rstrip) {
      while (e < text.size()) {
        size_t n = Utf8CharLength(text.substr(e));
        if (n == 0 || !IsSpace(DecodeUtf8Char(text.substr(e), n))) break;
        e += n;
      }
    }
    if (offset < s) out.push_back({offset, s, -1});
    out.push_back({s, e, tok.id});
    offset = e;
  }
  if (offset != text.size()) out.push_back({offset, text.size(), -1});
}

}  // namespace m2::text
