#include "text/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <vector>
#include <nlohmann/json.hpp>

#include "text/regex.h"
#include "text/utf8.h"

namespace m2::text {

namespace {

using nlohmann::json;

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(const icu::Normalizer2* norm) : norm_(norm) {}
  std::string Normalize(std::string_view text) const override {
    UErrorCode status = U_ZERO_ERROR;
    // Fast path: text already in the form needs no copy through ICU's sink.
    if (norm_->isNormalizedUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), status) &&
        U_SUCCESS(status)) {
      return std::string(text);
    }
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
    norm_->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, status);
    // ICU fails only on invalid UTF-8 or allocation failure; input here is repaired UTF-8.
    return U_SUCCESS(status) ? out : std::string(text);
  }

 private:
  const icu::Normalizer2* norm_;  // owned by ICU (process-lifetime singletons)
};

// HF's Lowercase (NormalizedString::lowercase) maps each code point on its own with Rust's
// char::to_lowercase: the full mapping without context, so a final capital sigma becomes
// "σ", not "ς" as in str::to_lowercase or ICU's u_strToLower. The only unconditional
// multi-character lowercase mapping in SpecialCasing.txt is U+0130 -> "i\u0307"; every
// other code point takes its simple mapping, which is u_tolower.
class LowercaseNormalizer : public Normalizer {
 public:
  std::string Normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
      unsigned char b = static_cast<unsigned char>(text[i]);
      if (b < 0x80) {
        out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
        ++i;
        continue;
      }
      size_t n = Utf8CharLength(text.substr(i));
      if (n == 0) {  // not reached: input is repaired UTF-8
        out.push_back(text[i++]);
        continue;
      }
      uint32_t cp = DecodeUtf8Char(text.substr(i), n);
      if (cp == 0x130) {
        out += "i\xCC\x87";
      } else {
        AppendUtf8(static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp))), out);
      }
      i += n;
    }
    return out;
  }
};

// Replace: every match of a pattern (plain string or regex) becomes `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  std::string Normalize(std::string_view text) const override {
    std::string out;
    size_t prev = 0;
    re_->ForEachMatch(text, [&](size_t s, size_t e) {
      out.append(text.substr(prev, s - prev));
      out += content_;
      prev = e;
    });
    out.append(text.substr(prev));
    return out;
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

// Prepend: HF adds the prefix to every non-empty normalized piece.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Normalize(std::string_view text) const override {
    if (text.empty()) return {};
    return prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

// Strip: removes Unicode White_Space (Rust's char::is_whitespace) at either end.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string Normalize(std::string_view text) const override {
    size_t b = 0, e = text.size();
    if (left_) {
      while (b < e) {
        size_t n = Utf8CharLength(text.substr(b));
        if (n == 0 || !u_isUWhiteSpace(static_cast<UChar32>(DecodeUtf8Char(text.substr(b), n)))) break;
        b += n;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        size_t n = Utf8CharLength(text.substr(s, e - s));
        if (n == 0 || !u_isUWhiteSpace(static_cast<UChar32>(DecodeUtf8Char(text.substr(s), n)))) break;
        e = s;
      }
    }
    return std::string(text.substr(b, e - b));
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string Normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& p : parts_) s = p->Normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

Result<std::string> GetString(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string())
    return Error("{}.{}: expected a string, found {}", where, key, it == obj.end() ? "nothing" : it->type_name());
  return it->get<std::string>();
}

}  // namespace

Result<std::unique_ptr<Normalizer>> ParseNormalizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return std::unique_ptr<Normalizer>();
  if (!spec.is_object()) return Error("{}: expected an object or null, found {}", where, spec.type_name());
  M2_ASSIGN_OR_RETURN(std::string type, GetString(spec, "type", where));
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* unicode = nullptr;
  if (type == "NFC") unicode = icu::Normalizer2::getNFCInstance(status);
  if (type == "NFD") unicode = icu::Normalizer2::getNFDInstance(status);
  if (type == "NFKC") unicode = icu::Normalizer2::getNFKCInstance(status);
  if (type == "NFKD") unicode = icu::Normalizer2::getNFKDInstance(status);
  if (unicode || U_FAILURE(status)) {
    if (U_FAILURE(status)) return Error("{}: ICU could not load the {} data: {}", where, type, u_errorName(status));
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode));
  }
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Prepend") {
    M2_ASSIGN_OR_RETURN(std::string prefix, GetString(spec, "prepend", where));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Strip") {
    bool left = spec.value("strip_left", true), right = spec.value("strip_right", true);
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  if (type == "Replace") {
    auto pat = spec.find("pattern");
    if (pat == spec.end() || !pat->is_object())
      return Error("{}.pattern: expected {{\"String\": ..}} or {{\"Regex\": ..}}, found {}", where,
                   pat == spec.end() ? "nothing" : pat->dump());
    M2_ASSIGN_OR_RETURN(std::string content, GetString(spec, "content", where));
    std::unique_ptr<Regex> re;
    if (pat->contains("String") && (*pat)["String"].is_string()) {
      M2_ASSIGN_OR_RETURN(re, Regex::Compile((*pat)["String"].get<std::string>(), /*literal=*/true));
    } else if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      M2_ASSIGN_OR_RETURN(re, Regex::Compile((*pat)["Regex"].get<std::string>()));
    } else {
      return Error("{}.pattern: expected {{\"String\": ..}} or {{\"Regex\": ..}}, found {}", where, pat->dump());
    }
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(re), std::move(content)));
  }
  if (type == "Sequence") {
    auto list = spec.find("normalizers");
    if (list == spec.end() || !list->is_array())
      return Error("{}.normalizers: expected an array, found {}", where, list == spec.end() ? "nothing" : list->type_name());
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      M2_ASSIGN_OR_RETURN(auto part, ParseNormalizer((*list)[i], fmt::format("{}.normalizers[{}]", where, i)));
      if (part) parts.push_back(std::move(part));
    }
    // An empty Sequence (DeepSeek V3 ships one) changes nothing: no normalizer at all.
    if (parts.empty()) return std::unique_ptr<Normalizer>();
    if (parts.size() == 1) return std::move(parts[0]);
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return Error("{}: unsupported normalizer type \"{}\" (supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace, "
               "Prepend, Strip, Sequence)",
               where, type);
}

}  // namespace m2::text
