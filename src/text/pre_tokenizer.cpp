#include "text/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace m2::text {

namespace {

using nlohmann::json;

void PushNonEmpty(std::vector<std::string_view>& out, std::string_view piece) {
  if (!piece.empty()) out.push_back(piece);
}

struct Segment {
  size_t start, end;
  bool is_match;
};

}  // namespace

void SplitPreTokenizer::Apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
                              std::deque<std::string>& arena) const {
  std::vector<Segment> segs;
  for (std::string_view piece : in) {
    // Fast paths for the two behaviours real files use: Isolated (keep everything, each
    // match on its own) and Removed with invert (keep only the matches).
    if (behavior_ == SplitBehavior::kIsolated || (behavior_ == SplitBehavior::kRemoved && invert_)) {
      const bool keep_gaps = behavior_ == SplitBehavior::kIsolated;
      size_t prev = 0;
      re_->ForEachMatch(piece, [&](size_t s, size_t e) {
        if (keep_gaps && s > prev) out.push_back(piece.substr(prev, s - prev));
        PushNonEmpty(out, piece.substr(s, e - s));
        prev = e;
      });
      if (keep_gaps && prev < piece.size()) out.push_back(piece.substr(prev));
      continue;
    }
    // General case, as HF's NormalizedString::split: the matches and the gaps between
    // them cover the piece; invert swaps which is which; the behaviour then merges or
    // drops segments.
    segs.clear();
    size_t prev = 0;
    re_->ForEachMatch(piece, [&](size_t s, size_t e) {
      if (s != prev) segs.push_back({prev, s, invert_});
      segs.push_back({s, e, !invert_});
      prev = e;
    });
    if (prev != piece.size()) segs.push_back({prev, piece.size(), invert_});

    std::vector<std::pair<size_t, size_t>> kept;
    bool previous_match = false;
    switch (behavior_) {
      case SplitBehavior::kRemoved:
        for (const Segment& s : segs)
          if (!s.is_match) kept.push_back({s.start, s.end});
        break;
      case SplitBehavior::kIsolated:
        for (const Segment& s : segs) kept.push_back({s.start, s.end});
        break;
      case SplitBehavior::kMergedWithPrevious:
        for (const Segment& s : segs) {
          if (s.is_match && !previous_match && !kept.empty()) kept.back().second = s.end;
          else kept.push_back({s.start, s.end});
          previous_match = s.is_match;
        }
        break;
      case SplitBehavior::kMergedWithNext:
        // Folded from the right, as HF does.
        for (size_t i = segs.size(); i-- > 0;) {
          const Segment& s = segs[i];
          if (s.is_match && !previous_match && !kept.empty()) kept.back().first = s.start;
          else kept.push_back({s.start, s.end});
          previous_match = s.is_match;
        }
        std::reverse(kept.begin(), kept.end());
        break;
      case SplitBehavior::kContiguous:
        for (const Segment& s : segs) {
          if (s.is_match == previous_match && !kept.empty()) kept.back().second = s.end;
          else kept.push_back({s.start, s.end});
          previous_match = s.is_match;
        }
        break;
    }
    for (auto [s, e] : kept) PushNonEmpty(out, piece.substr(s, e - s));
  }
}

void ByteLevelPreTokenizer::Apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
                                  std::deque<std::string>& arena) const {
  for (std::string_view piece : in) {
    // HF prepends the space to every piece that reaches ByteLevel and does not start
    // with one (each piece between added tokens, not just the first).
    if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) {
      arena.push_back(" ");
      arena.back().append(piece);
      piece = arena.back();
    }
    if (!regex_) {
      PushNonEmpty(out, piece);
      continue;
    }
    size_t prev = 0;
    regex_->ForEachMatch(piece, [&](size_t s, size_t e) {
      if (s > prev) out.push_back(piece.substr(prev, s - prev));
      PushNonEmpty(out, piece.substr(s, e - s));
      prev = e;
    });
    if (prev < piece.size()) out.push_back(piece.substr(prev));
  }
}

namespace {

Result<bool> GetBool(const json& obj, const char* key, bool fallback, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Error("{}.{}: expected true or false, found {}", where, key, it->dump());
  return it->get<bool>();
}

Status ParseInto(const json& spec, const std::string& where, std::vector<std::unique_ptr<PreTokenizer>>& steps,
                 bool* saw_byte_level) {
  if (!spec.is_object()) return Error("{}: expected an object, found {}", where, spec.type_name());
  auto type_it = spec.find("type");
  if (type_it == spec.end() || !type_it->is_string())
    return Error("{}.type: expected a string, found {}", where, type_it == spec.end() ? "nothing" : type_it->dump());
  const std::string type = type_it->get<std::string>();
  if (*saw_byte_level)
    return Error("{}: a {} pre-tokenizer after ByteLevel is not supported (ByteLevel must come last)", where, type);
  if (type == "Sequence") {
    auto list = spec.find("pretokenizers");
    if (list == spec.end() || !list->is_array())
      return Error("{}.pretokenizers: expected an array, found {}", where,
                   list == spec.end() ? "nothing" : list->type_name());
    for (size_t i = 0; i < list->size(); ++i)
      M2_RETURN_IF_ERROR(ParseInto((*list)[i], fmt::format("{}.pretokenizers[{}]", where, i), steps, saw_byte_level));
    return Status::Ok();
  }
  if (type == "Split") {
    auto pat = spec.find("pattern");
    std::unique_ptr<Regex> re;
    if (pat != spec.end() && pat->is_object() && pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      auto compiled = Regex::Compile((*pat)["Regex"].get<std::string>());
      if (!compiled.ok()) return Status(compiled.status()).WithContext(where + ".pattern");
      re = std::move(*compiled);
    } else if (pat != spec.end() && pat->is_object() && pat->contains("String") && (*pat)["String"].is_string()) {
      auto compiled = Regex::Compile((*pat)["String"].get<std::string>(), /*literal=*/true);
      if (!compiled.ok()) return Status(compiled.status()).WithContext(where + ".pattern");
      re = std::move(*compiled);
    } else {
      return Error("{}.pattern: expected {{\"Regex\": string}} or {{\"String\": string}}, found {}", where,
                   pat == spec.end() ? "nothing" : pat->dump());
    }
    auto beh = spec.find("behavior");
    std::string b = beh != spec.end() && beh->is_string() ? beh->get<std::string>() : "";
    SplitBehavior behavior;
    if (b == "Removed") behavior = SplitBehavior::kRemoved;
    else if (b == "Isolated") behavior = SplitBehavior::kIsolated;
    else if (b == "MergedWithPrevious") behavior = SplitBehavior::kMergedWithPrevious;
    else if (b == "MergedWithNext") behavior = SplitBehavior::kMergedWithNext;
    else if (b == "Contiguous") behavior = SplitBehavior::kContiguous;
    else
      return Error("{}.behavior: expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous, "
                   "found {}",
                   where, beh == spec.end() ? "nothing" : beh->dump());
    M2_ASSIGN_OR_RETURN(bool invert, GetBool(spec, "invert", false, where));
    steps.push_back(std::make_unique<SplitPreTokenizer>(std::move(re), behavior, invert));
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    // HF's defaults: add_prefix_space true, use_regex true.
    M2_ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(spec, "add_prefix_space", true, where));
    M2_ASSIGN_OR_RETURN(bool use_regex, GetBool(spec, "use_regex", true, where));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      auto compiled = Regex::Compile(kGpt2Pattern);
      if (!compiled.ok()) return compiled.status();
      re = std::move(*compiled);
    }
    steps.push_back(std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(re)));
    *saw_byte_level = true;
    return Status::Ok();
  }
  return Error("{}: unsupported pre-tokenizer type \"{}\" (supported for byte-level BPE: Split, ByteLevel, Sequence)",
               where, type);
}

}  // namespace

Result<std::vector<std::unique_ptr<PreTokenizer>>> ParsePreTokenizer(const json& spec, const std::string& where) {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  bool saw_byte_level = false;
  if (spec.is_null())
    return Error("{}: expected a ByteLevel pre-tokenizer (this is a byte-level BPE loader), found null", where);
  M2_RETURN_IF_ERROR(ParseInto(spec, where, steps, &saw_byte_level));
  if (!saw_byte_level)
    return Error("{}: no ByteLevel pre-tokenizer found; only byte-level BPE tokenizers are supported", where);
  return steps;
}

}  // namespace m2::text
