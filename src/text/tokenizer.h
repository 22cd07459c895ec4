// A byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, giving the same
// ids as the `tokenizers` library (Tokenizer.encode(text, add_special_tokens=False)).
//
// Pipeline (HF TokenizerImpl::encode_single_sequence):
//   1. invalid UTF-8 -> U+FFFD per maximal subpart (policy in utf8.h);
//   2. added tokens with normalized=false are cut out of the raw text (added_tokens.h);
//   3. each remaining piece is normalized, then added tokens with normalized=true are
//      cut out of it;
//   4. pre-tokenizers split the rest (pre_tokenizer.h);
//   5. BPE encodes each pre-token (bpe.h).
// The post-processor (e.g. TemplateProcessing adding a BOS id) is not applied: prompts
// are built by the chat template, which writes its special tokens as text. Truncation
// and padding settings are likewise ignored.
//
// Thread safety: a loaded Tokenizer is immutable; Encode and Decode may run on many
// threads at once (the BPE cache is per thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "text/added_tokens.h"
#include "text/bpe.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"

namespace m2::text {

class Tokenizer {
 public:
  // `path_or_dir`: a tokenizer.json file, or a folder holding one (a model folder).
  static Result<std::unique_ptr<Tokenizer>> Load(const std::string& path_or_dir);
  // From an already parsed tokenizer.json; `what` names it in error messages.
  static Result<std::unique_ptr<Tokenizer>> FromJson(const nlohmann::json& spec, const std::string& what);

  // Token ids of `text`. With parse_special, special added tokens written in the text
  // ("<think>", "[e~[") become their ids; without it they are tokenized as plain text
  // (HF's encode_special_tokens = True). Non-special added tokens always match.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special = true) const;

  // The text of `ids`: token bytes joined, then invalid UTF-8 repaired once over the whole
  // (HF's ByteLevel decoder). Ids that name no token are skipped, as HF does;
  // skip_special drops special added tokens.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes one id decodes to (may be part of a UTF-8 character); empty for ids
  // that name no token.
  std::string_view TokenBytes(int32_t id) const;
  // The token's string as written in tokenizer.json (byte-level characters for vocab
  // entries, content for added tokens); nullopt for unknown ids.
  std::optional<std::string> IdToToken(int32_t id) const;
  // The id of a token string (added tokens first, then the vocab), e.g. TokenId("[e~[").
  std::optional<int32_t> TokenId(std::string_view token) const;

  bool IsSpecial(int32_t id) const { return Kind(id) == IdKind::kSpecial; }
  bool IsAdded(int32_t id) const { return Kind(id) == IdKind::kAdded || Kind(id) == IdKind::kSpecial; }
  // One past the largest id (vocab and added tokens); the embedding table's row count
  // must be at least this.
  int32_t vocab_size() const { return static_cast<int32_t>(kinds_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  // Ids of the special added tokens, ascending.
  std::vector<int32_t> SpecialIds() const;

 private:
  enum class IdKind : uint8_t { kNone, kVocab, kAdded, kSpecial };
  Tokenizer() = default;
  IdKind Kind(int32_t id) const {
    return id >= 0 && id < vocab_size() ? static_cast<IdKind>(kinds_[id]) : IdKind::kNone;
  }
  Status ParseAddedTokens(const nlohmann::json& list);
  Status CheckDecoder(const nlohmann::json& spec, const std::string& where) const;
  // Steps 4-5 on one piece of normalized text.
  void EncodeText(std::string_view text, std::vector<int32_t>& ids) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::vector<std::unique_ptr<PreTokenizer>> pre_tokenizers_;
  std::unique_ptr<BpeModel> model_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, int32_t> added_ids_;
  AddedTokenMatcher raw_matcher_;         // normalized == false
  AddedTokenMatcher normalized_matcher_;  // normalized == true
  std::vector<uint8_t> kinds_;            // IdKind per id
  std::vector<std::string> id_bytes_;     // decoded bytes per id
};

// Turns ids into text as they arrive (e.g. during generation): each Add returns the text
// that is now final, holding back the bytes of a character not yet complete, so no
// piece ever ends inside a UTF-8 character. Invalid sequences become U+FFFD exactly as
// Decode does, so the concatenation of all pieces plus Finish() equals Decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  std::string Add(int32_t id);
  // Ends the stream: bytes of an unfinished character become U+FFFD.
  std::string Finish();
  // True while bytes are held back waiting for the rest of a character.
  bool has_pending() const { return !pending_.empty(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace m2::text
