// The GPT-2 byte <-> character table used by byte-level BPE. Every byte value is shown
// as one printable character, so a vocabulary of strings can hold any byte sequence:
// bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves (as code points), and
// the other 68 bytes take code points 256, 257, ... in byte order (space -> U+0120 'Ġ').
// Reference: `bytes_to_unicode` in tokenizers/src/pre_tokenizers/byte_level.rs.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace m2::text {

// The code point that stands for byte `b`.
uint32_t ByteToCodepoint(uint8_t b);
// The byte a code point stands for, if it is one of the 256 table entries.
std::optional<uint8_t> CodepointToByte(uint32_t cp);

// Maps raw bytes to their byte-level characters (UTF-8 of the table's code points).
std::string BytesToByteLevel(std::string_view bytes);

// What the ByteLevel decoder makes of one token string: if every character is in the
// table, the bytes they stand for; otherwise the token's own UTF-8 unchanged (tokens
// such as "<think>" or added tokens with characters outside the table). This is the
// per-token rule of ByteLevel::decode_chain in Hugging Face `tokenizers`; the caller
// joins the results and repairs invalid UTF-8 once over the whole (utf8.h).
std::string ByteLevelTokenToBytes(std::string_view token);

// If every character of `token` is in the table, the bytes; nullopt otherwise.
std::optional<std::string> ByteLevelToBytes(std::string_view token);

}  // namespace m2::text
