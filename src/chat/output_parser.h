// Streaming parser of what MiniMax-M2 writes: reasoning, content and tool calls.
//
// After the generation prompt "]~b]ai\n<think>\n" the model writes
//   {reasoning}\n</think>\n\n{content}\n<minimax:tool_call>\n<invoke name="f">\n
//   <parameter name="k">v</parameter>\n...</invoke>\n...</minimax:tool_call>
// (the inverse of an assistant turn in chat_template.h). The parser is fed decoded text in
// chunks of any size and emits deltas as soon as they are certain, holding back only bytes
// that could still begin a tag ("</think>", "<minimax:tool_call>"), an unfinished UTF-8
// sequence, and a trailing run of newlines (the format puts newlines around tags; they are
// emitted once text follows them). Tool-call blocks are held until each </invoke>.
//
// Results do not depend on how the text is split into chunks.
//
// Newlines: the template writes "<think>\n{r}\n</think>\n\n{c}" and reads a turn back with
// .strip('\n') on both parts, and puts one "\n" before <minimax:tool_call>. So newlines at
// the start and end of the reasoning and of the content, and right before a tool-call
// block, are format and dropped; newlines inside the text are kept.
//
// Nothing is lost: text that does not parse stays in the content, verbatim -
//   - a block that yields no tool call (malformed, truncated, only unknown tools) is
//     content as written, with the newlines before it;
//   - in a block that yields tool calls, each <invoke> naming a tool the request does not
//     offer, and any stray text, is content (with the whitespace before it);
//   - where a block stops parsing (bad or truncated XML), the block so far is handled as
//     above and the rest of the text is read again as content (it may open a new block).
// A parameter value runs to the first </parameter>, so values may contain "<", XML-like
// text, "</invoke>" or "</minimax:tool_call>"; values are typed by the tool's schema
// (tool_schema.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/py_format.h"
#include "chat/tool_schema.h"

namespace m2::chat {

struct ToolCall {
  std::string name;
  Json arguments = Json::object();  // parameter name -> typed value, in the order written
};

struct ParserEvent {
  enum class Kind { kReasoningDelta, kContentDelta, kToolCall };
  Kind kind;
  std::string text;    // the delta, for kReasoningDelta and kContentDelta
  ToolCall tool_call;  // for kToolCall: one complete call
};

struct OutputParserOptions {
  // True when the prompt ended with the generation prompt's "<think>\n" (chat_template.h):
  // the output starts inside the reasoning, which "</think>" closes. False for prompts
  // without it: the output is content, unless it opens with "<think>" itself.
  bool starts_in_reasoning = true;
};

class OutputParser {
 public:
  // `tools`: the tools the request offered. Empty: every tool name is accepted and, with
  // no schema, values stay strings (except "null").
  explicit OutputParser(ToolSet tools, OutputParserOptions options = {});

  // Feeds the next piece of decoded output; appends the events it completes.
  void Feed(std::string_view text, std::vector<ParserEvent>& events);
  // The output has ended: flushes what was held back (a truncated tool-call block becomes
  // content). Feed must not be called after it.
  void Finish(std::vector<ParserEvent>& events);

 private:
  enum class State { kReasoning, kContent, kToolBlock };

  // One of the two text streams: drops leading newlines and holds back a trailing run of
  // newlines until non-newline text follows.
  struct Section {
    bool started = false;
    std::string held_newlines;
    std::string Push(std::string_view text);
  };

  void Process(bool final, std::vector<ParserEvent>& events);
  bool StepReasoning(bool final, std::vector<ParserEvent>& events);
  bool StepContent(bool final, std::vector<ParserEvent>& events);
  bool StepToolBlock(bool final, std::vector<ParserEvent>& events);
  void FailToolBlock(std::vector<ParserEvent>& events);
  void EmitReasoning(std::string_view text, std::vector<ParserEvent>& events);
  void EmitContent(std::string_view text, std::vector<ParserEvent>& events);

  ToolSet tools_;
  State state_;
  std::string buf_;                 // fed text not consumed yet
  bool leading_think_allowed_;      // starts_in_reasoning == false, no content seen yet
  bool finished_ = false;
  Section reasoning_, content_;
  // The tool-call block being read.
  std::string block_newlines_;      // newlines held before its opening tag
  std::string block_raw_;           // its text consumed so far, opening tag included
  std::string block_unaccepted_;    // consumed text that became no tool call
  std::string block_space_;         // whitespace consumed since the last invoke
  int block_calls_ = 0;             // tool calls it produced
};

// The whole result, as the OpenAI API reports it.
struct ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;

  void Add(const ParserEvent& event);
  // {"reasoning_content": ..., "content": ..., "tool_calls": [{"name", "arguments"}]}
  Json ToJson() const;
};

// Parses a complete output through the streaming parser (one Feed, then Finish).
ParsedOutput ParseModelOutput(std::string_view text, const ToolSet& tools, OutputParserOptions options = {});

}  // namespace m2::chat
