#include "chat/output_parser.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace m2::chat {

namespace {

constexpr std::string_view kThinkBegin = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kToolCallBegin = "<minimax:tool_call>";
constexpr std::string_view kToolCallEnd = "</minimax:tool_call>";
constexpr std::string_view kInvokeBegin = "<invoke name=\"";
constexpr std::string_view kInvokeEnd = "</invoke>";
constexpr std::string_view kParameterBegin = "<parameter name=\"";
constexpr std::string_view kParameterEnd = "</parameter>";

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// True when `s` is shorter than `tag` and could still grow into it.
bool IsProperPrefix(std::string_view s, std::string_view tag) {
  return s.size() < tag.size() && tag.substr(0, s.size()) == s;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// How many bytes at the end of `s` must wait for more input: the longest suffix that is a
// proper prefix of `tag`, and before it an unfinished UTF-8 sequence (a delta should not
// split a character; tags are ASCII, so the two never overlap).
size_t HeldTail(std::string_view s, std::string_view tag) {
  size_t held = 0;
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) {
      held = k;
      break;
    }
  }
  const size_t end = s.size() - held;
  // Look back at most 3 bytes for the lead byte of a sequence that does not fit.
  for (size_t back = 1; back <= 3 && back <= end; ++back) {
    const auto c = static_cast<uint8_t>(s[end - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if (need > back) held += back;
    break;
  }
  return held;
}

struct ParsedInvoke {
  enum class Status { kOk, kNeedMore, kError } status = Status::kError;
  size_t length = 0;  // bytes of `text` the invoke spans, for kOk
  std::string name;
  std::vector<std::pair<std::string, std::string>> parameters;  // raw values
};

// Parses one invoke at the start of `text`:
//   <invoke name="NAME">  ( <parameter name="KEY">VALUE</parameter> )*  </invoke>
// with any whitespace between the pieces. NAME and KEY end at `">` and may not hold '<',
// '>', '"' or a newline (that bounds how long a broken tag is waited for); VALUE runs to
// the first </parameter>. kNeedMore: `text` so far is a prefix of a valid invoke.
ParsedInvoke ParseInvoke(std::string_view text) {
  ParsedInvoke out;
  size_t pos = 0;
  using S = ParsedInvoke::Status;
  // 1: matched and consumed, 0: `text` ends inside `literal`, -1: mismatch.
  auto expect = [&](std::string_view literal) {
    const std::string_view rest = text.substr(pos);
    if (StartsWith(rest, literal)) {
      pos += literal.size();
      return 1;
    }
    return IsProperPrefix(rest, literal) ? 0 : -1;
  };
  auto read_attribute = [&](std::string& value) {
    for (size_t q = pos; q < text.size(); ++q) {
      const char c = text[q];
      if (c == '"') {
        if (q + 1 == text.size()) return 0;
        if (text[q + 1] != '>') return -1;
        value.assign(text.substr(pos, q - pos));
        pos = q + 2;
        return 1;
      }
      if (c == '<' || c == '>' || c == '\n') return -1;
    }
    return 0;
  };
  auto result = [&](int r) {
    out.status = r == 0 ? S::kNeedMore : S::kError;
    return out;
  };
  if (int r = expect(kInvokeBegin); r != 1) return result(r);
  if (int r = read_attribute(out.name); r != 1) return result(r);
  if (out.name.empty()) return result(-1);
  while (true) {
    while (pos < text.size() && IsSpace(text[pos])) ++pos;
    if (pos == text.size()) return result(0);
    if (expect(kInvokeEnd) == 1) {
      out.status = S::kOk;
      out.length = pos;
      return out;
    }
    const int r = expect(kParameterBegin);
    if (r == 0) return result(0);
    if (r == -1) return result(IsProperPrefix(text.substr(pos), kInvokeEnd) ? 0 : -1);
    std::string key;
    if (int a = read_attribute(key); a != 1) return result(a);
    const size_t end = text.find(kParameterEnd, pos);
    if (end == std::string_view::npos) return result(0);
    out.parameters.emplace_back(std::move(key), std::string(text.substr(pos, end - pos)));
    pos = end + kParameterEnd.size();
  }
}

}  // namespace

std::string OutputParser::Section::Push(std::string_view text) {
  std::string delta;
  for (char c : text) {
    if (c == '\n') {
      if (started) held_newlines += c;  // before any text: leading, dropped
      continue;
    }
    delta += held_newlines;
    held_newlines.clear();
    delta += c;
    started = true;
  }
  return delta;
}

OutputParser::OutputParser(ToolSet tools, OutputParserOptions options)
    : tools_(std::move(tools)),
      state_(options.starts_in_reasoning ? State::kReasoning : State::kContent),
      leading_think_allowed_(!options.starts_in_reasoning) {}

void OutputParser::Feed(std::string_view text, std::vector<ParserEvent>& events) {
  M2_CHECK(!finished_, "OutputParser::Feed after Finish");
  buf_.append(text);
  Process(/*final=*/false, events);
}

void OutputParser::Finish(std::vector<ParserEvent>& events) {
  M2_CHECK(!finished_, "OutputParser::Finish called twice");
  Process(/*final=*/true, events);
  finished_ = true;
}

void OutputParser::Process(bool final, std::vector<ParserEvent>& events) {
  // Each step returns true when it changed state (run the next one), false when it has
  // consumed all it can until more text comes.
  while (true) {
    bool more = false;
    switch (state_) {
      case State::kReasoning: more = StepReasoning(final, events); break;
      case State::kContent: more = StepContent(final, events); break;
      case State::kToolBlock: more = StepToolBlock(final, events); break;
    }
    if (!more) return;
  }
}

void OutputParser::EmitReasoning(std::string_view text, std::vector<ParserEvent>& events) {
  std::string delta = reasoning_.Push(text);
  if (!delta.empty()) events.push_back({ParserEvent::Kind::kReasoningDelta, std::move(delta), {}});
}

void OutputParser::EmitContent(std::string_view text, std::vector<ParserEvent>& events) {
  std::string delta = content_.Push(text);
  if (!delta.empty()) events.push_back({ParserEvent::Kind::kContentDelta, std::move(delta), {}});
}

bool OutputParser::StepReasoning(bool final, std::vector<ParserEvent>& events) {
  const size_t end = buf_.find(kThinkEnd);
  if (end != std::string::npos) {
    EmitReasoning(std::string_view(buf_).substr(0, end), events);
    reasoning_.held_newlines.clear();  // "\n</think>": format, not reasoning
    buf_.erase(0, end + kThinkEnd.size());
    state_ = State::kContent;
    return true;
  }
  const size_t held = final ? 0 : HeldTail(buf_, kThinkEnd);
  EmitReasoning(std::string_view(buf_).substr(0, buf_.size() - held), events);
  buf_.erase(0, buf_.size() - held);
  if (final) reasoning_.held_newlines.clear();  // truncated reasoning: trailing newlines dropped too
  return false;
}

bool OutputParser::StepContent(bool final, std::vector<ParserEvent>& events) {
  if (leading_think_allowed_) {
    // Without the "<think>\n" prefix in the prompt the model may open its reasoning itself,
    // as the first thing it writes. Leading newlines are dropped from content anyway.
    const size_t first = buf_.find_first_not_of('\n');
    if (first == std::string::npos) {
      buf_.clear();
      return false;
    }
    buf_.erase(0, first);
    if (StartsWith(buf_, kThinkBegin)) {
      buf_.erase(0, kThinkBegin.size());
      leading_think_allowed_ = false;
      state_ = State::kReasoning;
      return true;
    }
    if (!final && IsProperPrefix(buf_, kThinkBegin)) return false;
    leading_think_allowed_ = false;
  }
  const size_t begin = buf_.find(kToolCallBegin);
  if (begin != std::string::npos) {
    EmitContent(std::string_view(buf_).substr(0, begin), events);
    // The "\n" before <minimax:tool_call> is the template's separator; kept aside in case
    // the block fails and is returned as written.
    block_newlines_ = std::move(content_.held_newlines);
    content_.held_newlines.clear();
    block_raw_ = std::string(kToolCallBegin);
    block_unaccepted_.clear();
    block_space_.clear();
    block_calls_ = 0;
    buf_.erase(0, begin + kToolCallBegin.size());
    state_ = State::kToolBlock;
    return true;
  }
  const size_t held = final ? 0 : HeldTail(buf_, kToolCallBegin);
  EmitContent(std::string_view(buf_).substr(0, buf_.size() - held), events);
  buf_.erase(0, buf_.size() - held);
  if (final) content_.held_newlines.clear();
  return false;
}

bool OutputParser::StepToolBlock(bool final, std::vector<ParserEvent>& events) {
  size_t space = 0;
  while (space < buf_.size() && IsSpace(buf_[space])) ++space;
  block_space_.append(buf_, 0, space);
  block_raw_.append(buf_, 0, space);
  buf_.erase(0, space);
  if (buf_.empty()) {
    if (!final) return false;
    FailToolBlock(events);  // truncated
    return true;
  }
  if (StartsWith(buf_, kToolCallEnd)) {
    buf_.erase(0, kToolCallEnd.size());
    block_raw_ += kToolCallEnd;
    // A block that produced no call is returned whole; otherwise only what was not a call.
    EmitContent(block_calls_ == 0 ? block_newlines_ + block_raw_ : block_unaccepted_, events);
    state_ = State::kContent;
    return true;
  }
  if (StartsWith(buf_, kInvokeBegin) || IsProperPrefix(buf_, kInvokeBegin)) {
    ParsedInvoke invoke = ParseInvoke(buf_);
    if (invoke.status == ParsedInvoke::Status::kNeedMore && !final) return false;
    if (invoke.status != ParsedInvoke::Status::kOk) {
      FailToolBlock(events);
      return true;
    }
    const std::string_view raw = std::string_view(buf_).substr(0, invoke.length);
    if (tools_.empty() || tools_.Has(invoke.name)) {
      ParserEvent event{ParserEvent::Kind::kToolCall, {}, {}};
      event.tool_call.name = invoke.name;
      for (const auto& [key, value] : invoke.parameters) {
        event.tool_call.arguments[key] = ConvertParameterValue(value, tools_.ParameterSchema(invoke.name, key));
      }
      events.push_back(std::move(event));
      ++block_calls_;
    } else {
      block_unaccepted_ += block_space_;  // an unknown tool: its invoke stays text
      block_unaccepted_ += raw;
    }
    block_space_.clear();
    block_raw_ += raw;
    buf_.erase(0, invoke.length);
    return true;
  }
  if (!final && IsProperPrefix(buf_, kToolCallEnd)) return false;
  FailToolBlock(events);  // stray text: the block does not parse from here
  return true;
}

void OutputParser::FailToolBlock(std::vector<ParserEvent>& events) {
  // What the block consumed and did not turn into calls becomes content; the unparsed
  // rest (still in buf_) is read again as content.
  EmitContent(block_calls_ == 0 ? block_newlines_ + block_raw_ : block_unaccepted_ + block_space_, events);
  state_ = State::kContent;
}

void ParsedOutput::Add(const ParserEvent& event) {
  switch (event.kind) {
    case ParserEvent::Kind::kReasoningDelta: reasoning_content += event.text; break;
    case ParserEvent::Kind::kContentDelta: content += event.text; break;
    case ParserEvent::Kind::kToolCall: tool_calls.push_back(event.tool_call); break;
  }
}

Json ParsedOutput::ToJson() const {
  Json calls = Json::array();
  for (const ToolCall& call : tool_calls) calls.push_back(Json{{"name", call.name}, {"arguments", call.arguments}});
  return Json{{"reasoning_content", reasoning_content}, {"content", content}, {"tool_calls", std::move(calls)}};
}

ParsedOutput ParseModelOutput(std::string_view text, const ToolSet& tools, OutputParserOptions options) {
  OutputParser parser(tools, options);
  std::vector<ParserEvent> events;
  parser.Feed(text, events);
  parser.Finish(events);
  ParsedOutput out;
  for (const ParserEvent& e : events) out.Add(e);
  return out;
}

}  // namespace m2::chat
