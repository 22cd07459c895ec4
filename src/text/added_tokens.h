// Added tokens ("added_tokens" in tokenizer.json): strings matched in the raw text before
// any normalization or pre-tokenization, each becoming one id. Matching follows HF's
// AddedVocabulary (tokenizers/src/tokenizer/added_vocabulary.rs):
//  - leftmost-longest, non-overlapping (Aho-Corasick with MatchKind::LeftmostLongest);
//  - tokens with normalized=false are matched on the original text first; those with
//    normalized=true are matched afterwards, on the normalized text of each remaining
//    piece, with their own content normalized the same way;
//  - single_word: a match touching a word character (\w) on either side is dropped;
//  - lstrip / rstrip: the match grows over adjacent Unicode White_Space (the stripped
//    spaces are absorbed into the token);
//  - with special tokens off (HF's encode_special_tokens), matches of special tokens are
//    dropped after matching, so the text they cover is not searched again.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace m2::text {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// One piece of the text: either an added token or text for the normal pipeline.
struct TextSplit {
  size_t start, end;  // byte range in the searched string
  int32_t id;         // the added token's id, or -1 for ordinary text
};

// A set of patterns searched leftmost-longest with a byte trie.
class AddedTokenMatcher {
 public:
  // patterns[i] is matched for tokens[i]; empty patterns are ignored.
  void Build(std::vector<const AddedToken*> tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }

  // Splits `text` into ordinary text and matched added tokens, covering all of it (an
  // empty text gives one empty split). `parse_special` false skips special tokens.
  void Split(std::string_view text, bool parse_special, std::vector<TextSplit>& out) const;

 private:
  // The leftmost-longest match at or after `from`: token index and range.
  bool FindNext(std::string_view text, size_t from, size_t* start, size_t* end, int* token) const;

  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node
    int32_t token = -1;                                 // index into tokens_ if a pattern ends here
  };
  std::vector<Node> nodes_;
  std::vector<const AddedToken*> tokens_;
  bool first_byte_[256] = {};
};

}  // namespace m2::text
