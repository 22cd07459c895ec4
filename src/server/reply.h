// The response side of m2 serve: a model reply, streamed through the output parser,
// becomes OpenAI chat.completion(.chunk) / text_completion objects or Anthropic message
// events. Streaming frames are returned as server-sent-event text to write as they come.
//
// OpenAI stream order: a role chunk, reasoning_content deltas, content deltas, each tool
// call as a chunk with its index, id, type and name (empty arguments) followed by a chunk
// with its arguments (a JSON string typed by the tool's schema), the finish chunk, the
// usage chunk (stream_options.include_usage), then "data: [DONE]". With reasoning_inline
// the reasoning goes into content as "<think>\n...\n</think>\n\n" instead.
// Anthropic stream: message_start; per block content_block_start / _delta (thinking_delta,
// text_delta, input_json_delta) / _stop; message_delta (stop_reason, usage); message_stop.
// finish_reason / stop_reason: tool calls -> tool_calls / tool_use; eos -> stop / end_turn;
// a stop string -> stop / stop_sequence; the token limit, the context or the KV cache
// full -> length / max_tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "runtime/engine.h"
#include "server/chat_api.h"
#include "text/tokenizer.h"

namespace m2::server {

struct ReplyConfig {
  Api api = Api::kOpenAI;
  bool completion = false;  // OpenAI /v1/completions: plain text, no parsing
  bool stream = false;
  bool include_usage = false;
  bool reasoning_inline = false;
  bool parallel_tool_calls = true;
  bool parse_tools = true;  // false: tool-call text stays text (tool_choice none, or no tools)
  std::string id;           // response id
  std::string model;
  int64_t created = 0;
  int64_t prompt_tokens = 0;
  const text::Tokenizer* tokenizer = nullptr;  // for logprobs' token text
};

class ChatReply {
 public:
  // `forced`: the start of the reply that was put in the prompt (tool_choice), read by
  // the parser before the model's text.
  ChatReply(ReplyConfig config, const chat::ToolSet& tools, const std::string& forced);

  std::string Start();
  std::string OnText(std::string_view text);
  void OnLogprobs(const runtime::TokenLogprobs& lp);
  // The end: the last frames (streaming). `error` not ok: an error event instead of a finish.
  std::string Finish(const Status& error, const runtime::GenerationResult& result);
  // The whole response (non-streaming), after Finish.
  const chat::Json& body() const { return body_; }
  int64_t completion_tokens() const { return completion_tokens_; }

 private:
  std::string Handle(std::vector<chat::ParserEvent>& events);
  std::string OpenAIChunk(chat::Json delta, const chat::Json& finish_reason = nullptr);
  std::string AnthropicEvent(const char* name, chat::Json data);
  std::string SwitchBlock(const char* type);  // Anthropic: close the open block, open `type`
  std::string CloseBlock();
  std::string ToolCallId();
  chat::Json LogprobsJson(size_t from);

  ReplyConfig c_;
  chat::OutputParser parser_;
  std::vector<chat::ParserEvent> events_;
  std::string reasoning_, content_;
  chat::Json tool_calls_ = chat::Json::array();  // OpenAI shape, or Anthropic tool_use blocks
  std::string open_block_;  // Anthropic: "thinking", "text" or ""
  int block_index_ = -1;
  bool inline_think_open_ = false;
  std::vector<runtime::TokenLogprobs> logprobs_;
  size_t logprobs_sent_ = 0;
  int64_t completion_tokens_ = 0;
  chat::Json body_;
};

// A fresh id with a prefix ("chatcmpl-", "msg_", "call_", "toolu_").
std::string RandomId(const char* prefix);

}  // namespace m2::server
