// `m2 render` and `m2 parse`, run as a user would (M2_BINARY is set by m2_add_test).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/mapped_file.h"
#include "chat/chat_template.h"
#include "chat/output_parser.h"

namespace m2::chat {
namespace {

struct ShellRun {
  int exit_code = -1;
  std::string out;  // stdout; stderr too when asked
};

ShellRun Shell(const std::string& command) {
  ShellRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class ChatCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* binary = std::getenv("M2_BINARY");
    if (binary == nullptr || !std::filesystem::exists(binary)) GTEST_SKIP() << "M2_BINARY not set";
    m2_ = binary;
    dir_ = std::filesystem::temp_directory_path() /
           ("m2_chat_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
  Json Case(const std::string& name) {
    auto text = ReadTextFile("testdata/chat/render_cases.json");
    EXPECT_TRUE(text.ok());
    const Json all = Json::parse(*text);
    for (const Json& c : all.at("cases")) {
      if (c.at("name") == name) return c;
    }
    ADD_FAILURE() << "no case " << name;
    return Json::object();
  }
  std::string m2_;
  std::filesystem::path dir_;
};

TEST_F(ChatCli, RenderMatchesTheReferenceRendering) {
  // An OpenAI-shaped request (arguments as JSON strings, content null), with and without
  // the generation prompt.
  for (const char* name : {"openai_string_arguments", "tools_no_generation_prompt"}) {
    SCOPED_TRACE(name);
    const Json c = Case(name);
    const Json request = {{"model", "MiniMax-M2"}, {"messages", c.at("messages")}, {"tools", c.value("tools", Json())}};
    const std::string file = Write("request.json", request.dump());
    const bool prompt = c.value("add_generation_prompt", true);
    const ShellRun r = Shell(m2_ + " render " + file + (prompt ? "" : " --no-generation-prompt"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    auto expected = ReadTextFile(std::string("testdata/chat/rendered/") + name + ".txt");
    ASSERT_TRUE(expected.ok());
    // jinja2 prints the assistant's content null as "None"; m2 render, as vLLM, as ""
    // (ChatTemplateOptions::null_content_as_empty).
    const std::string none = "]~b]ai\nNone\n<minimax:tool_call>";
    if (const size_t at = expected->find(none); at != std::string::npos) {
      expected->replace(at, none.size(), "]~b]ai\n\n<minimax:tool_call>");
    }
    EXPECT_EQ(r.out, *expected);
  }
}

TEST_F(ChatCli, RenderReadsStdinAndTakesModelIdentity) {
  const std::string file = Write("request.json", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  const ShellRun r = Shell(m2_ + " render - --model-identity 'You are M2.' < " + file);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "]~!b[]~b]system\nYou are M2.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<think>\n");
}

TEST_F(ChatCli, RenderRejectsWithAMessage) {
  const std::string orphan = Write("orphan.json", R"({"messages": [{"role": "tool", "content": "x"}]})");
  ShellRun r = Shell(m2_ + " render " + orphan + " 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("m2: error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no previous assistant message with a tool call"), std::string::npos) << r.out;

  const std::string broken = Write("broken.json", R"({"messages": [)");
  r = Shell(m2_ + " render " + broken + " 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("is not valid JSON"), std::string::npos) << r.out;

  r = Shell(m2_ + " render " + (dir_ / "missing.json").string() + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
}

TEST_F(ChatCli, ParseGivesTheStreamingParsersResult) {
  const std::string tools = Write("tools.json", R"({"tools": [{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"}}}}}]})");
  const std::string text =
      "Need the weather.\n</think>\n\nChecking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
      "<parameter name=\"location\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n"
      "</minimax:tool_call>";
  const std::string input = Write("output.txt", text);
  const ShellRun r = Shell(m2_ + " parse --tools " + tools + " < " + input);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Json got = Json::parse(r.out);
  EXPECT_EQ(got, Json::parse(R"({"reasoning_content": "Need the weather.", "content": "Checking.",
    "tool_calls": [{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}}]})"));
  auto set = ToolSet::FromJson(Json::parse(*ReadTextFile(tools)).at("tools"));
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(got, ParseModelOutput(text, *set).ToJson());

  // Without the think prefix the same text is all content (no leading <think>), and without
  // --tools the days stay a string.
  const ShellRun plain = Shell(m2_ + " parse --no-think-prefix < " + Write("plain.txt", "Hello <b>there</b>"));
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(Json::parse(plain.out),
            Json::parse(R"({"reasoning_content": "", "content": "Hello <b>there</b>", "tool_calls": []})"));
}

TEST_F(ChatCli, ParseRejectsBadTools) {
  const std::string tools = Write("tools.json", R"([{"function": {"parameters": {}}}])");
  const ShellRun r = Shell(m2_ + " parse --tools " + tools + " < /dev/null 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("tools[0].function.name: expected a string"), std::string::npos) << r.out;
}

// A number beyond double range in a request or tools file is an error naming where it is;
// in model output it stays text. Integers beyond 64 bits keep every digit both ways.
TEST_F(ChatCli, NumbersBeyondRange) {
  const std::string request = Write("request.json", R"({"messages": [{"role": "user", "content": "x"}], "tools": [
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
      "a": {"type": "number", "default": 1e400}}}}}]})");
  const std::string where =
      "at tools[0].function.parameters.properties.a.default: expected a number within the range of a double, "
      "found 1e400";
  ShellRun r = Shell(m2_ + " render " + request + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("m2: error: '" + request + "', " + where), std::string::npos) << r.out;
  r = Shell(m2_ + " parse --tools " + request + " < /dev/null 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find(where), std::string::npos) << r.out;

  const std::string tools = Write("tools.json", R"([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "id": {"type": "integer",
      "maximum": 123456789012345678901234567890}}}}}])");
  const std::string output = Write("output.txt",
                                   "R</think><minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"a\">1e400"
                                   "</parameter>\n<parameter name=\"id\">123456789012345678901234567890</parameter>\n"
                                   "</invoke>\n</minimax:tool_call>");
  r = Shell(m2_ + " parse --tools " + tools + " < " + output);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Json::parse(r.out).at("tool_calls"),
            Json::parse(R"([{"name": "f", "arguments": {"a": "1e400", "id": "123456789012345678901234567890"}}])"));

  const std::string big = Write("big.json", R"({"messages": [{"role": "user", "content": "x"}], "tools": )" +
                                                *ReadTextFile(tools) + "}");
  r = Shell(m2_ + " render " + big);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(R"("maximum": 123456789012345678901234567890})"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace m2::chat
