// Shell-command tools: the tools file, running commands with the arguments on standard
// input, and every way a command can fail. Also a chat turn whose tool call runs a real
// command.
#include "cli/shell_tools.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/chat_session.h"
#include "../runtime/test_model.h"

namespace m2::runtime {
namespace {

using chat::Json;

Result<ShellTools> Tools(const std::string& text) { return ShellTools::FromJson(Json::parse(text), "tools.json"); }

TEST(ShellTools, ReadsTheFileAndHidesTheCommand) {
  auto t = Tools(R"([{"type": "function", "command": "cat", "function": {"name": "echo", "parameters": {}}},
                     {"type": "function", "function": {"name": "upper", "command": "tr a-z A-Z"}}])");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->tools().dump(),
            R"([{"type":"function","function":{"name":"echo","parameters":{}}},{"type":"function","function":{"name":"upper"}}])");
  chat::ToolCall call{"upper", Json::parse(R"({"city": "paris", "n": 2})")};
  auto out = t->Run(call);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, R"({"CITY":"PARIS","N":2})");
  call.name = "echo";
  EXPECT_EQ(*t->Run(call), R"({"city":"paris","n":2})");
  call.name = "nope";
  auto missing = t->Run(call);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no tool named 'nope'"), std::string::npos);
}

TEST(ShellTools, BadFilesNameTheProblem) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {R"({"type": "function"})", "expected a JSON array"},
      {R"([3])", "tools[0]: expected an object"},
      {R"([{"command": "cat"}])", "\"function\""},
      {R"([{"command": "cat", "function": {"name": ""}}])", "function.name: expected a non-empty string"},
      {R"([{"function": {"name": "f"}}])", "('f'): expected a \"command\" string"},
      {R"([{"command": 5, "function": {"name": "f"}}])", "found 5"},
      {R"([{"command": "a", "function": {"name": "f"}}, {"command": "b", "function": {"name": "f"}}])",
       "a second tool named 'f'"},
  };
  for (const Case& c : cases) {
    auto t = Tools(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(t.status().message().find(c.want), std::string::npos) << c.text << " -> " << t.status().message();
  }
}

TEST(ShellTools, CommandFailuresAreErrorsWithTheirOutput) {
  auto fail = RunShellCommand("echo partial; exit 3", "", 10);
  ASSERT_FALSE(fail.ok());
  EXPECT_NE(fail.status().message().find("exited with status 3"), std::string::npos) << fail.status().message();
  EXPECT_NE(fail.status().message().find("partial"), std::string::npos);
  auto missing = RunShellCommand("/no/such/program-m2", "{}", 10);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("127"), std::string::npos) << missing.status().message();
  const auto t0 = std::chrono::steady_clock::now();
  // "; echo" makes sh fork instead of exec: the whole process group must be killed, or
  // the orphaned sleep would keep our stderr open for 20 s.
  auto slow = RunShellCommand("sleep 20; echo late", "", 0.3);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.status().message().find("time limit"), std::string::npos) << slow.status().message();
  EXPECT_LT(took, 5.0);
}

TEST(ShellTools, CancelStopsARunningCommand) {
  std::atomic<bool> cancel{false};
  std::thread ctrl_c([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunShellCommand("sleep 20; echo late", "", 60, &cancel);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctrl_c.join();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("interrupted"), std::string::npos) << r.status().message();
  EXPECT_LT(took, 5.0);
}

TEST(ShellTools, ACommandThatIgnoresItsInputDoesNotKillUs) {
  // 4 MB of input to a command that exits at once: our writes hit a closed pipe (SIGPIPE).
  const std::string big(4 << 20, 'x');
  auto r = RunShellCommand("echo done", big, 10);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "done\n");
  // And a command that reads all of it while writing, so neither side may block.
  auto wc = RunShellCommand("wc -c", big, 20);
  ASSERT_TRUE(wc.ok()) << wc.status().message();
  EXPECT_EQ(std::stoll(*wc), static_cast<long long>(big.size()));
}

// A scripted model calls a tool backed by a real command, as `m2 chat --tools` wires it.
class OneCall : public TextGenerator {
 public:
  explicit OneCall(const text::Tokenizer& t) : tok_(t) {}
  const text::Tokenizer& tokenizer() const override { return tok_; }
  Result<GenerationResult> Generate(std::span<const int32_t> prompt, const TextCallback& on_text) override {
    last_prompt = tok_.Decode(prompt);
    GenerationResult r;
    r.text = calls_++ == 0 ? "t\n</think>\n\n<minimax:tool_call>\n<invoke name=\"add\">\n<parameter name=\"a\">2"
                             "</parameter>\n<parameter name=\"b\">40</parameter>\n</invoke>\n</minimax:tool_call>"
                           : "done\n</think>\n\nIt is 42.";
    on_text(r.text);
    return r;
  }
  std::string last_prompt;

 private:
  const text::Tokenizer& tok_;
  int calls_ = 0;
};

TEST(ShellTools, ChatTurnRunsTheCommandAndFeedsItsOutputBack) {
  auto tok = text::Tokenizer::FromJson(m2::testing::SmallTokenizerJson(), "small");
  ASSERT_TRUE(tok.ok());
  auto tools = Tools(R"([{"type": "function", "command": "sed 's/^/args: /'",
    "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}])");
  ASSERT_TRUE(tools.ok()) << tools.status().message();
  OneCall gen(**tok);
  auto session = ChatSession::Create(gen, tools->tools());
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto r = session->Send("2+40?", {}, [&](const chat::ToolCall& c) { return tools->Run(c); });
  ASSERT_TRUE(r.ok()) << r.status().message();
  // The arguments reached the command as JSON, typed by the schema (integers, not "2").
  EXPECT_EQ(session->messages()[2]["content"], "args: {\"a\":2,\"b\":40}");
  EXPECT_NE(gen.last_prompt.find("]~b]tool\n<response>args: {\"a\":2,\"b\":40}</response>[e~[\n"), std::string::npos)
      << gen.last_prompt;
  EXPECT_EQ(gen.last_prompt.find("sed "), std::string::npos);  // the command is never shown
  EXPECT_EQ(session->messages()[3]["content"], "It is 42.");
}

}  // namespace
}  // namespace m2::runtime
