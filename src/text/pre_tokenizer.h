// Pre-tokenizers of tokenizer.json ("pre_tokenizer" field): they cut the text between
// added tokens into pieces that BPE encodes independently. Supported: Split (regex or
// string pattern, all five behaviours, invert), ByteLevel (optional GPT-2 regex and
// prefix space) and Sequence of these, with ByteLevel last: every split then happens on
// the original UTF-8 and the byte-to-character mapping is left to the BPE model, which
// is what the HF pipeline computes (Split after ByteLevel would split mapped text, which
// no byte-level BPE file does).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "text/regex.h"

namespace m2::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits every piece of `in`, appending the non-empty results to `out` in order. New
  // text (a prefix space) is kept alive in `arena`; views into it stay valid because a
  // deque never moves its elements.
  virtual void Apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
                     std::deque<std::string>& arena) const = 0;
};

// HF's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void Apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
             std::deque<std::string>& arena) const override;

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  // `gpt2_regex` is the compiled GPT-2 pattern when use_regex is set, else null.
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> gpt2_regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(gpt2_regex)) {}
  void Apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
             std::deque<std::string>& arena) const override;

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

// The pre-tokenizer steps in order (Sequence flattened); the last one is ByteLevel.
// `where` names the JSON location in error messages.
Result<std::vector<std::unique_ptr<PreTokenizer>>> ParsePreTokenizer(const nlohmann::json& spec,
                                                                    const std::string& where);

// The pattern of GPT-2's pre-tokenizer (ByteLevel with use_regex), from HF byte_level.rs.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace m2::text
