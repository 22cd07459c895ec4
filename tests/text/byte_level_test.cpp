#include "text/byte_level.h"

#include <gtest/gtest.h>

namespace m2::text {
namespace {

TEST(ByteLevel, Gpt2Table) {
  // Known entries of GPT-2's bytes_to_unicode.
  EXPECT_EQ(ByteToCodepoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(ByteToCodepoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(ByteToCodepoint(0), 0x100u);
  EXPECT_EQ(ByteToCodepoint('a'), uint32_t('a'));
  EXPECT_EQ(ByteToCodepoint(0xAD), 0x143u);  // soft hyphen is remapped
  EXPECT_EQ(ByteToCodepoint(0xE9), 0xE9u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(CodepointToByte(ByteToCodepoint(uint8_t(b))), uint8_t(b));
  EXPECT_FALSE(CodepointToByte(0x20).has_value());  // a space is not a table character
}

TEST(ByteLevel, TokenBytes) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  EXPECT_EQ(ByteLevelToBytes(BytesToByteLevel(all)), all);
  EXPECT_EQ(ByteLevelTokenToBytes("\xC4\xA0hello"), " hello");  // "Ġhello"
  // Characters outside the table: the token's own text (HF decode_chain).
  EXPECT_EQ(ByteLevelTokenToBytes("<\xEF\xBD\x9C" "end\xEF\xBD\x9C>"), "<\xEF\xBD\x9C" "end\xEF\xBD\x9C>");
  EXPECT_EQ(ByteLevelTokenToBytes("a b"), "a b");
}

}  // namespace
}  // namespace m2::text
