#include "chat/output_parser.h"

#include <algorithm>
#include <initializer_list>
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
// A tag that starts so but does not parse is broken XML, not stray text.
constexpr std::string_view kInvokeTagStart = "<invoke";
constexpr std::string_view kParameterTagStart = "<parameter";
// A tool or parameter name longer than this is broken XML (so a runaway one is not waited for).
constexpr size_t kMaxNameBytes = 1024;

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// True when `s` is shorter than `tag` and could still grow into it.
bool IsProperPrefix(std::string_view s, std::string_view tag) {
  return s.size() < tag.size() && tag.substr(0, s.size()) == s;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// 1: `s` starts with `tag`; 0: `s` is shorter and could still grow into it; -1: neither.
int MatchTag(std::string_view s, std::string_view tag) {
  if (StartsWith(s, tag)) return 1;
  return IsProperPrefix(s, tag) ? 0 : -1;
}

// How many bytes at the end of `s` must wait for more input: the longest suffix that is a
// proper prefix of one of `tags`, and before it an unfinished UTF-8 sequence (a delta should
// not split a character; tags are ASCII, so the two never overlap).
size_t HeldTail(std::string_view s, std::initializer_list<std::string_view> tags) {
  size_t held = 0;
  for (std::string_view tag : tags) {
    for (size_t k = std::min(s.size(), tag.size() - 1); k > held; --k) {
      if (s.substr(s.size() - k) == tag.substr(0, k)) {
        held = k;
        break;
      }
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

// A tool or parameter name without the spaces and tabs around it.
std::string TrimName(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

// The length of stray text at the start of `s` (which starts with a non-space): up to the
// next '<', where a tag may begin, without the whitespace before it (whitespace is read on
// its own, so the pieces are the same however the text is split).
size_t StrayLength(std::string_view s) {
  size_t end = s.find('<', 1);
  if (end == std::string_view::npos) end = s.size();
  while (end > 1 && IsSpace(s[end - 1])) --end;
  return end;
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
  // Each step returns true when it changed state or consumed text (run the next one), false
  // when it has consumed all it can until more text comes.
  while (true) {
    bool more = false;
    switch (state_) {
      case State::kReasoning: more = StepReasoning(final, events); break;
      case State::kContent: more = StepContent(final, events); break;
      case State::kContentThink: more = StepContentThink(final, events); break;
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

void OutputParser::EmitCall(ToolCall call, std::vector<ParserEvent>& events) {
  ParserEvent event{ParserEvent::Kind::kToolCall, {}, {}};
  event.tool_call = std::move(call);
  events.push_back(std::move(event));
  ++block_calls_;
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
  const size_t held = final ? 0 : HeldTail(buf_, {kThinkEnd});
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
  const size_t think = buf_.find(kThinkBegin);
  // A block opener before the <think> ends before it (neither tag holds the other's '<').
  const size_t begin = std::string_view(buf_).substr(0, think).find(kToolCallBegin);
  if (think != std::string::npos && begin == std::string::npos) {
    // A later <think> span: drafting, content as written (see the header).
    EmitContent(std::string_view(buf_).substr(0, think + kThinkBegin.size()), events);
    buf_.erase(0, think + kThinkBegin.size());
    state_ = State::kContentThink;
    return true;
  }
  if (begin != std::string::npos) {
    EmitContent(std::string_view(buf_).substr(0, begin), events);
    // The "\n" before <minimax:tool_call> is the template's separator; kept aside in case
    // the block fails and is returned as written.
    block_newlines_ = std::move(content_.held_newlines);
    content_.held_newlines.clear();
    block_state_ = BlockState::kStart;
    block_raw_ = std::string(kToolCallBegin);
    block_content_.clear();
    block_space_.clear();
    block_calls_ = 0;
    pending_.clear();
    buf_.erase(0, begin + kToolCallBegin.size());
    state_ = State::kToolBlock;
    return true;
  }
  const size_t held = final ? 0 : HeldTail(buf_, {kToolCallBegin, kThinkBegin});
  EmitContent(std::string_view(buf_).substr(0, buf_.size() - held), events);
  buf_.erase(0, buf_.size() - held);
  if (final) content_.held_newlines.clear();
  return false;
}

bool OutputParser::StepContentThink(bool final, std::vector<ParserEvent>& events) {
  const size_t end = buf_.find(kThinkEnd);
  if (end != std::string::npos) {
    EmitContent(std::string_view(buf_).substr(0, end + kThinkEnd.size()), events);
    buf_.erase(0, end + kThinkEnd.size());
    state_ = State::kContent;
    return true;
  }
  const size_t held = final ? 0 : HeldTail(buf_, {kThinkEnd});
  EmitContent(std::string_view(buf_).substr(0, buf_.size() - held), events);
  buf_.erase(0, buf_.size() - held);
  if (final) content_.held_newlines.clear();
  return false;
}

bool OutputParser::StepToolBlock(bool final, std::vector<ParserEvent>& events) {
  switch (block_state_) {
    case BlockState::kStart:
    case BlockState::kBetweenInvokes: return StepBlockLevel(final, events);
    case BlockState::kInvokeName:
    case BlockState::kParameterName: return StepName(final, events);
    case BlockState::kInvokeBody: return StepInvokeBody(final, events);
    case BlockState::kValue: return StepValue(final, events);
  }
  return false;
}

// Between the opener and the first invoke, or after an invoke.
bool OutputParser::StepBlockLevel(bool final, std::vector<ParserEvent>& events) {
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
  const int invoke = MatchTag(buf_, kInvokeBegin);
  if (invoke == 1) {
    invoke_ = Invoke{};
    invoke_.space_before = std::move(block_space_);
    block_space_.clear();
    block_state_ = BlockState::kInvokeName;
    ConsumeInvokeText(kInvokeBegin.size());
    return true;
  }
  const bool after_invoke = block_state_ == BlockState::kBetweenInvokes;
  const int close = after_invoke ? MatchTag(buf_, kToolCallEnd) : -1;
  if (close == 1) {
    CloseToolBlock(events);
    return true;
  }
  if (!final && (invoke == 0 || close == 0 || MatchTag(buf_, kParameterTagStart) == 0)) return false;
  if (!after_invoke || StartsWith(buf_, kInvokeTagStart) || StartsWith(buf_, kParameterTagStart)) {
    FailToolBlock(events);  // no invoke after the opener (it was text), or a broken tag
    return true;
  }
  // Stray text after an invoke: content.
  const size_t n = StrayLength(buf_);
  block_content_ += block_space_;
  block_space_.clear();
  block_content_.append(buf_, 0, n);
  block_raw_.append(buf_, 0, n);
  buf_.erase(0, n);
  return true;
}

void OutputParser::ConsumeInvokeText(size_t n) {
  invoke_.raw.append(buf_, 0, n);
  block_raw_.append(buf_, 0, n);
  buf_.erase(0, n);
}

// NAME"> of <invoke name="NAME"> or <parameter name="NAME">.
bool OutputParser::StepName(bool final, std::vector<ParserEvent>& events) {
  const size_t quote = buf_.find_first_of("\"<>\n");
  if (quote == std::string::npos || (buf_[quote] == '"' && quote + 1 == buf_.size())) {
    if (!final && (quote == std::string::npos ? buf_.size() : quote) <= kMaxNameBytes) return false;
    FailToolBlock(events);  // truncated, or a runaway name
    return true;
  }
  std::string name = TrimName(std::string_view(buf_).substr(0, quote));
  const bool invoke = block_state_ == BlockState::kInvokeName;
  if (buf_[quote] != '"' || buf_[quote + 1] != '>' || quote > kMaxNameBytes || (invoke && name.empty())) {
    FailToolBlock(events);  // bad XML
    return true;
  }
  ConsumeInvokeText(quote + 2);
  if (invoke) {
    invoke_.accepted = tools_.empty() || tools_.Has(name);
    invoke_.name = std::move(name);
    block_state_ = BlockState::kInvokeBody;
  } else {
    invoke_.key = std::move(name);
    invoke_.value.clear();
    block_state_ = BlockState::kValue;
  }
  return true;
}

// Inside an invoke, between its tags.
bool OutputParser::StepInvokeBody(bool final, std::vector<ParserEvent>& events) {
  size_t space = 0;
  while (space < buf_.size() && IsSpace(buf_[space])) ++space;
  invoke_.space.append(buf_, 0, space);
  ConsumeInvokeText(space);
  if (buf_.empty()) {
    if (!final) return false;
    FailToolBlock(events);  // truncated
    return true;
  }
  if (MatchTag(buf_, kInvokeEnd) == 1) {
    ConsumeInvokeText(kInvokeEnd.size());
    FinishInvoke(/*closed=*/true, events);
    block_state_ = BlockState::kBetweenInvokes;
    return true;
  }
  if (MatchTag(buf_, kParameterBegin) == 1) {
    invoke_.space.clear();
    ConsumeInvokeText(kParameterBegin.size());
    block_state_ = BlockState::kParameterName;
    return true;
  }
  // </invoke> missing: the block's end, or the next invoke, ends this one.
  if (MatchTag(buf_, kToolCallEnd) == 1) {
    FinishInvoke(/*closed=*/false, events);
    CloseToolBlock(events);
    return true;
  }
  if (MatchTag(buf_, kInvokeBegin) == 1) {
    FinishInvoke(/*closed=*/false, events);
    block_state_ = BlockState::kBetweenInvokes;
    return true;
  }
  if (!final) {
    for (std::string_view tag : {kInvokeEnd, kParameterBegin, kToolCallEnd, kInvokeBegin}) {
      if (MatchTag(buf_, tag) == 0) return false;
    }
  }
  if (StartsWith(buf_, kInvokeTagStart) || StartsWith(buf_, kParameterTagStart)) {
    FailToolBlock(events);  // a broken tag
    return true;
  }
  // Stray text between parameters: content, if the invoke becomes a call.
  const size_t n = StrayLength(buf_);
  invoke_.stray += invoke_.space;
  invoke_.space.clear();
  invoke_.stray.append(buf_, 0, n);
  ConsumeInvokeText(n);
  return true;
}

// A parameter value: up to </parameter>, or to a <parameter name="K"> opening another
// declared parameter. Consumes what it has read, so each byte is scanned about once.
bool OutputParser::StepValue(bool final, std::vector<ParserEvent>& events) {
  size_t from = 0;
  while (true) {
    const size_t lt = buf_.find('<', from);
    if (lt == std::string::npos) break;
    const std::string_view rest = std::string_view(buf_).substr(lt);
    const int end = MatchTag(rest, kParameterEnd);
    if (end == 1) {
      invoke_.value.append(buf_, 0, lt);
      ConsumeInvokeText(lt + kParameterEnd.size());
      invoke_.parameters.emplace_back(std::move(invoke_.key), std::move(invoke_.value));
      block_state_ = BlockState::kInvokeBody;
      return true;
    }
    const int open = MatchTag(rest, kParameterBegin);
    bool wait = !final && (end == 0 || open == 0);
    if (open == 1) {
      const size_t name = lt + kParameterBegin.size();
      const size_t quote = buf_.find_first_of("\"<>\n", name);
      if (quote == std::string::npos || (buf_[quote] == '"' && quote + 1 == buf_.size())) {
        wait = !final && (quote == std::string::npos ? buf_.size() : quote) - name <= kMaxNameBytes;
      } else if (buf_[quote] == '"' && buf_[quote + 1] == '>' && quote - name <= kMaxNameBytes) {
        const std::string key = TrimName(std::string_view(buf_).substr(name, quote - name));
        if (key != invoke_.key && tools_.ParameterSchema(invoke_.name, key) != nullptr) {
          // The previous parameter was not closed: its value ends here.
          invoke_.value.append(buf_, 0, lt);
          ConsumeInvokeText(lt);
          while (!invoke_.value.empty() && (invoke_.value.back() == '\n' || invoke_.value.back() == '\r')) {
            invoke_.value.pop_back();
          }
          invoke_.parameters.emplace_back(std::move(invoke_.key), std::move(invoke_.value));
          block_state_ = BlockState::kInvokeBody;
          return true;
        }
      }
    }
    if (wait) {  // a tag may begin at `lt`: keep it, take the value before it
      invoke_.value.append(buf_, 0, lt);
      ConsumeInvokeText(lt);
      return false;
    }
    from = lt + 1;
  }
  invoke_.value += buf_;
  ConsumeInvokeText(buf_.size());
  if (!final) return false;
  FailToolBlock(events);  // the value never ends: truncated
  return true;
}

void OutputParser::FinishInvoke(bool closed, std::vector<ParserEvent>& events) {
  if (!invoke_.accepted) {
    block_content_ += invoke_.space_before;  // an unknown tool: its invoke stays text
    block_content_ += invoke_.raw;
    return;
  }
  ToolCall call;
  call.name = invoke_.name;
  for (const auto& [key, value] : invoke_.parameters) {
    call.arguments[key] = ConvertParameterValue(value, tools_.ParameterSchema(invoke_.name, key));
  }
  const size_t content_at = block_content_.size();
  block_content_ += invoke_.stray;
  if (closed && pending_.empty()) {
    EmitCall(std::move(call), events);
  } else {
    pending_.push_back({std::move(call), closed, invoke_.space_before + invoke_.raw, content_at, invoke_.stray.size()});
  }
}

void OutputParser::CloseToolBlock(std::vector<ParserEvent>& events) {
  block_raw_ += kToolCallEnd;
  buf_.erase(0, kToolCallEnd.size());
  for (PendingCall& p : pending_) EmitCall(std::move(p.call), events);
  pending_.clear();
  // A block that produced no call is returned whole; otherwise only what was not a call.
  EmitContent(block_calls_ == 0 ? block_newlines_ + block_raw_ : block_content_, events);
  state_ = State::kContent;
}

void OutputParser::FailToolBlock(std::vector<ParserEvent>& events) {
  // Waiting calls that had their </invoke> run; one that did not is text, in its place.
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
    if (!it->closed) block_content_.replace(it->content_at, it->stray_size, it->text);
  }
  for (PendingCall& p : pending_) {
    if (p.closed) EmitCall(std::move(p.call), events);
  }
  pending_.clear();
  // What the block consumed and did not turn into calls becomes content, with the invoke
  // being read; the unparsed rest (still in buf_) is read again as content.
  const bool in_invoke = block_state_ != BlockState::kStart && block_state_ != BlockState::kBetweenInvokes;
  if (block_calls_ == 0) {
    EmitContent(block_newlines_ + block_raw_, events);
  } else {
    EmitContent(block_content_ + (in_invoke ? invoke_.space_before + invoke_.raw : block_space_), events);
  }
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
