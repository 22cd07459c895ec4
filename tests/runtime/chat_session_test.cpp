// Chat sessions: with a scripted generator (known output text) for the parsing, history
// and tool-call loop; with the golden tiny model for the real path and prefix reuse.
#include "runtime/chat_session.h"

#include <gtest/gtest.h>

#include <deque>

#include "test_model.h"

namespace m2::runtime {
namespace {

using chat::Json;

// Replies with the next scripted text, streamed in small pieces, and records each prompt.
class ScriptedGenerator : public TextGenerator {
 public:
  ScriptedGenerator(const text::Tokenizer& tok, std::deque<std::string> replies)
      : tok_(tok), replies_(std::move(replies)) {}
  const text::Tokenizer& tokenizer() const override { return tok_; }
  Result<GenerationResult> Generate(std::span<const int32_t> prompt, const TextCallback& on_text) override {
    prompts.push_back(tok_.Decode(prompt));
    if (replies_.empty()) return Error("script ran out");
    GenerationResult r;
    r.text = replies_.front();
    replies_.pop_front();
    for (size_t i = 0; i < r.text.size(); i += 3) on_text(std::string_view(r.text).substr(i, 3));
    r.stop_reason = StopReason::kEos;
    return r;
  }
  std::vector<std::string> prompts;

 private:
  const text::Tokenizer& tok_;
  std::deque<std::string> replies_;
};

const text::Tokenizer& SmallTokenizer() {
  static std::unique_ptr<text::Tokenizer> tok = [] {
    auto t = text::Tokenizer::FromJson(m2::testing::SmallTokenizerJson(), "small");
    EXPECT_TRUE(t.ok()) << t.status().message();
    return std::move(*t);
  }();
  return *tok;
}

const Json kWeatherTool = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather in a city", "parameters": {"type": "object", "properties": {
  "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}])");

TEST(ChatSession, SplitsReasoningFromContentAndKeepsItInTheHistory) {
  ScriptedGenerator gen(SmallTokenizer(), {"Let me think.\nSimple.\n</think>\n\nHello there!",
                                           "Again thinking\n</think>\n\nSecond answer."});
  auto session = ChatSession::Create(gen, nullptr);
  ASSERT_TRUE(session.ok()) << session.status().message();
  ASSERT_TRUE(session->AddMessage({{"role", "system"}, {"content", "Be brief."}}).ok());
  std::string reasoning, content;
  ChatCallbacks cb;
  cb.on_reasoning = [&](std::string_view t) { reasoning += t; };
  cb.on_content = [&](std::string_view t) { content += t; };
  auto r = session->Send("Hi", cb);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(reasoning, "Let me think.\nSimple.");
  EXPECT_EQ(content, "Hello there!");
  EXPECT_EQ(gen.prompts[0], "]~!b[]~b]system\nBe brief.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<think>\n");

  const Json& m = session->messages();
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Hello there!");
  EXPECT_EQ(m[2]["reasoning_content"], "Let me think.\nSimple.");
  EXPECT_FALSE(m[2].contains("tool_calls"));

  // The next turn renders the first reply as the format wants: its reasoning comes before
  // the last user message, so the template leaves it out.
  ASSERT_TRUE(session->Send("More?", cb).ok());
  EXPECT_EQ(gen.prompts[1],
            "]~!b[]~b]system\nBe brief.[e~[\n]~b]user\nHi[e~[\n]~b]ai\nHello there![e~[\n]~b]user\nMore?[e~[\n"
            "]~b]ai\n<think>\n");
  EXPECT_EQ(session->messages()[4]["reasoning_content"], "Again thinking");
  // Rendered without a generation prompt, the last reply keeps its reasoning.
  chat::ChatTemplateOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  auto text = chat::RenderChatTemplate(session->messages(), nullptr, no_prompt);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("]~b]ai\n<think>\nAgain thinking\n</think>\n\nSecond answer.[e~[\n"), std::string::npos) << *text;
}

TEST(ChatSession, RunsToolsAndContinuesWithTheirResults) {
  ScriptedGenerator gen(SmallTokenizer(),
                        {"Need weather.\n</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
                         "<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">2</parameter>\n"
                         "</invoke>\n</minimax:tool_call>",
                         "Got it.\n</think>\n\nSunny in Paris."});
  auto session = ChatSession::Create(gen, kWeatherTool);
  ASSERT_TRUE(session.ok()) << session.status().message();
  std::vector<chat::ToolCall> seen_calls;
  std::vector<std::string> results;
  ChatCallbacks cb;
  cb.on_tool_call = [&](const chat::ToolCall& c) { seen_calls.push_back(c); };
  cb.on_tool_result = [&](const chat::ToolCall&, const std::string& r, bool ok) { results.push_back(r); };
  ToolExecutor exec = [](const chat::ToolCall& c) -> Result<std::string> {
    EXPECT_EQ(c.name, "get_weather");
    return "{\"forecast\": \"sun\", \"days\": " + c.arguments["days"].dump() + "}";
  };
  auto r = session->Send("Weather in Paris?", cb, exec);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tool_rounds, 1);
  EXPECT_EQ(r->replies.size(), 2u);
  ASSERT_EQ(seen_calls.size(), 1u);
  EXPECT_EQ(seen_calls[0].arguments, Json::parse(R"({"city": "Paris", "days": 2})"));  // typed by the schema
  EXPECT_EQ(results, std::vector<std::string>{"{\"forecast\": \"sun\", \"days\": 2}"});

  const Json& m = session->messages();
  ASSERT_EQ(m.size(), 4u);  // user, assistant (call), tool, assistant
  EXPECT_EQ(m[1]["reasoning_content"], "Need weather.");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(m[2]["tool_call_id"], m[1]["tool_calls"][0]["id"]);
  EXPECT_EQ(m[3]["content"], "Sunny in Paris.");
  // The continuation prompt: the call's reasoning stays (interleaved thinking - no user
  // message after it) and the tool result follows.
  ASSERT_EQ(gen.prompts.size(), 2u);
  const std::string& p = gen.prompts[1];
  EXPECT_NE(p.find("]~b]ai\n<think>\nNeed weather.\n</think>\n\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
                   "<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">2</parameter>\n</invoke>\n"
                   "</minimax:tool_call>[e~[\n]~b]tool\n<response>{\"forecast\": \"sun\", \"days\": 2}</response>[e~[\n"
                   "]~b]ai\n<think>\n"),
            std::string::npos)
      << p;
  // The first prompt, generation prompt included, is a prefix of the second: prefix reuse
  // prefills only the reply and the tool result.
  EXPECT_EQ(p.rfind(gen.prompts[0], 0), 0u);
}

TEST(ChatSession, ToolErrorsGoBackToTheModelAndRoundsAreBounded) {
  const std::string call =
      "x\n</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">X</parameter>\n"
      "</invoke>\n</minimax:tool_call>";
  ScriptedGenerator gen(SmallTokenizer(), {call, call, call, "never reached"});
  ChatSessionOptions opts;
  opts.max_tool_rounds = 2;
  auto session = ChatSession::Create(gen, kWeatherTool, opts);
  ASSERT_TRUE(session.ok());
  int runs = 0;
  ToolExecutor exec = [&](const chat::ToolCall&) -> Result<std::string> {
    ++runs;
    return Error("service down");
  };
  auto r = session->Send("Weather?", {}, exec);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(r->replies.size(), 3u);
  EXPECT_EQ(session->messages()[2]["content"], "error: service down");
  // The last reply's calls are left pending; Continue runs them first.
  EXPECT_EQ(session->messages().back()["role"], "assistant");
  ASSERT_TRUE(session->messages().back().contains("tool_calls"));
}

TEST(ChatSession, BadToolsAndMessagesAreErrors) {
  ScriptedGenerator gen(SmallTokenizer(), {});
  auto bad = ChatSession::Create(gen, Json::parse(R"([{"type": "function"}])"));
  EXPECT_FALSE(bad.ok());
  auto notarray = ChatSession::Create(gen, Json::parse(R"({"a": 1})"));
  ASSERT_FALSE(notarray.ok());
  EXPECT_NE(notarray.status().message().find("expected an array"), std::string::npos);
  auto s = ChatSession::Create(gen, nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->AddMessage({{"role", "tool"}, {"content", "orphan"}}).ok());
  EXPECT_TRUE(s->messages().empty());
  // A generation error takes the user message back out.
  EXPECT_FALSE(s->Send("hi", {}).ok());
  EXPECT_TRUE(s->messages().empty());
}

TEST(ChatSession, RealModelTwoTurnsReuseTheCache) {
  const std::string dir = m2::testing::MakeTestModel("chat_real");
  auto model = Model::Load(dir, {.progress = false});
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto tok = text::Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok());
  Generator generator(**model, tok->get());
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 3;
  Sampler sampler(p);
  GenerateOptions o;
  o.max_new_tokens = 12;
  ModelTextGenerator backend(generator, sampler, o);
  // "[e~[" ends a turn.
  EXPECT_EQ(backend.options().eos_ids, std::vector<int32_t>{*(*tok)->TokenId("[e~[")});
  auto session = ChatSession::Create(backend, nullptr);
  ASSERT_TRUE(session.ok());
  std::string raw;
  ChatCallbacks cb;
  std::string reasoning, content;
  cb.on_reasoning = [&](std::string_view t) { reasoning += t; };
  cb.on_content = [&](std::string_view t) { content += t; };
  auto t1 = session->Send("Hello", cb);
  ASSERT_TRUE(t1.ok()) << t1.status().message();
  const Json& a1 = session->messages()[1];
  EXPECT_EQ(a1["reasoning_content"], reasoning);
  EXPECT_EQ(a1["content"], content);
  EXPECT_GT(reasoning.size() + content.size(), 0u);
  auto t2 = session->Send("And then?", cb);
  ASSERT_TRUE(t2.ok()) << t2.status().message();
  ASSERT_EQ(t2->replies.size(), 1u);
  // At least the system block and the first user turn came from the cache.
  const auto sys_user = (*tok)->Encode("]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nHello[e~[\n");
  EXPECT_GE(t2->replies[0].reused_tokens, static_cast<int64_t>(sys_user.size()));
  EXPECT_LT(t2->replies[0].prefill_tokens, t2->replies[0].prompt_tokens);
  EXPECT_EQ(session->messages().size(), 4u);
  EXPECT_TRUE(session->messages()[3]["reasoning_content"].is_string());
}

}  // namespace
}  // namespace m2::runtime
