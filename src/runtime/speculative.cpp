#include "runtime/speculative.h"

#include <algorithm>

namespace m2::runtime {

const char* SpecModeName(SpecMode m) {
  switch (m) {
    case SpecMode::kOff: return "off";
    case SpecMode::kLookup: return "lookup";
    case SpecMode::kMtp: return "mtp";
  }
  return "?";
}

Result<SpecMode> ParseSpecMode(const std::string& s) {
  if (s == "off" || s == "none") return SpecMode::kOff;
  if (s == "lookup") return SpecMode::kLookup;
  if (s == "mtp") return SpecMode::kMtp;
  return Error("unknown speculative decoding mode '{}': expected off, lookup or mtp", s);
}

Status SpecOptions::Validate() const {
  if (draft < 1 || draft > kMaxDraft)
    return Error("--draft must be in [1, {}] tokens per verification, found {}", kMaxDraft, draft);
  if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64)
    return Error("lookup n-gram sizes must satisfy 1 <= min <= max <= 64, found min {} max {}", ngram_min, ngram_max);
  return Status::Ok();
}

void LookupDraft(std::span<const int32_t> ids, int max_tokens, int ngram_max, int ngram_min,
                 std::vector<int32_t>& out) {
  out.clear();
  const auto len = static_cast<int64_t>(ids.size());
  if (max_tokens <= 0) return;
  for (int64_t n = std::min<int64_t>(ngram_max, len - 1); n >= ngram_min; --n) {
    const int32_t* suffix = ids.data() + (len - n);
    // Candidates j with j + n < len, latest first; the suffix starts at len - n.
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (ids[static_cast<size_t>(j)] != suffix[0]) continue;
      if (!std::equal(suffix, suffix + n, ids.data() + j)) continue;
      // The continuation may run into the present and on into the draft itself: a
      // pattern that repeats with period p (len - j - n) keeps repeating.
      const int64_t from = j + n;
      for (int64_t i = 0; i < max_tokens; ++i) {
        const int64_t at = from + i;
        out.push_back(at < len ? ids[static_cast<size_t>(at)] : out[static_cast<size_t>(at - len)]);
      }
      return;
    }
  }
}

}  // namespace m2::runtime
