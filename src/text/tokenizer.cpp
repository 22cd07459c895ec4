#include "text/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <deque>
#include <functional>

#include "io/json_file.h"
#include "text/byte_level.h"
#include "text/utf8.h"

namespace m2::text {

namespace {

using nlohmann::json;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<bool> FlagOf(const json& entry, const char* key, bool fallback, size_t index) {
  auto it = entry.find(key);
  if (it == entry.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Error("added_tokens[{}].{}: expected true or false, found {}", index, key, it->dump());
  return it->get<bool>();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path_or_dir) {
  std::string path = IsDirectory(path_or_dir) ? path_or_dir + "/tokenizer.json" : path_or_dir;
  auto spec = ReadJsonFile(path);
  if (!spec.ok()) return spec.status();
  return FromJson(*spec, path);
}

Status Tokenizer::ParseAddedTokens(const json& list) {
  if (list.is_null()) return Status::Ok();
  if (!list.is_array()) return Error("added_tokens: expected an array, found {}", list.type_name());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    if (!e.is_object()) return Error("added_tokens[{}]: expected an object, found {}", i, e.type_name());
    auto content = e.find("content");
    if (content == e.end() || !content->is_string())
      return Error("added_tokens[{}].content: expected a string, found {}", i,
                   content == e.end() ? "nothing" : content->dump());
    auto id = e.find("id");
    if (id == e.end() || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() >= kMaxTokenId)
      return Error("added_tokens[{}].id: expected an id in [0, 2^24), found {}", i,
                   id == e.end() ? "nothing" : id->dump());
    AddedToken t;
    t.content = content->get<std::string>();
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    t.id = static_cast<int32_t>(id->get<int64_t>());
    M2_ASSIGN_OR_RETURN(t.special, FlagOf(e, "special", false, i));
    M2_ASSIGN_OR_RETURN(t.single_word, FlagOf(e, "single_word", false, i));
    M2_ASSIGN_OR_RETURN(t.lstrip, FlagOf(e, "lstrip", false, i));
    M2_ASSIGN_OR_RETURN(t.rstrip, FlagOf(e, "rstrip", false, i));
    // HF's default: special tokens are not normalized, others are.
    M2_ASSIGN_OR_RETURN(t.normalized, FlagOf(e, "normalized", !t.special, i));
    // HF (AddedVocabulary::add_tokens) gives a token that is already a vocab entry the
    // vocab's id, whatever the file says.
    if (auto vid = model_->TokenToId(t.content)) t.id = *vid;
    auto [it, inserted] = added_ids_.emplace(t.content, t.id);
    if (!inserted) {
      // The same content twice: the later entry's flags replace the earlier ones.
      for (AddedToken& old : added_)
        if (old.content == t.content) old = t;
      continue;
    }
    added_.push_back(std::move(t));
  }
  return Status::Ok();
}

Status Tokenizer::CheckDecoder(const json& spec, const std::string& where) const {
  if (!spec.is_object()) return Error("{}: expected a ByteLevel decoder, found {}", where, spec.dump());
  std::string type = spec.value("type", "");
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    auto list = spec.find("decoders");
    if (list == spec.end() || !list->is_array() || list->empty())
      return Error("{}.decoders: expected a non-empty array, found {}", where,
                   list == spec.end() ? "nothing" : list->dump());
    for (size_t i = 0; i < list->size(); ++i)
      M2_RETURN_IF_ERROR(CheckDecoder((*list)[i], fmt::format("{}.decoders[{}]", where, i)));
    return Status::Ok();
  }
  return Error("{}: unsupported decoder type \"{}\" (byte-level BPE needs ByteLevel)", where, type);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const json& spec, const std::string& what) {
  auto fail = [&](Status s) { return s.WithContext(what); };
  if (!spec.is_object()) return fail(Error("expected a JSON object at the top, found {}", spec.type_name()));
  std::unique_ptr<Tokenizer> t(new Tokenizer());

  auto model = spec.find("model");
  if (model == spec.end()) return fail(Error("model: missing"));
  auto bpe = BpeModel::Parse(*model, "model");
  if (!bpe.ok()) return fail(bpe.status());
  t->model_ = std::move(*bpe);

  auto normalizer = ParseNormalizer(spec.contains("normalizer") ? spec["normalizer"] : json(), "normalizer");
  if (!normalizer.ok()) return fail(normalizer.status());
  t->normalizer_ = std::move(*normalizer);

  auto pre = ParsePreTokenizer(spec.contains("pre_tokenizer") ? spec["pre_tokenizer"] : json(), "pre_tokenizer");
  if (!pre.ok()) return fail(pre.status());
  t->pre_tokenizers_ = std::move(*pre);

  if (!spec.contains("decoder") || spec["decoder"].is_null())
    return fail(Error("decoder: expected a ByteLevel decoder, found null"));
  if (Status s = t->CheckDecoder(spec["decoder"], "decoder"); !s.ok()) return fail(s);

  // Post-processors only add template ids (see tokenizer.h); accept the common ones so
  // that real files load, and name anything else.
  if (auto pp = spec.find("post_processor"); pp != spec.end() && !pp->is_null()) {
    std::function<Status(const json&, const std::string&)> check = [&](const json& p, const std::string& where) {
      std::string type = p.is_object() ? p.value("type", "") : "";
      if (type == "ByteLevel" || type == "TemplateProcessing") return Status::Ok();
      if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
        for (size_t i = 0; i < p["processors"].size(); ++i)
          M2_RETURN_IF_ERROR(check(p["processors"][i], fmt::format("{}.processors[{}]", where, i)));
        return Status::Ok();
      }
      return Error("{}: unsupported post-processor {}", where, p.is_object() ? "\"" + type + "\"" : p.dump());
    };
    if (Status s = check(*pp, "post_processor"); !s.ok()) return fail(s);
  }

  if (Status s = t->ParseAddedTokens(spec.contains("added_tokens") ? spec["added_tokens"] : json()); !s.ok())
    return fail(s);

  // Added-token matchers. Normalized tokens are searched for in normalized text, so their
  // own content is normalized the same way (HF refresh_added_tokens).
  std::vector<const AddedToken*> raw, norm;
  std::vector<std::string> raw_patterns, norm_patterns;
  for (const AddedToken& a : t->added_) {
    if (a.normalized) {
      norm.push_back(&a);
      norm_patterns.push_back(t->normalizer_ ? t->normalizer_->Normalize(a.content) : a.content);
    } else {
      raw.push_back(&a);
      raw_patterns.push_back(a.content);
    }
  }
  t->raw_matcher_.Build(raw, raw_patterns);
  t->normalized_matcher_.Build(norm, norm_patterns);

  // Per-id tables for decoding and queries.
  int32_t limit = t->model_->id_limit();
  for (const AddedToken& a : t->added_) limit = std::max(limit, a.id + 1);
  t->kinds_.assign(limit, static_cast<uint8_t>(IdKind::kNone));
  t->id_bytes_.assign(limit, std::string());
  for (int32_t id = 0; id < t->model_->id_limit(); ++id) {
    if (const std::string* tok = t->model_->IdToToken(id)) {
      t->kinds_[id] = static_cast<uint8_t>(IdKind::kVocab);
      t->id_bytes_[id] = ByteLevelTokenToBytes(*tok);
    }
  }
  for (AddedToken& a : t->added_) {
    t->kinds_[a.id] = static_cast<uint8_t>(a.special ? IdKind::kSpecial : IdKind::kAdded);
    // HF reports a normalized token by its normalized content ("HELLO" under Lowercase
    // decodes as "hello"), and keeps that as the token string.
    if (a.normalized && t->normalizer_) a.content = t->normalizer_->Normalize(a.content);
    // HF decodes added tokens through the ByteLevel decoder too: "<think>" is all table
    // characters mapping to themselves; content with other characters stays as written.
    t->id_bytes_[a.id] = ByteLevelTokenToBytes(a.content);
  }
  return t;
}

void Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::deque<std::string> arena;
  std::vector<std::string_view> pieces{text}, next;
  for (const auto& step : pre_tokenizers_) {
    next.clear();
    step->Apply(pieces, next, arena);
    pieces.swap(next);
  }
  for (std::string_view p : pieces) model_->Encode(p, ids);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  std::string repaired;
  if (!IsValidUtf8(text)) {
    repaired = RepairUtf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<TextSplit> splits, inner;
  raw_matcher_.Split(text, parse_special, splits);
  for (const TextSplit& s : splits) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    std::string_view piece = text.substr(s.start, s.end - s.start);
    std::string normalized;
    if (normalizer_ && !piece.empty()) {
      normalized = normalizer_->Normalize(piece);
      piece = normalized;
    }
    if (normalized_matcher_.empty()) {
      EncodeText(piece, ids);
      continue;
    }
    inner.clear();
    normalized_matcher_.Split(piece, parse_special, inner);
    for (const TextSplit& t : inner) {
      if (t.id >= 0) ids.push_back(t.id);
      else EncodeText(piece.substr(t.start, t.end - t.start), ids);
    }
  }
  return ids;
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  return Kind(id) == IdKind::kNone ? std::string_view() : std::string_view(id_bytes_[id]);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    IdKind k = Kind(id);
    if (k == IdKind::kNone || (skip_special && k == IdKind::kSpecial)) continue;
    bytes += id_bytes_[id];
  }
  return IsValidUtf8(bytes) ? bytes : RepairUtf8(bytes);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  IdKind k = Kind(id);
  if (k == IdKind::kAdded || k == IdKind::kSpecial) {
    for (const AddedToken& a : added_)
      if (a.id == id) return a.content;
  }
  if (const std::string* tok = model_->IdToToken(id)) return *tok;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  if (auto it = added_ids_.find(std::string(token)); it != added_ids_.end()) return it->second;
  return model_->TokenToId(token);
}

std::vector<int32_t> Tokenizer::SpecialIds() const {
  std::vector<int32_t> ids;
  for (const AddedToken& a : added_)
    if (a.special) ids.push_back(a.id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string StreamDecoder::Add(int32_t id) {
  if (skip_special_ && tokenizer_->IsSpecial(id)) return {};
  pending_ += tokenizer_->TokenBytes(id);
  size_t n = CompleteUtf8Prefix(pending_);
  if (n == 0) return {};
  std::string_view ready(pending_.data(), n);
  std::string out = IsValidUtf8(ready) ? std::string(ready) : RepairUtf8(ready);
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out = RepairUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace m2::text
