#include "text/regex.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace m2::text {
namespace {

std::vector<std::pair<size_t, size_t>> Matches(const Regex& re, std::string_view s) {
  std::vector<std::pair<size_t, size_t>> out;
  re.ForEachMatch(s, [&](size_t a, size_t b) { out.push_back({a, b}); });
  return out;
}

TEST(Regex, WhitespaceIsUnicodeWhiteSpaceLikeOniguruma) {
  // U+0085 and U+3000 are White_Space (HF/Oniguruma split on them); U+180E and U+200B
  // are not, although PCRE2's own \s takes U+180E.
  auto re = Regex::Compile(R"(\s+)");
  ASSERT_TRUE(re.ok()) << re.status().message();
  EXPECT_EQ(Matches(**re, "a\xC2\x85" "b\xE3\x80\x80" "c\xE2\x80\x8B" "d\xE1\xA0\x8E" "e"),
            (std::vector<std::pair<size_t, size_t>>{{1, 3}, {4, 7}}));
  auto non_space = Regex::Compile(R"(\S+)");
  ASSERT_TRUE(non_space.ok());
  EXPECT_EQ(Matches(**non_space, "\xE1\xA0\x8E \xC2\x85x"), (std::vector<std::pair<size_t, size_t>>{{0, 3}, {6, 7}}));
  // Inside a class, and next to an escaped bracket and an escaped backslash.
  auto cls = Regex::Compile(R"([^\s\]]+|\\s)");
  ASSERT_TRUE(cls.ok()) << cls.status().message();
  EXPECT_EQ(Matches(**cls, "ab]c\xE1\xA0\x8E d\\s"),
            (std::vector<std::pair<size_t, size_t>>{{0, 2}, {3, 7}, {8, 11}}));
  EXPECT_EQ(TranslateOnigPattern(R"(\p{L}\d)"), R"(\p{L}\d)");
}

TEST(Regex, EmptyMatchesFollowOnigFindIter) {
  auto re = Regex::Compile("a*");
  ASSERT_TRUE(re.ok());
  // onig's find_iter skips an empty match right where the previous match ended.
  EXPECT_EQ(Matches(**re, "baab"), (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 3}, {4, 4}}));
}

TEST(Regex, LiteralAndErrors) {
  auto lit = Regex::Compile("a.b", /*literal=*/true);
  ASSERT_TRUE(lit.ok());
  EXPECT_EQ(Matches(**lit, "axb a.b"), (std::vector<std::pair<size_t, size_t>>{{4, 7}}));
  auto bad = Regex::Compile("(unclosed");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("(unclosed"), std::string::npos) << bad.status().message();
}

TEST(Regex, CaseInsensitiveContractions) {
  auto re = Regex::Compile(R"((?i:'s|'t|'re))");
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(Matches(**re, "IT'S it's 'Re"), (std::vector<std::pair<size_t, size_t>>{{2, 4}, {7, 9}, {10, 13}}));
}

}  // namespace
}  // namespace m2::text
