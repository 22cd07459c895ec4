#include "server/reply.h"

#include <chrono>
#include <random>

#include <fmt/format.h>

namespace m2::server {

using chat::Json;
using chat::ParserEvent;

namespace {

// A tool set that accepts no tool name: the parser then leaves every tool-call block as
// text (an empty ToolSet would accept any name).
const chat::ToolSet& NoTools() {
  static const chat::ToolSet none = *chat::ToolSet::FromJson(
      Json::parse(R"([{"type": "function", "function": {"name": "\u0001no tool\u0001"}}])"));
  return none;
}

std::string Sse(const Json& j) { return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n"; }

}  // namespace

std::string RandomId(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  static const char* kChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kChars[rng() % 62];
  return s;
}

ChatReply::ChatReply(ReplyConfig config, const chat::ToolSet& tools, const std::string& forced)
    : c_(std::move(config)), parser_(c_.parse_tools && !tools.empty() ? tools : NoTools()) {
  if (!forced.empty() && !c_.completion) parser_.Feed(forced, events_);
}

std::string ChatReply::OpenAIChunk(Json delta, const Json& finish_reason) {
  Json choice = {{"index", 0}};
  if (c_.completion) {
    choice["text"] = delta.is_string() ? delta : Json("");
    choice["logprobs"] = nullptr;
  } else {
    choice["delta"] = std::move(delta);
    choice["logprobs"] = c_.tokenizer != nullptr && logprobs_sent_ < logprobs_.size() ? LogprobsJson(logprobs_sent_)
                                                                                         : Json(nullptr);
    logprobs_sent_ = logprobs_.size();
  }
  choice["finish_reason"] = finish_reason;
  Json chunk = {{"id", c_.id},
                {"object", c_.completion ? "text_completion" : "chat.completion.chunk"},
                {"created", c_.created},
                {"model", c_.model},
                {"choices", Json::array({choice})}};
  return Sse(chunk);
}

std::string ChatReply::AnthropicEvent(const char* name, Json data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, data.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::string ChatReply::CloseBlock() {
  if (open_block_.empty()) return "";
  std::string out;
  if (open_block_ == "thinking")
    out += AnthropicEvent("content_block_delta", {{"type", "content_block_delta"},
                                                   {"index", block_index_},
                                                   {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  out += AnthropicEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", block_index_}});
  open_block_.clear();
  return out;
}

std::string ChatReply::SwitchBlock(const char* type) {
  if (open_block_ == type) return "";
  std::string out = CloseBlock();
  ++block_index_;
  open_block_ = type;
  Json block = open_block_ == "thinking" ? Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                         : Json{{"type", "text"}, {"text", ""}};
  out += AnthropicEvent("content_block_start",
                        {{"type", "content_block_start"}, {"index", block_index_}, {"content_block", block}});
  return out;
}

std::string ChatReply::ToolCallId() { return RandomId(c_.api == Api::kAnthropic ? "toolu_" : "call_"); }

Json ChatReply::LogprobsJson(size_t from) {
  Json content = Json::array();
  auto entry = [&](int32_t id, float lp) {
    const std::string text = c_.tokenizer->Decode(std::span<const int32_t>(&id, 1));
    Json bytes = Json::array();
    for (unsigned char ch : text) bytes.push_back(static_cast<int>(ch));
    return Json{{"token", text}, {"logprob", lp}, {"bytes", bytes}};
  };
  for (size_t i = from; i < logprobs_.size(); ++i) {
    Json e = entry(logprobs_[i].token, logprobs_[i].logprob);
    Json top = Json::array();
    for (const auto& [id, lp] : logprobs_[i].top) top.push_back(entry(id, lp));
    e["top_logprobs"] = top;
    content.push_back(std::move(e));
  }
  return Json{{"content", content}};
}

std::string ChatReply::Start() {
  if (!c_.stream) return "";
  if (c_.api == Api::kAnthropic) {
    Json msg = {{"id", c_.id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", c_.model},
                {"content", Json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", c_.prompt_tokens}, {"output_tokens", 0}}}};
    return AnthropicEvent("message_start", {{"type", "message_start"}, {"message", msg}});
  }
  if (c_.completion) return "";
  return OpenAIChunk({{"role", "assistant"}, {"content", ""}});
}

std::string ChatReply::Handle(std::vector<ParserEvent>& events) {
  std::string out;
  for (ParserEvent& e : events) {
    switch (e.kind) {
      case ParserEvent::Kind::kReasoningDelta:
        reasoning_ += e.text;
        if (!c_.stream) break;
        if (c_.api == Api::kAnthropic) {
          out += SwitchBlock("thinking");
          out += AnthropicEvent("content_block_delta", {{"type", "content_block_delta"},
                                                         {"index", block_index_},
                                                         {"delta", {{"type", "thinking_delta"}, {"thinking", e.text}}}});
        } else if (c_.reasoning_inline) {
          out += OpenAIChunk({{"content", (inline_think_open_ ? "" : "<think>\n") + e.text}});
          inline_think_open_ = true;
        } else {
          out += OpenAIChunk({{"reasoning_content", e.text}});
        }
        break;
      case ParserEvent::Kind::kContentDelta:
        content_ += e.text;
        if (!c_.stream) break;
        if (c_.api == Api::kAnthropic) {
          out += SwitchBlock("text");
          out += AnthropicEvent("content_block_delta", {{"type", "content_block_delta"},
                                                         {"index", block_index_},
                                                         {"delta", {{"type", "text_delta"}, {"text", e.text}}}});
        } else {
          std::string text = e.text;
          if (inline_think_open_) text = "\n</think>\n\n" + text, inline_think_open_ = false;
          out += OpenAIChunk({{"content", text}});
        }
        break;
      case ParserEvent::Kind::kToolCall: {
        if (!c_.parallel_tool_calls && !tool_calls_.empty()) break;  // one call only, as asked
        const std::string id = ToolCallId();
        const std::string args = e.tool_call.arguments.dump(-1, ' ', false, Json::error_handler_t::replace);
        if (c_.api == Api::kAnthropic) {
          tool_calls_.push_back(
              {{"type", "tool_use"}, {"id", id}, {"name", e.tool_call.name}, {"input", e.tool_call.arguments}});
          if (!c_.stream) break;
          out += CloseBlock();
          ++block_index_;
          out += AnthropicEvent("content_block_start",
                                {{"type", "content_block_start"},
                                 {"index", block_index_},
                                 {"content_block", {{"type", "tool_use"}, {"id", id}, {"name", e.tool_call.name}, {"input", Json::object()}}}});
          out += AnthropicEvent("content_block_delta",
                                {{"type", "content_block_delta"},
                                 {"index", block_index_},
                                 {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
          out += AnthropicEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", block_index_}});
        } else {
          const int index = static_cast<int>(tool_calls_.size());
          tool_calls_.push_back(
              {{"id", id}, {"type", "function"}, {"function", {{"name", e.tool_call.name}, {"arguments", args}}}});
          if (!c_.stream) break;
          if (inline_think_open_) out += OpenAIChunk({{"content", "\n</think>\n\n"}}), inline_think_open_ = false;
          out += OpenAIChunk({{"tool_calls", Json::array({{{"index", index},
                                                             {"id", id},
                                                             {"type", "function"},
                                                             {"function", {{"name", e.tool_call.name}, {"arguments", ""}}}}})}});
          out += OpenAIChunk({{"tool_calls", Json::array({{{"index", index}, {"function", {{"arguments", args}}}}})}});
        }
        break;
      }
    }
  }
  events.clear();
  return out;
}

std::string ChatReply::OnText(std::string_view text) {
  if (c_.completion) {
    content_ += text;
    return c_.stream ? OpenAIChunk(Json(std::string(text))) : "";
  }
  parser_.Feed(text, events_);
  return Handle(events_);
}

void ChatReply::OnLogprobs(const runtime::TokenLogprobs& lp) { logprobs_.push_back(lp); }

std::string ChatReply::Finish(const Status& error, const runtime::GenerationResult& r) {
  std::string out;
  if (!c_.completion) {
    parser_.Finish(events_);
    out += Handle(events_);
  }
  completion_tokens_ = static_cast<int64_t>(r.tokens.size());
  const int64_t cached = r.stats.reused_tokens;
  const bool length = r.stop_reason == runtime::StopReason::kMaxTokens ||
                      r.stop_reason == runtime::StopReason::kContextFull ||
                      r.stop_reason == runtime::StopReason::kCacheFull;
  const bool tools = !tool_calls_.empty();
  if (c_.api == Api::kAnthropic) {
    const char* stop = tools ? "tool_use"
                       : length ? "max_tokens"
                       : r.stop_reason == runtime::StopReason::kStopString ? "stop_sequence"
                                                                          : "end_turn";
    const Json stop_seq = r.stop_reason == runtime::StopReason::kStopString ? Json(r.stop_string) : Json(nullptr);
    const Json usage = {{"input_tokens", c_.prompt_tokens - cached},
                        {"output_tokens", completion_tokens_},
                        {"cache_read_input_tokens", cached},
                        {"cache_creation_input_tokens", 0}};
    if (c_.stream) {
      if (!error.ok()) {
        out += CloseBlock();
        return out + AnthropicEvent("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", error.message()}}}});
      }
      out += CloseBlock();
      // The whole usage, as Anthropic's API sends it here: message_start went out before
      // the prefix cache was looked up, so its input_tokens counted the whole prompt; this
      // one splits it into uncached and cache_read (the SDKs take the last value).
      out += AnthropicEvent("message_delta", {{"type", "message_delta"},
                                               {"delta", {{"stop_reason", stop}, {"stop_sequence", stop_seq}}},
                                               {"usage", usage}});
      out += AnthropicEvent("message_stop", {{"type", "message_stop"}});
      return out;
    }
    Json content = Json::array();
    if (!reasoning_.empty()) content.push_back({{"type", "thinking"}, {"thinking", reasoning_}, {"signature", ""}});
    if (!content_.empty()) content.push_back({{"type", "text"}, {"text", content_}});
    for (const auto& t : tool_calls_) content.push_back(t);
    body_ = {{"id", c_.id},           {"type", "message"},         {"role", "assistant"},
             {"model", c_.model},     {"content", content},        {"stop_reason", stop},
             {"stop_sequence", stop_seq}, {"usage", usage}};
    return out;
  }
  const char* finish = tools ? "tool_calls" : length ? "length" : "stop";
  const Json usage = {{"prompt_tokens", c_.prompt_tokens},
                      {"completion_tokens", completion_tokens_},
                      {"total_tokens", c_.prompt_tokens + completion_tokens_},
                      {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  if (c_.stream) {
    if (!error.ok()) {
      out += Sse({{"error", {{"message", error.message()}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
      return out + "data: [DONE]\n\n";
    }
    if (inline_think_open_) out += OpenAIChunk({{"content", "\n</think>\n\n"}}), inline_think_open_ = false;
    out += c_.completion ? OpenAIChunk(Json(""), finish) : OpenAIChunk(Json::object(), finish);
    if (c_.include_usage)
      out += Sse({{"id", c_.id},
                  {"object", c_.completion ? "text_completion" : "chat.completion.chunk"},
                  {"created", c_.created},
                  {"model", c_.model},
                  {"choices", Json::array()},
                  {"usage", usage}});
    return out + "data: [DONE]\n\n";
  }
  if (c_.completion) {
    body_ = {{"id", c_.id},
             {"object", "text_completion"},
             {"created", c_.created},
             {"model", c_.model},
             {"choices", Json::array({{{"index", 0}, {"text", content_}, {"logprobs", nullptr}, {"finish_reason", finish}}})},
             {"usage", usage}};
    return out;
  }
  Json message = {{"role", "assistant"}};
  std::string content = content_;
  if (c_.reasoning_inline && !reasoning_.empty()) content = "<think>\n" + reasoning_ + "\n</think>\n\n" + content;
  message["content"] = content.empty() && tools ? Json(nullptr) : Json(content);
  if (!c_.reasoning_inline) message["reasoning_content"] = reasoning_.empty() ? Json(nullptr) : Json(reasoning_);
  if (tools) message["tool_calls"] = tool_calls_;
  Json choice = {{"index", 0}, {"message", message}, {"finish_reason", finish}};
  choice["logprobs"] = c_.tokenizer != nullptr && !logprobs_.empty() ? LogprobsJson(0) : Json(nullptr);
  body_ = {{"id", c_.id},           {"object", "chat.completion"}, {"created", c_.created},
           {"model", c_.model},     {"choices", Json::array({choice})}, {"usage", usage}};
  return out;
}

}  // namespace m2::server
