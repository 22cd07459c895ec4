#include "server/chat_api.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

namespace m2::server {

using chat::Json;

namespace {

std::string TypeName(const Json& j) { return chat::JsonTypeName(j); }

// Text of an OpenAI content value: a string, null (empty) or an array of text parts.
Result<std::string> ContentText(const Json& c, const std::string& where) {
  if (c.is_null()) return std::string();
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array())
    return Error("{}: expected a string, null or an array of content parts, found {}", where, TypeName(c));
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const Json& p = c[i];
    const std::string w = fmt::format("{}[{}]", where, i);
    if (p.is_string()) {  // some clients send bare strings in the array
      out += p.get<std::string>();
      continue;
    }
    if (!p.is_object()) return Error("{}: expected a content part object, found {}", w, TypeName(p));
    auto t = p.find("type");
    if (t == p.end() || !t->is_string()) return Error("{}.type: expected a string", w);
    const std::string type = t->get<std::string>();
    if (type != "text" && type != "input_text" && type != "output_text")
      return Error("{}: content of type '{}' is not supported: this model reads text only", w, type);
    auto x = p.find("text");
    if (x == p.end() || !x->is_string()) return Error("{}.text: expected a string", w);
    out += x->get<std::string>();
  }
  return out;
}

Result<double> Number(const Json& body, const char* key, double lo, double hi, double def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_number()) return Error("{}: expected a number, found {}", key, TypeName(*it));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) return Error("{}: expected a number in [{}, {}], found {}", key, lo, hi, v);
  return v;
}

Result<std::optional<int64_t>> Integer(const Json& body, const char* key, int64_t lo, int64_t hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()))
    return Error("{}: expected an integer, found {}", key, it->is_number() ? it->dump() : TypeName(*it));
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi))
    return Error("{}: expected an integer in [{}, {}], found {}", key, lo, hi, it->dump());
  const double d = it->get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    return Error("{}: expected an integer in [{}, {}], found {}", key, lo, hi, it->dump());
  return std::optional<int64_t>(it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(d));
}

Result<bool> Bool(const Json& body, const char* key, bool def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_boolean()) return Error("{}: expected true or false, found {}", key, TypeName(*it));
  return it->get<bool>();
}

Result<std::vector<std::string>> StopList(const Json& body, const char* key) {
  std::vector<std::string> out;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return out;
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
    return out;
  }
  if (!it->is_array()) return Error("{}: expected a string or an array of strings, found {}", key, TypeName(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_string()) return Error("{}[{}]: expected a string, found {}", key, i, TypeName((*it)[i]));
    out.push_back((*it)[i].get<std::string>());
  }
  return out;
}

// Sampling fields shared by both APIs; `defaults` fill what the request leaves out.
Status ParseSampling(const Json& body, const runtime::SamplingParams& defaults, runtime::SamplingParams& s) {
  s = defaults;
  M2_ASSIGN_OR_RETURN(s.temperature, Number(body, "temperature", 0, 100, defaults.temperature));
  M2_ASSIGN_OR_RETURN(s.top_p, Number(body, "top_p", 0, 1, defaults.top_p));
  if (s.top_p <= 0) return Error("top_p: expected a number in (0, 1], found {}", s.top_p);
  M2_ASSIGN_OR_RETURN(auto top_k, Integer(body, "top_k", -1, int64_t{1} << 31));
  if (top_k) s.top_k = *top_k < 0 ? 0 : *top_k;  // -1 means off (vLLM)
  M2_ASSIGN_OR_RETURN(s.min_p, Number(body, "min_p", 0, 1, defaults.min_p));
  M2_ASSIGN_OR_RETURN(s.repetition_penalty, Number(body, "repetition_penalty", 1e-6, 100, defaults.repetition_penalty));
  for (const char* k : {"presence_penalty", "frequency_penalty"}) {
    M2_ASSIGN_OR_RETURN(double v, Number(body, k, -2, 2, 0));
    if (v != 0)
      return Error("{}: only 0 is supported (this server has repetition_penalty instead), found {}", k, v);
  }
  M2_ASSIGN_OR_RETURN(auto seed, Integer(body, "seed", INT64_MIN, INT64_MAX));
  if (seed) s.seed = static_cast<uint64_t>(*seed);
  else s.seed = std::random_device{}() * 0x9e3779b97f4a7c15ULL ^ std::random_device{}();
  return s.Validate();
}

// "speculative": "lookup" | "mtp" | "off", or {"mode": ..., "draft": 1..16} (mtp needs a
// server started with --spec mtp: the engine refuses the request otherwise).
Status ParseSpec(const Json& body, std::optional<runtime::SpecOptions>& out) {
  auto it = body.find("speculative");
  if (it == body.end() || it->is_null()) return Status::Ok();
  runtime::SpecOptions spec;
  spec.mode = runtime::SpecMode::kLookup;
  const Json* mode = nullptr;
  if (it->is_string()) {
    mode = &*it;
  } else if (it->is_object()) {
    for (const auto& [k, v] : it->items())
      if (k != "mode" && k != "draft")
        return Error("speculative: unknown field '{}' (expected mode and draft)", k);
    if (auto m = it->find("mode"); m != it->end()) mode = &*m;
    auto draft = Integer(*it, "draft", 1, runtime::kMaxDraft);
    if (!draft.ok()) return Error("speculative.{}", draft.status().message());
    if (*draft) spec.draft = static_cast<int>(**draft);
  } else {
    return Error("speculative: expected \"lookup\", \"mtp\", \"off\" or an object {{\"mode\", \"draft\"}}, found {}",
                 TypeName(*it));
  }
  if (mode != nullptr) {
    if (!mode->is_string()) return Error("speculative.mode: expected a string, found {}", TypeName(*mode));
    M2_ASSIGN_OR_RETURN(spec.mode, runtime::ParseSpecMode(mode->get<std::string>()));
  }
  M2_RETURN_IF_ERROR(spec.Validate());
  out = spec;
  return Status::Ok();
}

// A required or named tool choice needs the tools it names (both APIs).
Status CheckToolChoice(const ChatJob& job) {
  if ((job.tool_choice == ToolChoice::kRequired || job.tool_choice == ToolChoice::kNamed) && job.toolset.empty())
    return Error("tool_choice: a tool call was required, but the request offers no tools");
  if (job.tool_choice == ToolChoice::kNamed && !job.toolset.Has(job.tool_name))
    return Error("tool_choice: the request offers no tool named '{}'", job.tool_name);
  return Status::Ok();
}

Status CheckObject(const Json& body) {
  if (!body.is_object()) return Error("the request body must be a JSON object, found {}", TypeName(body));
  return Status::Ok();
}

Result<Json> OpenAIMessage(const Json& m, size_t i) {
  const std::string w = fmt::format("messages[{}]", i);
  if (!m.is_object()) return Error("{}: expected an object, found {}", w, TypeName(m));
  auto r = m.find("role");
  if (r == m.end() || !r->is_string()) return Error("{}.role: expected a string", w);
  std::string role = r->get<std::string>();
  const Json content = m.contains("content") ? m["content"] : Json(nullptr);
  M2_ASSIGN_OR_RETURN(std::string text, ContentText(content, w + ".content"));
  Json out = Json::object();
  if (role == "system" || role == "developer") {
    out["role"] = "system";
    out["content"] = text;
  } else if (role == "user") {
    out["role"] = "user";
    out["content"] = text;
  } else if (role == "assistant") {
    out["role"] = "assistant";
    out["content"] = text;
    for (const char* k : {"reasoning_content", "reasoning"}) {
      auto rc = m.find(k);
      if (rc == m.end() || rc->is_null()) continue;
      if (!rc->is_string()) return Error("{}.{}: expected a string, found {}", w, k, TypeName(*rc));
      out["reasoning_content"] = rc->get<std::string>();
      break;
    }
    auto tc = m.find("tool_calls");
    if (tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) return Error("{}.tool_calls: expected an array, found {}", w, TypeName(*tc));
      Json calls = Json::array();
      for (size_t j = 0; j < tc->size(); ++j) {
        const Json& c = (*tc)[j];
        const std::string cw = fmt::format("{}.tool_calls[{}]", w, j);
        if (!c.is_object()) return Error("{}: expected an object, found {}", cw, TypeName(c));
        auto f = c.find("function");
        if (f == c.end() || !f->is_object()) return Error("{}.function: expected an object", cw);
        auto name = f->find("name");
        if (name == f->end() || !name->is_string()) return Error("{}.function.name: expected a string", cw);
        Json call = {{"id", c.value("id", fmt::format("call_{}", j))}, {"type", "function"},
                     {"function", {{"name", *name}, {"arguments", f->value("arguments", Json("{}"))}}}};
        calls.push_back(std::move(call));
      }
      if (!calls.empty()) out["tool_calls"] = std::move(calls);
    }
  } else if (role == "tool" || role == "function") {
    out["role"] = "tool";
    out["content"] = text;
    if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) out["tool_call_id"] = m["tool_call_id"];
    if (m.contains("name") && m["name"].is_string()) out["name"] = m["name"];
  } else {
    return Error("{}.role: unknown role '{}': expected system, developer, user, assistant or tool", w, role);
  }
  return out;
}

Status ParseOpenAITools(const Json& body, ChatJob& job) {
  auto t = body.find("tools");
  if (t != body.end() && !t->is_null()) {
    if (!t->is_array()) return Error("tools: expected an array, found {}", TypeName(*t));
    for (size_t i = 0; i < t->size(); ++i) {
      const Json& tool = (*t)[i];
      if (!tool.is_object()) return Error("tools[{}]: expected an object, found {}", i, TypeName(tool));
      if (tool.value("type", std::string("function")) != "function")
        return Error("tools[{}].type: only \"function\" tools are supported, found {}", i, tool["type"].dump());
      auto f = tool.find("function");
      if (f == tool.end() || !f->is_object()) return Error("tools[{}].function: expected an object", i);
      if (!f->contains("name") || !(*f)["name"].is_string()) return Error("tools[{}].function.name: expected a string", i);
      if (f->contains("parameters") && !(*f)["parameters"].is_object() && !(*f)["parameters"].is_null())
        return Error("tools[{}].function.parameters: expected a JSON schema object, found {}", i,
                     TypeName((*f)["parameters"]));
    }
    if (!t->empty()) job.tools = *t;
  }
  M2_ASSIGN_OR_RETURN(job.toolset, chat::ToolSet::FromJson(job.tools));
  auto c = body.find("tool_choice");
  if (c == body.end() || c->is_null()) return Status::Ok();
  if (c->is_string()) {
    const std::string v = c->get<std::string>();
    if (v == "auto") job.tool_choice = ToolChoice::kAuto;
    else if (v == "none") job.tool_choice = ToolChoice::kNone;
    else if (v == "required") job.tool_choice = ToolChoice::kRequired;
    else return Error("tool_choice: expected \"auto\", \"none\", \"required\" or a named function, found \"{}\"", v);
  } else if (c->is_object() && c->contains("function") && (*c)["function"].is_object() &&
             (*c)["function"].contains("name") && (*c)["function"]["name"].is_string()) {
    job.tool_choice = ToolChoice::kNamed;
    job.tool_name = (*c)["function"]["name"].get<std::string>();
  } else {
    return Error("tool_choice: expected \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \"function\": "
                 "{{\"name\": ...}}}}, found {}",
                 c->dump());
  }
  return CheckToolChoice(job);
}

}  // namespace

Result<ChatJob> ParseOpenAIChat(const Json& body, const runtime::SamplingParams& defaults) {
  M2_RETURN_IF_ERROR(CheckObject(body));
  ChatJob job;
  job.api = Api::kOpenAI;
  if (body.contains("model") && body["model"].is_string()) job.model = body["model"].get<std::string>();
  auto msgs = body.find("messages");
  if (msgs == body.end() || !msgs->is_array()) return Error("messages: expected an array of messages");
  if (msgs->empty()) return Error("messages: expected at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) {
    M2_ASSIGN_OR_RETURN(Json m, OpenAIMessage((*msgs)[i], i));
    job.messages.push_back(std::move(m));
  }
  M2_RETURN_IF_ERROR(chat::ParseToolCallArguments(job.messages));
  M2_RETURN_IF_ERROR(ParseOpenAITools(body, job));
  M2_ASSIGN_OR_RETURN(job.parallel_tool_calls, Bool(body, "parallel_tool_calls", true));
  M2_RETURN_IF_ERROR(ParseSampling(body, defaults, job.sampling));
  M2_RETURN_IF_ERROR(ParseSpec(body, job.spec));
  M2_ASSIGN_OR_RETURN(auto n, Integer(body, "n", INT64_MIN, INT64_MAX));
  if (n && *n != 1) return Error("n: only 1 choice per request is supported, found {}", *n);
  M2_ASSIGN_OR_RETURN(auto mct, Integer(body, "max_completion_tokens", INT64_MIN, INT64_MAX));
  M2_ASSIGN_OR_RETURN(auto mt, Integer(body, "max_tokens", INT64_MIN, INT64_MAX));
  job.max_tokens = mct ? mct : mt;
  if (job.max_tokens && *job.max_tokens < 1)
    return Error("{}: expected at least 1, found {}", mct ? "max_completion_tokens" : "max_tokens", *job.max_tokens);
  M2_ASSIGN_OR_RETURN(job.stop, StopList(body, "stop"));
  M2_ASSIGN_OR_RETURN(job.stream, Bool(body, "stream", false));
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    M2_ASSIGN_OR_RETURN(job.include_usage, Bool(body["stream_options"], "include_usage", false));
  }
  M2_ASSIGN_OR_RETURN(bool logprobs, Bool(body, "logprobs", false));
  M2_ASSIGN_OR_RETURN(auto top, Integer(body, "top_logprobs", 0, 20));
  if (top && !logprobs) return Error("top_logprobs: needs \"logprobs\": true");
  if (logprobs) job.top_logprobs = top ? static_cast<int>(*top) : 0;
  if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object()) {
    const Json& kw = body["chat_template_kwargs"];
    if (kw.contains("model_identity") && kw["model_identity"].is_string())
      job.template_options.model_identity = kw["model_identity"].get<std::string>();
  }
  return job;
}

namespace {

Result<std::string> AnthropicText(const Json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return Error("{}: expected a string or an array of content blocks, found {}", where, TypeName(c));
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const Json& b = c[i];
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      return Error("{}[{}]: expected a content block with a string \"type\"", where, i);
    const std::string type = b["type"].get<std::string>();
    if (type != "text") return Error("{}[{}]: content of type '{}' is not supported here: this model reads text only", where, i, type);
    if (!b.contains("text") || !b["text"].is_string()) return Error("{}[{}].text: expected a string", where, i);
    out += b["text"].get<std::string>();
  }
  return out;
}

Status AnthropicMessage(const Json& m, size_t i, Json& out) {
  const std::string w = fmt::format("messages[{}]", i);
  if (!m.is_object()) return Error("{}: expected an object, found {}", w, TypeName(m));
  if (!m.contains("role") || !m["role"].is_string()) return Error("{}.role: expected a string", w);
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant")
    return Error("{}.role: unknown role '{}': expected user or assistant", w, role);
  if (!m.contains("content")) return Error("{}.content: missing", w);
  const Json& c = m["content"];
  if (c.is_string()) {
    out.push_back({{"role", role}, {"content", c.get<std::string>()}});
    return Status::Ok();
  }
  if (!c.is_array()) return Error("{}.content: expected a string or an array of blocks, found {}", w, TypeName(c));
  std::string text, thinking;
  Json calls = Json::array();
  for (size_t j = 0; j < c.size(); ++j) {
    const Json& b = c[j];
    const std::string bw = fmt::format("{}.content[{}]", w, j);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      return Error("{}: expected a content block with a string \"type\"", bw);
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string()) return Error("{}.text: expected a string", bw);
      text += b["text"].get<std::string>();
    } else if (type == "thinking" && role == "assistant") {
      if (!b.contains("thinking") || !b["thinking"].is_string()) return Error("{}.thinking: expected a string", bw);
      thinking += b["thinking"].get<std::string>();
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Encrypted reasoning of another model: nothing this one can read.
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("name") || !b["name"].is_string()) return Error("{}.name: expected a string", bw);
      Json input = b.contains("input") ? b["input"] : Json::object();
      if (input.is_null()) input = Json::object();
      if (!input.is_object()) return Error("{}.input: expected an object, found {}", bw, TypeName(input));
      calls.push_back({{"id", b.value("id", fmt::format("toolu_{}", j))},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input}}}});
    } else if (type == "tool_result" && role == "user") {
      std::string result;
      if (b.contains("content") && !b["content"].is_null()) {
        M2_ASSIGN_OR_RETURN(result, AnthropicText(b["content"], bw + ".content"));
      }
      if (b.contains("is_error") && b["is_error"].is_boolean() && b["is_error"].get<bool>()) result = "Error: " + result;
      Json tool = {{"role", "tool"}, {"content", result}};
      if (b.contains("tool_use_id") && b["tool_use_id"].is_string()) tool["tool_call_id"] = b["tool_use_id"];
      out.push_back(std::move(tool));
    } else {
      return Error("{}: a block of type '{}' is not supported in a{} {} message", bw, type,
                   role == "assistant" ? "n" : "", role);
    }
  }
  if (role == "assistant") {
    Json a = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) a["reasoning_content"] = thinking;
    if (!calls.empty()) a["tool_calls"] = std::move(calls);
    out.push_back(std::move(a));
  } else if (!text.empty() || out.empty() || !out.back().is_object() || out.back().value("role", "") != "tool") {
    out.push_back({{"role", "user"}, {"content", text}});
  }
  return Status::Ok();
}

}  // namespace

Result<ChatJob> ParseAnthropicMessages(const Json& body, const runtime::SamplingParams& defaults) {
  M2_RETURN_IF_ERROR(CheckObject(body));
  ChatJob job;
  job.api = Api::kAnthropic;
  if (body.contains("model") && body["model"].is_string()) job.model = body["model"].get<std::string>();
  if (body.contains("system") && !body["system"].is_null()) {
    M2_ASSIGN_OR_RETURN(std::string sys, AnthropicText(body["system"], "system"));
    job.messages.push_back({{"role", "system"}, {"content", sys}});
  }
  auto msgs = body.find("messages");
  if (msgs == body.end() || !msgs->is_array()) return Error("messages: expected an array of messages");
  if (msgs->empty()) return Error("messages: expected at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) M2_RETURN_IF_ERROR(AnthropicMessage((*msgs)[i], i, job.messages));
  // Tools: {name, description, input_schema} -> OpenAI's shape for the template.
  auto t = body.find("tools");
  if (t != body.end() && !t->is_null()) {
    if (!t->is_array()) return Error("tools: expected an array, found {}", TypeName(*t));
    Json tools = Json::array();
    for (size_t i = 0; i < t->size(); ++i) {
      const Json& tool = (*t)[i];
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string())
        return Error("tools[{}]: expected an object with a string \"name\"", i);
      if (tool.contains("type") && tool["type"].is_string() && tool["type"] != "custom")
        return Error("tools[{}]: server tools (type '{}') are not supported: give a custom tool with an input_schema", i,
                     tool["type"].get<std::string>());
      if (!tool.contains("input_schema") || !tool["input_schema"].is_object())
        return Error("tools[{}].input_schema: expected a JSON schema object", i);
      Json f = {{"name", tool["name"]}};
      if (tool.contains("description") && tool["description"].is_string()) f["description"] = tool["description"];
      f["parameters"] = tool["input_schema"];
      tools.push_back({{"type", "function"}, {"function", f}});
    }
    if (!tools.empty()) job.tools = std::move(tools);
  }
  M2_ASSIGN_OR_RETURN(job.toolset, chat::ToolSet::FromJson(job.tools));
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const Json& c = body["tool_choice"];
    if (!c.is_object() || !c.contains("type") || !c["type"].is_string())
      return Error("tool_choice: expected an object with a string \"type\"");
    const std::string type = c["type"].get<std::string>();
    if (type == "auto") job.tool_choice = ToolChoice::kAuto;
    else if (type == "none") job.tool_choice = ToolChoice::kNone;
    else if (type == "any") job.tool_choice = ToolChoice::kRequired;
    else if (type == "tool") {
      if (!c.contains("name") || !c["name"].is_string()) return Error("tool_choice.name: expected a string");
      job.tool_choice = ToolChoice::kNamed;
      job.tool_name = c["name"].get<std::string>();
    } else {
      return Error("tool_choice.type: expected auto, any, tool or none, found '{}'", type);
    }
    if (c.contains("disable_parallel_tool_use") && c["disable_parallel_tool_use"].is_boolean())
      job.parallel_tool_calls = !c["disable_parallel_tool_use"].get<bool>();
    M2_RETURN_IF_ERROR(CheckToolChoice(job));
  }
  M2_RETURN_IF_ERROR(ParseSampling(body, defaults, job.sampling));
  M2_RETURN_IF_ERROR(ParseSpec(body, job.spec));
  M2_ASSIGN_OR_RETURN(job.max_tokens, Integer(body, "max_tokens", INT64_MIN, INT64_MAX));
  if (job.max_tokens && *job.max_tokens < 1) return Error("max_tokens: expected at least 1, found {}", *job.max_tokens);
  M2_ASSIGN_OR_RETURN(job.stop, StopList(body, "stop_sequences"));
  M2_ASSIGN_OR_RETURN(job.stream, Bool(body, "stream", false));
  return job;
}

Result<std::string> RenderJobPrompt(const ChatJob& job, std::string* forced_reply) {
  chat::ChatTemplateOptions o = job.template_options;
  o.add_generation_prompt = true;
  M2_ASSIGN_OR_RETURN(std::string prompt, chat::RenderChatTemplate(job.messages, job.tools, o));
  std::string forced;
  if (job.tool_choice == ToolChoice::kRequired) forced = "</think>\n\n<minimax:tool_call>\n<invoke name=\"";
  if (job.tool_choice == ToolChoice::kNamed)
    forced = "</think>\n\n<minimax:tool_call>\n<invoke name=\"" + job.tool_name + "\">\n";
  if (forced_reply != nullptr) *forced_reply = forced;
  return prompt + forced;
}

Result<CompletionJob> ParseOpenAICompletion(const Json& body, const runtime::SamplingParams& defaults) {
  M2_RETURN_IF_ERROR(CheckObject(body));
  CompletionJob job;
  if (body.contains("model") && body["model"].is_string()) job.model = body["model"].get<std::string>();
  auto p = body.find("prompt");
  if (p == body.end() || !(p->is_string() || (p->is_array() && p->size() == 1 && (*p)[0].is_string())))
    return Error("prompt: expected a string (one prompt per request)");
  job.prompt = p->is_string() ? p->get<std::string>() : (*p)[0].get<std::string>();
  runtime::SamplingParams s;
  M2_RETURN_IF_ERROR(ParseSampling(body, defaults, s));
  job.sampling = s;
  M2_RETURN_IF_ERROR(ParseSpec(body, job.spec));
  M2_ASSIGN_OR_RETURN(auto n, Integer(body, "n", INT64_MIN, INT64_MAX));
  if (n && *n != 1) return Error("n: only 1 choice per request is supported, found {}", *n);
  M2_ASSIGN_OR_RETURN(job.max_tokens, Integer(body, "max_tokens", INT64_MIN, INT64_MAX));
  if (job.max_tokens && *job.max_tokens < 1) return Error("max_tokens: expected at least 1, found {}", *job.max_tokens);
  M2_ASSIGN_OR_RETURN(job.stop, StopList(body, "stop"));
  M2_ASSIGN_OR_RETURN(job.stream, Bool(body, "stream", false));
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    M2_ASSIGN_OR_RETURN(job.include_usage, Bool(body["stream_options"], "include_usage", false));
  }
  M2_ASSIGN_OR_RETURN(job.echo, Bool(body, "echo", false));
  M2_ASSIGN_OR_RETURN(auto lp, Integer(body, "logprobs", INT64_MIN, INT64_MAX));
  if (lp) return Error("logprobs: not supported on /v1/completions; use /v1/chat/completions");
  return job;
}

}  // namespace m2::server
