// UTF-8 helpers shared by the tokenizer: validation, lossy repair of invalid input, and
// finding the longest prefix of a byte stream that ends on a complete character.
//
// Invalid UTF-8 policy (the one place it is defined): every maximal subpart of an
// ill-formed sequence becomes one U+FFFD, as the Unicode Standard recommends (ch. 3,
// "U+FFFD Substitution of Maximal Subparts"). It is what Rust's String::from_utf8_lossy
// and Python's bytes.decode("utf-8", "replace") do, so the ids the engine gives for
// invalid bytes equal those Hugging Face `tokenizers` gives for the same bytes after
// that decoding (its API only accepts valid strings). Surrogates (ED A0..BF xx),
// overlong forms and code points above U+10FFFF are ill-formed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace m2::text {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed character starting at s[0], or 0 if the bytes there do not
// start one (then `*maximal_subpart` gets how many bytes one U+FFFD replaces, >= 1).
// Precondition: !s.empty().
size_t Utf8CharLength(std::string_view s, size_t* maximal_subpart = nullptr);

// True if `s` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view s);

// `s` with each maximal subpart of an ill-formed sequence replaced by U+FFFD.
std::string RepairUtf8(std::string_view s);

// The number of leading bytes of `s` that can be emitted now: whole characters, plus
// ill-formed subparts (which a lossy decoder replaces whatever follows). What remains is
// the start of a character that later bytes may complete (at most 3 bytes).
size_t CompleteUtf8Prefix(std::string_view s);

// Decodes one well-formed character at s[0] (precondition: Utf8CharLength(s) == n > 0).
uint32_t DecodeUtf8Char(std::string_view s, size_t n);
// Appends the UTF-8 encoding of code point `cp` (<= 0x10FFFF, not a surrogate).
void AppendUtf8(uint32_t cp, std::string& out);

}  // namespace m2::text
