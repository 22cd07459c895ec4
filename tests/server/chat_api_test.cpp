// The request and response layers of m2 serve without HTTP: the rendered prompt of a
// multi-turn tool loop is the same through the OpenAI and the Anthropic API, whatever
// form the earlier reasoning comes back in; bad requests are errors naming the field;
// replies become the APIs' objects and stream events in order.
#include <gtest/gtest.h>

#include "server/chat_api.h"
#include "server/reply.h"

namespace m2::server {
namespace {

using chat::Json;

Json J(const char* s) {
  auto j = chat::ParseOrderedJson(s, "test");
  EXPECT_TRUE(j.ok()) << s;
  return j.ok() ? *j : Json();
}

runtime::SamplingParams Defaults() {
  runtime::SamplingParams p;
  p.temperature = 0;
  return p;
}

std::string Render(const Result<ChatJob>& job) {
  EXPECT_TRUE(job.ok()) << job.status().message();
  if (!job.ok()) return "";
  auto p = RenderJobPrompt(*job, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : "";
}

const char* kToolsOpenAI =
    R"([{"type":"function","function":{"name":"multiply","description":"a*b","parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}}])";

// A tool loop: user, assistant (reasoning + call), tool result. The template shows the
// assistant's reasoning because no user message follows it.
TEST(ChatApi, ToolLoopRendersTheSameThroughBothApisAndEveryReasoningForm) {
  const std::string tools = kToolsOpenAI;
  const std::string openai_rc = R"({"model":"m","tools":)" + tools + R"(,"messages":[
    {"role":"system","content":"Be brief."},
    {"role":"user","content":"What is 6 times 7?"},
    {"role":"assistant","content":null,"reasoning_content":"Multiply them.","tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"multiply","arguments":"{\"a\": 6, \"b\": 7}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"42"}]})";
  const std::string openai_inline = R"({"model":"m","tools":)" + tools + R"(,"messages":[
    {"role":"developer","content":[{"type":"text","text":"Be brief."}]},
    {"role":"user","content":[{"type":"text","text":"What is 6 "},{"type":"text","text":"times 7?"}]},
    {"role":"assistant","content":"<think>\nMultiply them.\n</think>\n\n","tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"multiply","arguments":"{\"a\": 6, \"b\": 7}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"42"}]}]})";
  const std::string anthropic = R"({"model":"m","max_tokens":100,"system":"Be brief.",
    "tools":[{"name":"multiply","description":"a*b","input_schema":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}],
    "messages":[
    {"role":"user","content":"What is 6 times 7?"},
    {"role":"assistant","content":[{"type":"thinking","thinking":"Multiply them.","signature":"x"},
      {"type":"tool_use","id":"toolu_1","name":"multiply","input":{"a":6,"b":7}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"}]}]})";
  const std::string a = Render(ParseOpenAIChat(J(openai_rc.c_str()), Defaults()));
  const std::string b = Render(ParseOpenAIChat(J(openai_inline.c_str()), Defaults()));
  const std::string c = Render(ParseAnthropicMessages(J(anthropic.c_str()), Defaults()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_NE(a.find("<think>\nMultiply them.\n</think>"), std::string::npos) << a;
  EXPECT_NE(a.find("<parameter name=\"a\">6</parameter>"), std::string::npos) << a;
  EXPECT_NE(a.find("<response>42</response>"), std::string::npos) << a;
  EXPECT_EQ(a.substr(a.size() - 15), "]~b]ai\n<think>\n");
}

TEST(ChatApi, ToolChoiceForcesTheStartOfTheReply) {
  const std::string base = std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + kToolsOpenAI;
  std::string forced;
  auto req = ParseOpenAIChat(J((base + R"(,"tool_choice":"required"})").c_str()), Defaults());
  ASSERT_TRUE(req.ok()) << req.status().message();
  auto p = RenderJobPrompt(*req, &forced);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(forced, "</think>\n\n<minimax:tool_call>\n<invoke name=\"");
  EXPECT_EQ(p->substr(p->size() - forced.size()), forced);
  auto named = ParseOpenAIChat(
      J((base + R"(,"tool_choice":{"type":"function","function":{"name":"multiply"}}})").c_str()), Defaults());
  ASSERT_TRUE(named.ok());
  ASSERT_TRUE(RenderJobPrompt(*named, &forced).ok());
  EXPECT_EQ(forced, "</think>\n\n<minimax:tool_call>\n<invoke name=\"multiply\">\n");
  EXPECT_FALSE(
      ParseOpenAIChat(J((base + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}}})").c_str()), Defaults())
          .ok());
  EXPECT_FALSE(ParseOpenAIChat(J(R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"})"), Defaults()).ok());
}

TEST(ChatApi, BadRequestsNameTheField) {
  struct Case {
    const char* body;
    const char* want;
  } cases[] = {
      {R"([1])", "JSON object"},
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[]})", "at least one"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "unknown role 'wizard'"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})", "text only"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":2})", "n: only 1"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":0.5})", "presence_penalty"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":3}}]})",
       "parameters"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})", "logprobs"},
      {R"({"messages":[{"role":"assistant","content":"x","tool_calls":[{"function":{"name":"f","arguments":"[1"}}]}]})",
       "arguments"},
  };
  for (const auto& c : cases) {
    auto j = chat::ParseOrderedJson(c.body, "test");
    ASSERT_TRUE(j.ok()) << c.body;
    auto r = ParseOpenAIChat(*j, Defaults());
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << c.body << " -> " << r.status().message();
  }
  EXPECT_FALSE(ParseAnthropicMessages(J(R"({"messages":[{"role":"system","content":"x"}]})"), Defaults()).ok());
  EXPECT_FALSE(
      ParseAnthropicMessages(J(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"}]})"), Defaults()).ok());
  EXPECT_FALSE(ParseAnthropicMessages(
                   J(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"bash_20250124","name":"bash"}]})"),
                   Defaults())
                   .ok());
  // Malformed JSON and invalid UTF-8 fail at parsing, with a message.
  EXPECT_FALSE(chat::ParseOrderedJson("{\"messages\": [", "body").ok());
  EXPECT_FALSE(chat::ParseOrderedJson("{\"a\": \"\xff\xfe\"}", "body").ok());
}

TEST(ChatApi, SamplingFieldsAndDefaults) {
  auto r = ParseOpenAIChat(J(R"({"messages":[{"role":"user","content":"x"}],"temperature":0.7,"top_k":-1,"top_p":0.9,
                                 "min_p":0.1,"seed":5,"max_completion_tokens":9,"stop":"END","stream":true,
                                 "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2})"),
                           Defaults());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->sampling.temperature, 0.7);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_DOUBLE_EQ(r->sampling.top_p, 0.9);
  EXPECT_EQ(r->sampling.seed, 5u);
  EXPECT_EQ(*r->max_tokens, 9);
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r->stream && r->include_usage);
  EXPECT_EQ(r->top_logprobs, 2);
  auto d = ParseOpenAIChat(J(R"({"messages":[{"role":"user","content":"x"}]})"), Defaults());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->sampling.temperature, 0);  // the server's default
  EXPECT_FALSE(d->max_tokens.has_value());
}

// The speculative-decoding extension field, per request, on every endpoint.
TEST(ChatApi, SpeculativeFieldPerRequest) {
  auto none = ParseOpenAIChat(J(R"({"messages":[{"role":"user","content":"x"}]})"), Defaults());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->spec.has_value());  // the server's --spec applies
  auto s = ParseOpenAIChat(J(R"({"messages":[{"role":"user","content":"x"}],"speculative":"lookup"})"), Defaults());
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_TRUE(s->spec.has_value());
  EXPECT_EQ(s->spec->mode, runtime::SpecMode::kLookup);
  auto o = ParseAnthropicMessages(
      J(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"speculative":{"mode":"off","draft":7}})"),
      Defaults());
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->spec->mode, runtime::SpecMode::kOff);
  auto c = ParseOpenAICompletion(J(R"({"prompt":"x","speculative":{"draft":6}})"), Defaults());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->spec->mode, runtime::SpecMode::kLookup);
  EXPECT_EQ(c->spec->draft, 6);
  for (const char* bad : {R"("medusa")", R"({"draft":0})", R"({"draft":99})", R"({"mode":"lookup","n":3})", "5"}) {
    auto b = ParseOpenAIChat(J((std::string(R"({"messages":[{"role":"user","content":"x"}],"speculative":)") + bad + "}").c_str()),
                             Defaults());
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("speculative"), std::string::npos) << b.status().message();
  }
}

std::vector<std::string> EventNames(const std::string& sse) {
  std::vector<std::string> out;
  size_t p = 0;
  while ((p = sse.find("event: ", p)) != std::string::npos) {
    const size_t e = sse.find('\n', p);
    out.push_back(sse.substr(p + 7, e - p - 7));
    p = e;
  }
  return out;
}

TEST(ChatReply, AnthropicStreamHasBlocksInOrder) {
  auto tools = chat::ToolSet::FromJson(J(kToolsOpenAI));
  ASSERT_TRUE(tools.ok());
  ReplyConfig rc;
  rc.api = Api::kAnthropic;
  rc.stream = true;
  rc.id = "msg_x";
  ChatReply r(rc, *tools, "");
  std::string sse = r.Start();
  sse += r.OnText("I should multiply.\n</think>\n\nSure.\n<minimax:tool_call>\n<invoke name=\"multiply\">\n");
  sse += r.OnText("<parameter name=\"a\">6</parameter>\n<parameter name=\"b\">7</parameter>\n</invoke>\n</minimax:tool_call>");
  runtime::GenerationResult res;
  res.stop_reason = runtime::StopReason::kEos;
  res.tokens = {1, 2, 3};
  sse += r.Finish(Status::Ok(), res);
  const std::vector<std::string> want = {"message_start",       "content_block_start", "content_block_delta",
                                         "content_block_delta", "content_block_stop",  "content_block_start",
                                         "content_block_delta", "content_block_stop",  "content_block_start",
                                         "content_block_delta", "content_block_stop",  "message_delta",
                                         "message_stop"};
  EXPECT_EQ(EventNames(sse), want) << sse;
  EXPECT_NE(sse.find(R"("partial_json":"{\"a\":6,\"b\":7}")"), std::string::npos) << sse;
  EXPECT_NE(sse.find(R"("stop_reason":"tool_use")"), std::string::npos);
}

TEST(ChatReply, OpenAIBodyTypesArgumentsAndMapsFinishReasons) {
  auto tools = chat::ToolSet::FromJson(J(kToolsOpenAI));
  ASSERT_TRUE(tools.ok());
  ReplyConfig rc;
  rc.prompt_tokens = 10;
  ChatReply r(rc, *tools, "</think>\n\n<minimax:tool_call>\n<invoke name=\"");
  (void)r.OnText(
      "multiply\">\n<parameter name=\"a\">6</parameter>\n<parameter name=\"b\">7.5</parameter>\n</invoke>\n</minimax:tool_call>");
  runtime::GenerationResult res;
  res.stop_reason = runtime::StopReason::kEos;
  res.tokens = {1, 2};
  res.stats.reused_tokens = 4;
  (void)r.Finish(Status::Ok(), res);
  const Json& b = r.body();
  EXPECT_EQ(b["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(b["choices"][0]["message"]["content"].is_null());
  const Json& call = b["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "multiply");
  EXPECT_EQ(call["function"]["arguments"], R"({"a":6,"b":7.5})");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  // No tools offered: a tool-call block stays text (never executed).
  ChatReply plain(rc, chat::ToolSet(), "");
  (void)plain.OnText("x\n</think>\n\n<minimax:tool_call>\n<invoke name=\"rm\">\n</invoke>\n</minimax:tool_call>");
  res.stop_reason = runtime::StopReason::kMaxTokens;
  (void)plain.Finish(Status::Ok(), res);
  EXPECT_EQ(plain.body()["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(plain.body()["choices"][0]["message"].contains("tool_calls"));
}

}  // namespace
}  // namespace m2::server
