// A compiled pattern for the Split pre-tokenizer and normalizers, on PCRE2 (UTF + UCP
// + JIT). Hugging Face `tokenizers` compiles these patterns with Oniguruma; the two
// engines agree on the syntax the tokenizer files use (classes, \p{..}, (?i:..),
// lookahead, backtracking order) except for one difference handled here: Oniguruma's \s
// is exactly Unicode White_Space, while PCRE2's UCP \s also matches U+180E (MONGOLIAN
// VOWEL SEPARATOR, White_Space only before Unicode 6.3, still in PCRE2's \h list).
// TranslateOnigPattern spells \s out as the White_Space list so the sets are equal.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace m2::text {

// The pattern with \s (and \S outside classes) spelled out as Unicode White_Space (see
// above). Exposed for tests.
std::string TranslateOnigPattern(std::string_view pattern);

class Regex {
 public:
  // `literal`: match `pattern` as plain text (HF's SplitPattern::String).
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(start, end) for each match in `subject`, left to right, with the
  // iteration rule of the onig crate's find_iter (the one HF uses): the next search
  // starts where the last match ended; an empty match right where the previous one
  // ended is skipped by advancing one character. Precondition: `subject` is valid UTF-8.
  template <typename F>
  void ForEachMatch(std::string_view subject, F&& on_match) const {
    size_t start = 0;
    size_t last_end = static_cast<size_t>(-1);
    while (start <= subject.size()) {
      size_t s, e;
      if (!Find(subject, start, &s, &e)) break;
      if (s == e && e == last_end) {
        if (start >= subject.size()) break;
        start += NextCharLength(subject, start);
        continue;
      }
      on_match(s, e);
      start = e;
      last_end = e;
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  // The first match at or after `start`; false if there is none.
  bool Find(std::string_view subject, size_t start, size_t* match_start, size_t* match_end) const;
  static size_t NextCharLength(std::string_view s, size_t i);

  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  std::string pattern_;
};

}  // namespace m2::text
