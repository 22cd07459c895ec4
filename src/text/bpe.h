// The byte-level BPE model of tokenizer.json ("model": {"type": "BPE", ...}): the vocab,
// the ranked merges, and the merge loop that turns one pre-tokenized piece into ids.
//
// Merge rule (HF tokenizers/src/models/bpe/word.rs, Word::merge_all): repeatedly merge
// the adjacent pair with the lowest merge rank, the leftmost one among equal ranks, until
// no adjacent pair has a merge. HF runs it with a priority queue; a heap entry can only
// be acted on while its pair is still adjacent (symbols only grow rightwards and
// boundaries never reappear), so its order is exactly that rule, which the small-piece
// path here evaluates by scanning.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace m2::text {

// Ids at or above this are rejected when loading: the per-id tables are sized by the
// largest id, so a stray huge id would otherwise ask for gigabytes. 2^24 is far above any
// real vocabulary (MiniMax-M2: 200064).
inline constexpr int64_t kMaxTokenId = 1 << 24;

class BpeModel {
 public:
  // `where` names the JSON location in error messages (normally "model").
  static Result<std::unique_ptr<BpeModel>> Parse(const nlohmann::json& spec, const std::string& where);

  // Appends the ids of one piece of raw bytes (the pre-tokenizer's output; each byte is
  // one initial symbol, its byte-level character looked up in the vocab).
  void Encode(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocab string of `id`, or nullptr if the vocab has no such id.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id in the vocab.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t vocab_entries() const { return vocab_.size(); }
  size_t merge_count() const { return merge_count_; }

 private:
  BpeModel() = default;

  // (left id, right id) -> (rank, merged id), open addressing on a 64-bit key.
  struct MergeEntry {
    uint64_t key;
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmptyKey = ~0ull;
  const MergeEntry* FindMerge(int32_t left, int32_t right) const {
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;
    while (true) {
      const MergeEntry& e = merges_[i];
      if (e.key == key) return &e;
      if (e.key == kEmptyKey) return nullptr;
      i = (i + 1) & (merges_.size() - 1);
    }
  }
  void InsertMerge(int32_t left, int32_t right, uint32_t rank, int32_t merged);

  // Runs the merge loop over `symbols` (ids), in place.
  void MergeSmall(std::vector<int32_t>& symbols) const;
  void MergeLarge(std::vector<int32_t>& symbols) const;
  void EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_present_;
  int32_t byte_id_[256];  // vocab id of each byte's character, -1 if absent
  std::vector<MergeEntry> merges_;
  int merge_shift_ = 64;
  size_t merge_count_ = 0;
  // ignore_merges (Llama 3 style): a piece that is a whole vocab entry is that token.
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> bytes_to_id_;  // only built for ignore_merges
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  uint64_t uid_ = 0;  // identifies this model to the per-thread cache
};

}  // namespace m2::text
