// Speculative decoding: a drafter proposes the next few tokens of a sequence, the model
// scores them all in one forward pass, and the longest prefix the model agrees with is
// kept, plus the model's own next token (src/runtime/engine.cpp does the verifying).
//
// Drafters here are deterministic functions of the sequence's ids (a draft q is one
// token with probability 1). For such drafts the standard speculative rejection rule
// (accept draft d with probability min(1, p(d)/q(d)) = p(d); on rejection sample from
// max(0, p - q) renormalised = p without d) emits every token with exactly the
// probability p of plain decoding. The engine implements it as: draw x from the
// sampler's distribution p at the position; if x == d the draft is accepted and the
// next position is verified, otherwise x is emitted and the rest of the draft dropped.
// (P(x = d) = p(d); given x != d, x is distributed as p without d, renormalised.) That
// consumes the sampler's random stream one draw per emitted token, in the same contexts
// as plain decoding, so a seeded request gives the same tokens with and without
// speculation, not only the same distribution (tested).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace m2::runtime {

enum class SpecMode { kOff, kLookup, kMtp };
const char* SpecModeName(SpecMode m);
// "off" / "lookup" / "mtp"; anything else is an error naming the choices.
Result<SpecMode> ParseSpecMode(const std::string& s);

struct SpecOptions {
  SpecMode mode = SpecMode::kOff;
  int draft = 4;      // tokens proposed per verification, at most (1..kMaxDraft)
  int ngram_max = 3;  // lookup: longest n-gram matched
  int ngram_min = 1;  // lookup: shortest n-gram matched
  Status Validate() const;
};
inline constexpr int kMaxDraft = 16;

// Prompt lookup (no weights): the rule, in order:
//  1. For n = ngram_max down to ngram_min (n < ids.size()): take the last n ids.
//  2. Find their most recent earlier occurrence: the largest j with ids[j, j+n) equal to
//     them and j + n < ids.size() (at least one id follows; the suffix itself excluded).
//  3. The draft is the max_tokens ids that followed that occurrence, c_i = ids[j+n+i],
//     where an index past the end continues into the draft itself (c_i = c_{i-p} with
//     p = ids.size() - j - n): text that repeats with period p is drafted repeating.
//     The longest n with a match wins; no match: no draft.
// Appends to `out` (cleared first). O(len * n) per call.
void LookupDraft(std::span<const int32_t> ids, int max_tokens, int ngram_max, int ngram_min,
                 std::vector<int32_t>& out);

}  // namespace m2::runtime
