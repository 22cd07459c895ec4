#include "text/byte_level.h"

#include "text/utf8.h"

namespace m2::text {

namespace {

struct Tables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, 512> cp_to_byte{};  // every mapped code point is < 512
  std::array<std::string, 256> byte_to_utf8;

  Tables() {
    cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
      AppendUtf8(byte_to_cp[b], byte_to_utf8[b]);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

uint32_t ByteToCodepoint(uint8_t b) { return GetTables().byte_to_cp[b]; }

std::optional<uint8_t> CodepointToByte(uint32_t cp) {
  if (cp >= 512) return std::nullopt;
  int16_t b = GetTables().cp_to_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::string BytesToByteLevel(std::string_view bytes) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += t.byte_to_utf8[c];
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    size_t n = Utf8CharLength(token.substr(i));
    if (n == 0) return std::nullopt;
    auto b = CodepointToByte(DecodeUtf8Char(token.substr(i), n));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += n;
  }
  return out;
}

std::string ByteLevelTokenToBytes(std::string_view token) {
  auto bytes = ByteLevelToBytes(token);
  return bytes ? std::move(*bytes) : std::string(token);
}

}  // namespace m2::text
