#include "runtime/chat_session.h"

#include <fmt/format.h>

namespace m2::runtime {

using chat::Json;

ModelTextGenerator::ModelTextGenerator(Generator& generator, Sampler& sampler, GenerateOptions options)
    : generator_(generator), sampler_(sampler), options_(std::move(options)) {
  if (generator_.tokenizer() != nullptr) {
    if (auto eot = generator_.tokenizer()->TokenId("[e~["); eot.has_value()) {
      bool have = false;
      for (int32_t id : options_.eos_ids) have |= id == *eot;
      if (!have) options_.eos_ids.push_back(*eot);
    }
  }
}

Result<GenerationResult> ModelTextGenerator::Generate(std::span<const int32_t> prompt, const TextCallback& on_text) {
  return generator_.Generate(prompt, sampler_, options_, on_text);
}

Result<ChatSession> ChatSession::Create(TextGenerator& generator, Json tools, ChatSessionOptions options) {
  if (!tools.is_null() && !tools.is_array())
    return Error("tools: expected an array of tools, found {}", chat::JsonTypeName(tools));
  if (tools.is_array() && tools.empty()) tools = nullptr;  // the template shows no tools block for []
  M2_ASSIGN_OR_RETURN(chat::ToolSet set, chat::ToolSet::FromJson(tools));
  // Render once with no messages so that a tool the template cannot show fails here.
  if (auto r = chat::RenderChatTemplate(Json::array(), tools, options.template_options); !r.ok()) return r.status();
  return ChatSession(generator, std::move(tools), std::move(set), std::move(options));
}

Status ChatSession::AddMessage(Json message) {
  messages_.push_back(std::move(message));
  auto r = chat::RenderChatTemplate(messages_, tools_, options_.template_options);
  if (!r.ok()) {
    messages_.erase(messages_.end() - 1);
    return r.status();
  }
  return Status::Ok();
}

Result<ChatTurnResult> ChatSession::Send(std::string_view user_text, const ChatCallbacks& callbacks,
                                         const ToolExecutor& executor) {
  const size_t before = messages_.size();
  messages_.push_back(Json{{"role", "user"}, {"content", std::string(user_text)}});
  auto r = Continue(callbacks, executor);
  if (!r.ok()) messages_.erase(messages_.begin() + static_cast<std::ptrdiff_t>(before), messages_.end());
  return r;
}

bool ChatSession::RunPendingTools(const ChatCallbacks& callbacks, const ToolExecutor& executor) {
  if (!executor || messages_.empty()) return false;
  const Json& last = messages_.back();
  if (!last.is_object() || last.value("role", "") != "assistant") return false;
  auto calls_it = last.find("tool_calls");
  if (calls_it == last.end() || !calls_it->is_array() || calls_it->empty()) return false;
  const Json calls = *calls_it;  // a copy: messages_ grows below
  for (const Json& c : calls) {
    const Json& fn = c.contains("function") ? c["function"] : c;
    chat::ToolCall call;
    call.name = fn.value("name", "");
    if (fn.contains("arguments") && fn["arguments"].is_object()) call.arguments = fn["arguments"];
    auto result = executor(call);
    const bool ok = result.ok();
    std::string text = ok ? *result : "error: " + result.status().message();
    if (callbacks.on_tool_result) callbacks.on_tool_result(call, text, ok);
    Json msg = {{"role", "tool"}};
    if (c.contains("id")) msg["tool_call_id"] = c["id"];
    msg["content"] = std::move(text);
    messages_.push_back(std::move(msg));
  }
  return true;
}

Result<GenerationResult> ChatSession::Reply(const ChatCallbacks& callbacks, std::vector<chat::ToolCall>& calls) {
  chat::ChatTemplateOptions topts = options_.template_options;
  topts.add_generation_prompt = true;
  M2_ASSIGN_OR_RETURN(last_prompt_, chat::RenderChatTemplate(messages_, tools_, topts));
  const std::vector<int32_t> ids = generator_->tokenizer().Encode(last_prompt_, /*parse_special=*/true);

  // The generation prompt ends inside <think>: the output starts as reasoning.
  chat::OutputParser parser(toolset_, {.starts_in_reasoning = true});
  chat::ParsedOutput parsed;
  std::vector<chat::ParserEvent> events;
  auto deliver = [&] {
    for (const chat::ParserEvent& e : events) {
      parsed.Add(e);
      switch (e.kind) {
        case chat::ParserEvent::Kind::kReasoningDelta:
          if (callbacks.on_reasoning) callbacks.on_reasoning(e.text);
          break;
        case chat::ParserEvent::Kind::kContentDelta:
          if (callbacks.on_content) callbacks.on_content(e.text);
          break;
        case chat::ParserEvent::Kind::kToolCall:
          if (callbacks.on_tool_call) callbacks.on_tool_call(e.tool_call);
          break;
      }
    }
    events.clear();
  };
  auto result = generator_->Generate(ids, [&](std::string_view text) {
    parser.Feed(text, events);
    deliver();
  });
  if (!result.ok()) return result.status();
  parser.Finish(events);
  deliver();

  // The reply as the template reads it back. reasoning_content is kept even when empty:
  // a string there tells the template not to look for <think> in the content.
  Json msg = {{"role", "assistant"}, {"content", parsed.content}, {"reasoning_content", parsed.reasoning_content}};
  if (!parsed.tool_calls.empty()) {
    Json list = Json::array();
    for (const chat::ToolCall& call : parsed.tool_calls) {
      list.push_back(Json{{"id", fmt::format("call_{}", next_call_id_++)},
                          {"type", "function"},
                          {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    msg["tool_calls"] = std::move(list);
  }
  messages_.push_back(std::move(msg));
  calls = std::move(parsed.tool_calls);
  if (callbacks.on_reply_done) callbacks.on_reply_done(*result);
  return result;
}

Result<ChatTurnResult> ChatSession::Continue(const ChatCallbacks& callbacks, const ToolExecutor& executor) {
  ChatTurnResult out;
  if (RunPendingTools(callbacks, executor)) ++out.tool_rounds;
  while (true) {
    std::vector<chat::ToolCall> calls;
    M2_ASSIGN_OR_RETURN(GenerationResult r, Reply(callbacks, calls));
    out.replies.push_back(r.stats);
    out.stop_reason = r.stop_reason;
    if (r.stop_reason == StopReason::kCancelled || calls.empty() || !executor ||
        out.tool_rounds >= options_.max_tool_rounds)
      break;
    RunPendingTools(callbacks, executor);
    ++out.tool_rounds;
  }
  return out;
}

}  // namespace m2::runtime
