#include "runtime/generation_config.h"

#include <filesystem>

#include "io/json_file.h"

namespace m2::runtime {

namespace {

using json = nlohmann::json;

std::string Found(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// The field `key` when present and not null.
const json* Field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

Status ReadNumber(const json& j, const char* key, std::optional<double>& out) {
  const json* v = Field(j, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return Error("{}: expected a number, found {}", key, Found(*v));
  out = v->get<double>();
  return Status::Ok();
}

Status ReadInteger(const json& j, const char* key, std::optional<int64_t>& out) {
  const json* v = Field(j, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number_integer()) return Error("{}: expected an integer, found {}", key, Found(*v));
  out = v->get<int64_t>();
  return Status::Ok();
}

Status ReadEos(const json& j, std::vector<int32_t>& out) {
  const json* v = Field(j, "eos_token_id");
  if (v == nullptr) return Status::Ok();
  auto one = [&](const json& e) -> Status {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > 0x7fffffff)
      return Error("eos_token_id: expected a token id (an integer >= 0) or a list of them, found {}", Found(*v));
    out.push_back(static_cast<int32_t>(e.get<int64_t>()));
    return Status::Ok();
  };
  if (v->is_array()) {
    for (const json& e : *v) M2_RETURN_IF_ERROR(one(e));
    return Status::Ok();
  }
  return one(*v);
}

}  // namespace

SamplingParams GenerationConfig::ToSamplingParams() const {
  SamplingParams p;
  p.temperature = do_sample.value_or(false) ? temperature.value_or(1.0) : 0.0;
  p.top_k = top_k.value_or(0);
  p.top_p = top_p.value_or(1.0);
  p.min_p = min_p.value_or(0.0);
  p.repetition_penalty = repetition_penalty.value_or(1.0);
  return p;
}

Result<GenerationConfig> ParseGenerationConfig(const json& j, const std::string& what) {
  auto fail = [&](Status s) { return s.WithContext(what); };
  if (!j.is_object()) return fail(Error("expected a JSON object at the top, found {}", j.type_name()));
  GenerationConfig g;
  if (const json* v = Field(j, "do_sample")) {
    if (!v->is_boolean()) return fail(Error("do_sample: expected true or false, found {}", Found(*v)));
    g.do_sample = v->get<bool>();
  }
  if (Status s = ReadNumber(j, "temperature", g.temperature); !s.ok()) return fail(s);
  if (Status s = ReadInteger(j, "top_k", g.top_k); !s.ok()) return fail(s);
  if (Status s = ReadNumber(j, "top_p", g.top_p); !s.ok()) return fail(s);
  if (Status s = ReadNumber(j, "min_p", g.min_p); !s.ok()) return fail(s);
  if (Status s = ReadNumber(j, "repetition_penalty", g.repetition_penalty); !s.ok()) return fail(s);
  if (Status s = ReadInteger(j, "max_new_tokens", g.max_new_tokens); !s.ok()) return fail(s);
  if (g.max_new_tokens && *g.max_new_tokens < 1)
    return fail(Error("max_new_tokens: expected an integer >= 1, found {}", *g.max_new_tokens));
  if (Status s = ReadEos(j, g.eos_token_ids); !s.ok()) return fail(s);
  // Range checks by the same rules as flags, so a bad file names its field. The
  // temperature is checked as given even when do_sample is false: it is still wrong.
  SamplingParams check = g.ToSamplingParams();
  check.temperature = g.temperature.value_or(1.0);
  if (Status s = check.Validate(); !s.ok()) return fail(s);
  return g;
}

Result<GenerationConfig> LoadGenerationConfig(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "generation_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationConfig{};
  M2_ASSIGN_OR_RETURN(json j, ReadJsonFile(path));
  return ParseGenerationConfig(j, "'" + path + "'");
}

}  // namespace m2::runtime
