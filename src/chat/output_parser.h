// Streaming parser of what MiniMax-M2 writes: reasoning, content and tool calls.
//
// After the generation prompt "]~b]ai\n<think>\n" the model writes
//   {reasoning}\n</think>\n\n{content}\n<minimax:tool_call>\n<invoke name="f">\n
//   <parameter name="k">v</parameter>\n...</invoke>\n...</minimax:tool_call>
// (the inverse of an assistant turn in chat_template.h). The parser is fed decoded text in
// chunks of any size and emits deltas as soon as they are certain, holding back only bytes
// that could still begin a tag ("</think>", "<minimax:tool_call>", "<think>"), an unfinished
// UTF-8 sequence, and a trailing run of newlines (the format puts newlines around tags; they
// are emitted once text follows them). Each tool call is emitted at its </invoke> (for one
// missing it, see below); the block's other text at its end.
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
//   - where a block stops parsing (bad XML, or the output ends in it), the block so far is
//     handled as above and the rest of the text is read again as content (it may open a
//     new block).
// A parameter value runs to the first </parameter> (or to a parameter opened before it,
// below), so values may contain "<", XML-like text, "</invoke>" or "</minimax:tool_call>";
// values are typed by the tool's schema (tool_schema.h).
//
// Malformed calls: what a careful reader recovers, and what it never runs.
//   - The block opener must be followed (whitespace aside) by <invoke name="...">; text
//     there means "<minimax:tool_call>" was written as text: the block stops parsing.
//   - Names: spaces and tabs around a tool or parameter name are dropped (name=" f " is f).
//     A name holding '<', '>', '"' or a newline, longer than 1 KiB, or an empty tool name,
//     is bad XML.
//   - Stray text between parameters, or between or after invokes, is content (nothing is
//     lost); the block goes on parsing after it. Text starting like a tag of the format
//     ("<invoke", "<parameter") that does not parse is bad XML, not stray text: a call
//     whose parameter tag is broken must not run without that parameter.
//   - A <parameter name="K"> inside a value, K being another parameter the tool's schema
//     declares, opens K: the previous value ends there (its trailing newlines dropped), as
//     if its </parameter> were missing. Other parameter tags in a value are value text, and
//     without a schema for the tool values run to </parameter> only.
//   - An invoke missing </invoke> ends where </minimax:tool_call> or the next
//     <invoke name=" begins (after its last parameter). Such a call runs only once the block
//     closes with </minimax:tool_call>; later calls of the block wait for it, in order.
//   - Truncated calls never run: if the output ends inside a block before an invoke's
//     </invoke> and before </minimax:tool_call>, that invoke is content (calls completed
//     before it stand). A value whose </parameter> never comes is truncated too.
//   - Calls drafted in reasoning never run: tool-call XML before </think> is reasoning.
//     A <think> ... </think> span later in the content is drafting as well: it stays
//     content, verbatim, and blocks inside it are text (up to the end of the output when
//     no </think> comes).
// (vLLM's and SGLang's MiniMax-M2 parsers, for comparison: both read calls only after
// </think>, trim names, and drop stray text inside a block. Their full-text paths need the
// block closed; vLLM's also drops an invoke missing </invoke>, SGLang's takes invokes and
// parameters missing their closing tags. Both streaming paths send a call's name and
// arguments before its </invoke>, so a client sees truncated calls.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/py_format.h"
#include "chat/tool_schema.h"

namespace m2::chat {

struct ToolCall {
  std::string name;
  // Parameter name -> typed value, in the order written. Only values nlohmann can print
  // (an integer beyond 64 bits is the string of its digits, tool_schema.h), never inf.
  Json arguments = Json::object();
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
  enum class State { kReasoning, kContent, kContentThink, kToolBlock };
  // Where in a tool-call block the parser is.
  enum class BlockState { kStart, kBetweenInvokes, kInvokeName, kInvokeBody, kParameterName, kValue };

  // One of the two text streams: drops leading newlines and holds back a trailing run of
  // newlines until non-newline text follows.
  struct Section {
    bool started = false;
    std::string held_newlines;
    std::string Push(std::string_view text);
  };

  // The invoke being read.
  struct Invoke {
    std::string space_before;  // block whitespace before it
    std::string raw;           // its text consumed so far, from "<invoke name=\""
    std::string name;
    bool accepted = false;     // a tool the request offers (or any, without tools)
    std::vector<std::pair<std::string, std::string>> parameters;  // raw values
    std::string key, value;    // the parameter being read
    std::string space;         // whitespace since its last tag
    std::string stray;         // stray text in it, each piece with the whitespace before it
  };
  // A call that waits for its block to close (after an invoke missing </invoke>).
  struct PendingCall {
    ToolCall call;
    bool closed;           // had its </invoke>
    std::string text;      // its invoke as written, whitespace before it included
    size_t content_at;     // where its stray text sits in block_content_
    size_t stray_size;
  };

  void Process(bool final, std::vector<ParserEvent>& events);
  bool StepReasoning(bool final, std::vector<ParserEvent>& events);
  bool StepContent(bool final, std::vector<ParserEvent>& events);
  bool StepContentThink(bool final, std::vector<ParserEvent>& events);
  bool StepToolBlock(bool final, std::vector<ParserEvent>& events);
  bool StepBlockLevel(bool final, std::vector<ParserEvent>& events);
  bool StepName(bool final, std::vector<ParserEvent>& events);
  bool StepInvokeBody(bool final, std::vector<ParserEvent>& events);
  bool StepValue(bool final, std::vector<ParserEvent>& events);
  void ConsumeInvokeText(size_t n);
  void FinishInvoke(bool closed, std::vector<ParserEvent>& events);
  void CloseToolBlock(std::vector<ParserEvent>& events);
  void FailToolBlock(std::vector<ParserEvent>& events);
  void EmitCall(ToolCall call, std::vector<ParserEvent>& events);
  void EmitReasoning(std::string_view text, std::vector<ParserEvent>& events);
  void EmitContent(std::string_view text, std::vector<ParserEvent>& events);

  ToolSet tools_;
  State state_;
  std::string buf_;                 // fed text not consumed yet
  bool leading_think_allowed_;      // starts_in_reasoning == false, no content seen yet
  bool finished_ = false;
  Section reasoning_, content_;
  // The tool-call block being read.
  BlockState block_state_ = BlockState::kStart;
  std::string block_newlines_;      // newlines held before its opening tag
  std::string block_raw_;           // its text consumed so far, opening tag included
  std::string block_content_;       // consumed text that became no tool call
  std::string block_space_;         // whitespace consumed since the last invoke
  int block_calls_ = 0;             // tool calls it emitted
  std::vector<PendingCall> pending_;
  Invoke invoke_;
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
