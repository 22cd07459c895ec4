#include "text/utf8.h"

#include <gtest/gtest.h>

namespace m2::text {
namespace {

const std::string R(kReplacementChar);

// Expected values are Python's bytes.decode("utf-8", "replace") (one U+FFFD per maximal
// subpart), which Rust's String::from_utf8_lossy matches.
TEST(Utf8, RepairsEachMaximalSubpartWithOneReplacement) {
  struct Case {
    std::string in, out;
  } cases[] = {
      {"plain ascii", "plain ascii"},
      {"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80", "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"},
      {"\xE0\x80\xAF", R + R + R},                // overlong 3-byte form
      {"\xED\xA0\x80", R + R + R},                // a surrogate
      {"\xF4\x90\x80\x80", R + R + R + R},        // above U+10FFFF
      {"\xC3\xC3\xA9", R + "\xC3\xA9"},           // truncated, then a good character
      {"\xF0\x9F\x98", R},                        // truncated at the end: one subpart
      {"a\xF0\x9F\x98" "b", "a" + R + "b"},
      {"\xC0\xAF", R + R},                        // C0/C1 are never valid
      {"\xE4\xB8\xE4\xB8\xAD", R + "\xE4\xB8\xAD"},
      {"\xF5\xFF", R + R},
      {"\x80\x80", R + R},                        // lone continuation bytes
  };
  for (const Case& c : cases) {
    EXPECT_EQ(RepairUtf8(c.in), c.out) << "input bytes: " << c.in.size();
    EXPECT_EQ(IsValidUtf8(c.in), c.in == c.out);
  }
}

TEST(Utf8, CompletePrefixHoldsBackOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE4\xB8"), 2u);           // 中 still coming
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x98"), 0u);         // 😀 still coming
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x98\x80"), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("\xE4\xB8" "a"), 3u);         // broken for good: emit (as U+FFFD)
  EXPECT_EQ(CompleteUtf8Prefix("\x80"), 1u);                 // can never become valid
  EXPECT_EQ(CompleteUtf8Prefix("a\xED\xA0"), 3u);            // ED A0 starts no valid character
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

TEST(Utf8, EncodeDecodeRoundTrip) {
  for (uint32_t cp : {0x24u, 0xA2u, 0x939u, 0x20ACu, 0xD55Cu, 0x10348u, 0x10FFFFu}) {
    std::string s;
    AppendUtf8(cp, s);
    ASSERT_EQ(Utf8CharLength(s), s.size());
    EXPECT_EQ(DecodeUtf8Char(s, s.size()), cp);
  }
}

}  // namespace
}  // namespace m2::text
