// A multi-turn conversation with the model in the MiniMax-M2 chat format.
//
// Each reply renders the whole conversation with the native chat template
// (chat/chat_template.h), encodes it, and generates; the Generator's prefix reuse means
// only the new part is prefilled. The output streams through the OutputParser, so
// reasoning and content reach the caller separately as they are produced, and the reply
// is stored as the format wants it back: {"role": "assistant", "content": ...,
// "reasoning_content": ..., "tool_calls": [...]} (the template shows the reasoning of
// turns after the last user message - interleaved thinking - and drops older ones).
//
// Tool calls: when the reply calls tools and an executor is given, each call is run, its
// result appended as a {"role": "tool"} message, and generation continues, until a reply
// calls no tool (or max_tool_rounds is reached).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "chat/tool_schema.h"
#include "runtime/generator.h"
#include "text/tokenizer.h"

namespace m2::runtime {

// What a chat needs from generation: prompt ids in, streamed text out. The model-backed
// one is ModelTextGenerator; tests script their own.
class TextGenerator {
 public:
  virtual ~TextGenerator() = default;
  virtual const text::Tokenizer& tokenizer() const = 0;
  virtual Result<GenerationResult> Generate(std::span<const int32_t> prompt, const TextCallback& on_text) = 0;
};

// A Generator with fixed sampling and options. The chat format ends an assistant turn
// with "[e~[", so that token's id is added to the stop ids when the tokenizer has it.
class ModelTextGenerator : public TextGenerator {
 public:
  // `generator` must have a tokenizer; all references must outlive this object.
  ModelTextGenerator(Generator& generator, Sampler& sampler, GenerateOptions options);
  const text::Tokenizer& tokenizer() const override { return *generator_.tokenizer(); }
  Result<GenerationResult> Generate(std::span<const int32_t> prompt, const TextCallback& on_text) override;
  GenerateOptions& options() { return options_; }

 private:
  Generator& generator_;
  Sampler& sampler_;
  GenerateOptions options_;
};

// Runs one tool call; the text becomes the tool message's content. An error is reported
// to the model as the tool's result ("error: ..."), so it can react.
using ToolExecutor = std::function<Result<std::string>(const chat::ToolCall&)>;

struct ChatCallbacks {
  std::function<void(std::string_view)> on_reasoning;
  std::function<void(std::string_view)> on_content;
  std::function<void(const chat::ToolCall&)> on_tool_call;
  std::function<void(const chat::ToolCall&, const std::string& result, bool ok)> on_tool_result;
  // After each model reply (a turn with tool calls has several).
  std::function<void(const GenerationResult&)> on_reply_done;
};

struct ChatTurnResult {
  std::vector<GenerationStats> replies;  // one per model reply
  StopReason stop_reason = StopReason::kEos;  // of the last reply
  int tool_rounds = 0;
};

struct ChatSessionOptions {
  chat::ChatTemplateOptions template_options;
  // Tool rounds one Send may run before returning to the user; bounds a model that
  // keeps calling tools.
  int max_tool_rounds = 8;
};

class ChatSession {
 public:
  // `tools`: null or an array of OpenAI tools, as the template shows them to the model.
  static Result<ChatSession> Create(TextGenerator& generator, chat::Json tools, ChatSessionOptions options = {});

  // Adds any message (a system prompt first, earlier turns, ...), checked by rendering.
  Status AddMessage(chat::Json message);
  // Adds a user message and generates the reply, running tools as the model calls them.
  // On an error the user message is taken back out of the history.
  Result<ChatTurnResult> Send(std::string_view user_text, const ChatCallbacks& callbacks,
                              const ToolExecutor& executor = nullptr);
  // Generates the next assistant reply to the history as it is (after AddMessage), first
  // running the tool calls of a last assistant message that has no results yet.
  Result<ChatTurnResult> Continue(const ChatCallbacks& callbacks, const ToolExecutor& executor = nullptr);

  const chat::Json& messages() const { return messages_; }
  const chat::Json& tools() const { return tools_; }
  // The prompt text of the last reply generated.
  const std::string& last_prompt() const { return last_prompt_; }

 private:
  ChatSession(TextGenerator& generator, chat::Json tools, chat::ToolSet toolset, ChatSessionOptions options)
      : generator_(&generator), tools_(std::move(tools)), toolset_(std::move(toolset)), options_(std::move(options)) {}
  // Runs the pending tool calls of the last message; false when there were none.
  bool RunPendingTools(const ChatCallbacks& callbacks, const ToolExecutor& executor);
  Result<GenerationResult> Reply(const ChatCallbacks& callbacks, std::vector<chat::ToolCall>& calls);

  TextGenerator* generator_;
  chat::Json tools_;
  chat::ToolSet toolset_;
  ChatSessionOptions options_;
  chat::Json messages_ = chat::Json::array();
  std::string last_prompt_;
  int next_call_id_ = 0;
};

}  // namespace m2::runtime
