#include "text/regex.h"

#include <algorithm>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/check.h"

namespace m2::text {

namespace {

// Per-thread match state: PCRE2 match data and JIT stack must not be shared between
// threads, and creating them per call would cost an allocation per match.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    // Long runs (e.g. 100k spaces) can need more than the 32 KiB default JIT stack.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    M2_CHECK(data && jit_stack && context, "PCRE2 allocation failed");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(data);
  }
};

MatchState& ThreadMatchState() {
  thread_local MatchState state;
  return state;
}

}  // namespace

// Unicode White_Space (PropList.txt), the set Oniguruma's \s matches in UTF-8 mode.
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string TranslateOnigPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[++i];
      if (n == 's') {
        if (!in_class) out += '[';
        out += kWhiteSpace;
        if (!in_class) out += ']';
      } else if (n == 'S' && !in_class) {
        out += "[^";
        out += kWhiteSpace;
        out += ']';
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal in both engines.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      // POSIX class such as [:alpha:] inside a class: copy through its closing ":]".
      size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Result<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern, bool literal) {
  std::string translated = literal ? std::string(pattern) : TranslateOnigPattern(pattern);
  // PCRE2_LITERAL allows UTF but not UCP (which only matters for classes anyway).
  uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                                   &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return Error("bad regex \"{}\": {} at offset {}", pattern, reinterpret_cast<const char*>(message), offset);
  }
  std::unique_ptr<Regex> re(new Regex());
  re->code_ = code;
  re->pattern_ = std::string(pattern);
  // The JIT is an optimisation only: without it (e.g. a platform PCRE2 built without
  // JIT) pcre2_match gives the same results, slower.
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

size_t Regex::NextCharLength(std::string_view s, size_t i) {
  unsigned char b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

bool Regex::Find(std::string_view subject, size_t start, size_t* match_start, size_t* match_end) const {
  MatchState& st = ThreadMatchState();
  auto* code = static_cast<pcre2_code*>(code_);
  auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = jit_ ? pcre2_jit_match(code, data, subject.size(), start, 0, st.data, st.context)
                : pcre2_match(code, data, subject.size(), start, PCRE2_NO_UTF_CHECK, st.data, st.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  // Any other failure (match limit, JIT stack) on a pattern that compiled is a resource
  // limit the library cannot recover from sensibly; tokenizing differently would be a
  // silent error, so stop loudly.
  M2_CHECK(rc >= 0, "PCRE2 match failed with code {} for pattern \"{}\"", rc, pattern_);
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  *match_start = ov[0];
  *match_end = ov[1];
  return true;
}

}  // namespace m2::text
