// Normalizers of tokenizer.json ("normalizer" field), applied to the text between added
// tokens before pre-tokenization. Supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace,
// Prepend, Strip and Sequence of these - the ones byte-level BPE files use. Unicode
// normalization and case mapping come from ICU; HF uses Rust crates built on the same
// Unicode data, so results agree except for characters added in Unicode versions one
// side has and the other lacks.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace m2::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Returns the normalized form of `text` (valid UTF-8 in, valid UTF-8 out).
  virtual std::string Normalize(std::string_view text) const = 0;
};

// Builds the normalizer described by `spec` (an object with "type"); null gives nullptr.
// `where` names the JSON location in error messages (e.g. "normalizer").
Result<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace m2::text
