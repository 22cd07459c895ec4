// The request side of m2 serve, without HTTP (so a fuzzer can drive it): OpenAI chat
// completions and Anthropic messages requests become one ChatJob, rendered with the
// native chat template (chat/chat_template.h).
//
// Rules (each tested in tests/server/chat_api_test.cpp):
//   - OpenAI roles: system, developer (rendered as system), user, assistant, tool; any
//     other role is an error. Content may be a string, null (empty, as vLLM) or an array
//     of {"type": "text"} parts (joined with no separator); other part types (images,
//     audio) are refused: the model reads text only.
//   - Earlier reasoning comes back as `reasoning_content` (vLLM's name; `reasoning` is
//     accepted too), or inline "<think>...</think>" in the content (the template splits
//     it), or Anthropic `thinking` blocks (joined, becoming reasoning_content): all
//     render exactly as the official template renders that conversation.
//   - Anthropic messages map onto the same conversation: `system` (string or text
//     blocks) first; a user message's tool_result blocks become tool messages, in order,
//     before its text (is_error results are prefixed "Error: "); an assistant message's
//     thinking / text / tool_use blocks become reasoning_content / content / tool_calls.
//   - tool_choice: auto (default), none (tools are still shown, as vLLM does, but the
//     reply is not parsed for calls), required / any (the reply is started with the
//     tool-call opening), a named function / {"type": "tool", "name"} (started with that
//     invoke). n must be 1. Sampling fields out of range are errors naming the field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/chat_template.h"
#include "chat/py_format.h"
#include "chat/tool_schema.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace m2::server {

enum class Api { kOpenAI, kAnthropic };
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ChatJob {
  Api api = Api::kOpenAI;
  std::string model;
  chat::Json messages = chat::Json::array();  // OpenAI-shaped, as the template takes them
  chat::Json tools = nullptr;                 // OpenAI-shaped tools, or null
  chat::ToolSet toolset;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;  // kNamed
  bool parallel_tool_calls = true;
  runtime::SamplingParams sampling;
  std::optional<int64_t> max_tokens;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // OpenAI stream_options.include_usage
  int top_logprobs = -1;       // -1: no logprobs
  chat::ChatTemplateOptions template_options;
  // "speculative": "lookup" | "off" or {"mode": ..., "draft": N} (an extension, as
  // llama.cpp's server takes speculative settings per request); unset: the server's --spec.
  std::optional<runtime::SpecOptions> spec;
};

// `defaults`: the server's sampling defaults (generation_config.json); request fields win.
Result<ChatJob> ParseOpenAIChat(const chat::Json& body, const runtime::SamplingParams& defaults);
Result<ChatJob> ParseAnthropicMessages(const chat::Json& body, const runtime::SamplingParams& defaults);

// The prompt text for the model: the rendered conversation, then the forced start of the
// reply for tool_choice required / named (returned in `forced_reply` too: the output
// parser reads it before the model's text).
Result<std::string> RenderJobPrompt(const ChatJob& job, std::string* forced_reply);

// OpenAI legacy completions (POST /v1/completions): a prompt string.
struct CompletionJob {
  std::string model;
  std::string prompt;
  runtime::SamplingParams sampling;
  std::optional<int64_t> max_tokens;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  std::optional<runtime::SpecOptions> spec;  // as in ChatJob
};
Result<CompletionJob> ParseOpenAICompletion(const chat::Json& body, const runtime::SamplingParams& defaults);

}  // namespace m2::server
