// The native chat template against jinja2's renderings of the official template
// (testdata/chat/render_cases.json -> testdata/chat/rendered/, made by
// tools/chat/render_reference.py), byte for byte; rejected conversations must be rejected.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "base/mapped_file.h"

namespace m2::chat {
namespace {

ChatTemplateOptions NoGenerationPrompt() {
  ChatTemplateOptions options;
  options.add_generation_prompt = false;
  return options;
}

const char kCases[] = "testdata/chat/render_cases.json";
const char kRendered[] = "testdata/chat/rendered/";

Json LoadCases() {
  auto text = ReadTextFile(kCases);
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return Json::array();
  auto json = ParseOrderedJson(*text, kCases);
  EXPECT_TRUE(json.ok()) << json.status().message();
  return json.ok() ? json->at("cases") : Json::array();
}

// Normalizes and renders one case as the reference script does (content null as jinja2
// prints it: the script does not apply vLLM's null -> "").
Result<std::string> RenderCase(const Json& c) {
  Json messages = c.at("messages");
  M2_RETURN_IF_ERROR(ParseToolCallArguments(messages));
  ChatTemplateOptions options;
  options.null_content_as_empty = false;
  options.add_generation_prompt = c.value("add_generation_prompt", true);
  if (c.contains("model_identity")) options.model_identity = c.at("model_identity").get<std::string>();
  return RenderChatTemplate(messages, c.value("tools", Json(nullptr)), options);
}

TEST(ChatTemplate, MatchesJinja2OnEveryConversation) {
  const Json cases = LoadCases();
  ASSERT_GE(cases.size(), 40u);
  int rendered = 0, rejected = 0;
  for (const Json& c : cases) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name + ": " + c.value("note", ""));
    auto expected = ReadTextFile(kRendered + name + ".txt");
    auto expected_error = ReadTextFile(kRendered + name + ".error.txt");
    ASSERT_TRUE(expected.ok() != expected_error.ok()) << "need exactly one of " << name << ".txt / .error.txt";
    Result<std::string> got = RenderCase(c);
    if (expected.ok()) {
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_EQ(*got, *expected);
      ++rendered;
    } else {
      EXPECT_FALSE(got.ok()) << "jinja2 rejected it (" << *expected_error << ") but we rendered:\n" << *got;
      // The template's own raise_exception must come through with its words.
      const std::string kToolMessage = "Message has tool role, but there was no previous assistant message";
      if (expected_error->find(kToolMessage) != std::string::npos && !got.ok()) {
        EXPECT_NE(got.status().message().find(kToolMessage), std::string::npos) << got.status().message();
      }
      ++rejected;
    }
  }
  EXPECT_GE(rendered, 40);
  EXPECT_GE(rejected, 5);
}

TEST(ChatTemplate, NoStaleExpectedFiles) {
  std::set<std::string> names;
  for (const Json& c : LoadCases()) names.insert(c.at("name").get<std::string>());
  for (const auto& entry : std::filesystem::directory_iterator(kRendered)) {
    std::string file = entry.path().filename().string();
    const std::string stem = file.substr(0, file.find('.'));
    EXPECT_TRUE(names.count(stem)) << file << " belongs to no conversation";
  }
}

// The case list exercises every branch of the template; spot-check that the renderings
// really contain each construct (a guard against a case list that silently lost one).
TEST(ChatTemplate, ConversationsCoverTheTemplate) {
  std::string all;
  for (const Json& c : LoadCases()) {
    auto text = ReadTextFile(kRendered + c.at("name").get<std::string>() + ".txt");
    if (text.ok()) all += *text;
  }
  for (const char* needle :
       {"Current date: ", "Current location: ", "<tools>\n<tool>{", "<think>\n", "\n</think>\n\n",
        "<parameter name=", "</invoke>\n<invoke", "]~b]tool\n<response>", "</response>\n<response>",
        "\n</response>", "None", "True", "'", "[e~[\n]~b]ai\n<think>\n"}) {
    EXPECT_NE(all.find(needle), std::string::npos) << needle;
  }
}

TEST(ChatTemplate, GenerationPromptOpensTheReasoning) {
  Json messages = Json::parse(R"([{"role": "user", "content": "Hi"}])");
  auto with = RenderChatTemplate(messages, nullptr, {});
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(*with, "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<think>\n");
  auto without = RenderChatTemplate(messages, nullptr, NoGenerationPrompt());
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(*without, "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nHi[e~[\n");
}

// The date/location options give what the same fields on the system message give.
TEST(ChatTemplate, CurrentDateAndLocationOptionsFillTheSystemMessage) {
  const Json plain = Json::parse(R"([{"role": "user", "content": "Hi"}])");
  const Json with_fields = Json::parse(
      R"([{"role": "system", "current_date": "2025-10-27", "current_location": "Paris"}, {"role": "user", "content": "Hi"}])");
  ChatTemplateOptions options;
  options.current_date = "2025-10-27";
  options.current_location = "Paris";
  auto by_option = RenderChatTemplate(plain, nullptr, options);
  auto by_field = RenderChatTemplate(with_fields, nullptr, {});
  ASSERT_TRUE(by_option.ok() && by_field.ok());
  EXPECT_EQ(*by_option, *by_field);
  EXPECT_EQ(*by_option,
            "]~!b[]~b]system\nYou are a helpful assistant.\nCurrent date: 2025-10-27\nCurrent location: Paris[e~[\n"
            "]~b]user\nHi[e~[\n]~b]ai\n<think>\n");
  // A field in the request wins, even an empty one; a system text is kept.
  const Json own = Json::parse(
      R"([{"role": "system", "content": "S", "current_date": ""}, {"role": "user", "content": "Hi"}])");
  auto kept = RenderChatTemplate(own, nullptr, options);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "]~!b[]~b]system\nS\nCurrent location: Paris[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<think>\n");
}

TEST(ChatTemplate, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto parsed = ParseOrderedJson(deep, "deep.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("nested at most 512 levels"), std::string::npos);
  // The same through a message built by the caller.
  const Json messages = Json::parse("[{\"role\": \"user\", \"content\": " + deep + "}]");
  auto rendered = RenderChatTemplate(messages, nullptr, {});
  ASSERT_FALSE(rendered.ok());
  EXPECT_NE(rendered.status().message().find("nested at most 512 levels"), std::string::npos);
}

TEST(ChatTemplate, KeepsKeyOrderOfArgumentsAndSchemas) {
  Json messages = Json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": "{\"zeta\": 1, \"alpha\": {\"b\": 2, \"a\": 1}}"}}]}])");
  ASSERT_TRUE(ParseToolCallArguments(messages).ok());
  Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}])");
  auto got = RenderChatTemplate(messages, tools, NoGenerationPrompt());
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_NE(got->find(R"(<tool>{"name": "f", "parameters": {"z": 1, "a": 2}}</tool>)"), std::string::npos);
  EXPECT_NE(got->find("<parameter name=\"zeta\">1</parameter>\n<parameter name=\"alpha\">{\"b\": 2, \"a\": 1}"),
            std::string::npos);
}

Json CaseNamed(const std::string& name) {
  for (const Json& c : LoadCases()) {
    if (c.at("name") == name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return Json::object();
}

// content null renders as vLLM renders it (""), byte for byte what jinja2 gives for the same
// conversation without the content key; jinja2 alone prints "None".
TEST(ChatTemplate, NullContentRendersAsEmpty) {
  for (const auto& [with_null, without] : {std::pair<const char*, const char*>{"tool_call_content_null",
                                                                               "tool_call_no_content_key"},
                                           {"user_content_null", "user_content_missing"}}) {
    SCOPED_TRACE(with_null);
    const Json c = CaseNamed(with_null);
    Json messages = c.at("messages");
    ASSERT_TRUE(ParseToolCallArguments(messages).ok());
    ChatTemplateOptions options;
    options.add_generation_prompt = c.value("add_generation_prompt", true);
    auto got = RenderChatTemplate(messages, c.value("tools", Json(nullptr)), options);
    ASSERT_TRUE(got.ok()) << got.status().message();
    auto expected = ReadTextFile(std::string(kRendered) + without + ".txt");
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(*got, *expected);
    EXPECT_EQ(got->find("None"), std::string::npos);
    options.null_content_as_empty = false;  // jinja2's own rendering
    auto jinja = RenderChatTemplate(messages, c.value("tools", Json(nullptr)), options);
    ASSERT_TRUE(jinja.ok());
    EXPECT_EQ(*jinja, *ReadTextFile(std::string(kRendered) + with_null + ".txt"));
  }
  // A tool message with content null: jinja2 rejects it (not iterable); vLLM renders "".
  const Json c = CaseNamed("error_tool_content_null");
  auto got = RenderChatTemplate(c.at("messages"), nullptr, {});
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got,  // jinja2 with the content replaced by ""
            "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nGo[e~[\n]~b]ai\n\n<minimax:tool_call>\n"
            "<invoke name=\"f\">\n</invoke>\n</minimax:tool_call>[e~[\n]~b]tool\n<response></response>[e~[\n"
            "]~b]ai\n<think>\n");
  // The OpenAI request path.
  auto request = ChatRequestFromJson(Json::parse(
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null,
          "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})"));
  ASSERT_TRUE(request.ok());
  auto rendered = RenderChatTemplate(request->messages, request->tools, NoGenerationPrompt());
  ASSERT_TRUE(rendered.ok());
  EXPECT_NE(rendered->find("]~b]ai\n\n<minimax:tool_call>\n<invoke name=\"f\">"), std::string::npos) << *rendered;
}

// Integers beyond 64 bits keep every digit, in schemas, arguments (string or object) and
// content; the expected prompt is jinja2's rendering of the same request.
TEST(ChatTemplate, BigIntegersKeepEveryDigit) {
  const std::string text = R"({"messages": [
    {"role": "user", "content": [{"type": "text", "text": "Find "}, {"type": "text", "text": 123456789012345678901234567890}]},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup",
      "arguments": "{\"id\": 123456789012345678901234567890, \"neg\": -98765432109876543210, \"max\": 18446744073709551615, \"nested\": {\"ids\": [18446744073709551616, 1.5]}}"}}]},
    {"role": "tool", "content": [{"output": {"big": -123456789012345678901234567890}}]}],
   "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {
     "id": {"type": "integer", "minimum": -123456789012345678901234567890, "maximum": 123456789012345678901234567890}}}}}]})";
  auto json = ParseOrderedJson(text, "request");
  ASSERT_TRUE(json.ok()) << json.status().message();
  auto request = ChatRequestFromJson(std::move(*json));
  ASSERT_TRUE(request.ok()) << request.status().message();
  auto got = RenderChatTemplate(request->messages, request->tools, {});
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got,
            "]~!b[]~b]system\nYou are a helpful assistant.\n\n# Tools\nYou may call one or more tools to assist with "
            "the user query.\nHere are the tools available in JSONSchema format:\n\n<tools>\n<tool>{\"name\": "
            "\"lookup\", \"parameters\": {\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\", "
            "\"minimum\": -123456789012345678901234567890, \"maximum\": 123456789012345678901234567890}}}}</tool>\n"
            "</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n\n"
            "<minimax:tool_call>\n<invoke name=\"tool-name-1\">\n<parameter name=\"param-key-1\">param-value-1"
            "</parameter>\n<parameter name=\"param-key-2\">param-value-2</parameter>\n...\n</invoke>\n"
            "</minimax:tool_call>[e~[\n]~b]user\nFind 123456789012345678901234567890[e~[\n]~b]ai\n\n"
            "<minimax:tool_call>\n<invoke name=\"lookup\">\n<parameter name=\"id\">123456789012345678901234567890"
            "</parameter>\n<parameter name=\"neg\">-98765432109876543210</parameter>\n<parameter name=\"max\">"
            "18446744073709551615</parameter>\n<parameter name=\"nested\">{\"ids\": [18446744073709551616, 1.5]}"
            "</parameter>\n</invoke>\n</minimax:tool_call>[e~[\n]~b]tool\n<response>{'big': "
            "-123456789012345678901234567890}\n</response>[e~[\n]~b]ai\n<think>\n");
}

// A number beyond double range is an error naming where it is, from the request text or
// from arguments given as a string; never an exception or inf.
TEST(ChatTemplate, NumbersBeyondDoubleAreErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f",
          "parameters": {"type": "object", "properties": {"a": {"type": "number", "default": 1e400}}}}}]})",
       "request.json, at tools[0].function.parameters.properties.a.default: expected a number within the range of a "
       "double, found 1e400"},
      {R"({"messages": [{"role": "user", "content": [-2E+999]}]})",
       "request.json, at messages[0].content[0]: expected a number within the range of a double, found -2E+999"},
      {R"([1, {"odd key": 1e309}])", "request.json, at [1][\"odd key\"]: expected a number within the range"},
      {"1e400", "request.json: expected a number within the range of a double, found 1e400 (at byte 5)"},
  };
  for (const auto& [text, message] : cases) {
    auto parsed = ParseOrderedJson(text, "request.json");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find(message), std::string::npos) << parsed.status().message();
  }
  // Underflow is 0.0, as in Python.
  auto tiny = ParseOrderedJson("[1e-400, -1e-400]", "x");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(PyJsonDumps(*tiny), "[0.0, -0.0]");
  // Arguments as a JSON string.
  auto request = ChatRequestFromJson(Json::parse(
      R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": [1e400]}"}}]}]})"));
  ASSERT_FALSE(request.ok());
  EXPECT_NE(request.status().message().find("messages[0].tool_calls[0].function.arguments, at a[0]: expected a number "
                                            "within the range of a double, found 1e400"),
            std::string::npos)
      << request.status().message();
}

TEST(ChatTemplate, ParseOrderedJsonReadsAsJsonLoads) {
  auto v = ParseOrderedJson(R"({"z": 1, "a": [18446744073709551615, -9223372036854775808, -9223372036854775809,
    100000000000000000000, 1.0, 1e2], "z": 2})", "x");
  ASSERT_TRUE(v.ok()) << v.status().message();
  // Key order kept, a duplicate key takes the last value at the first place (a dict).
  EXPECT_EQ(PyJsonDumps(*v),
            R"({"z": 2, "a": [18446744073709551615, -9223372036854775808, -9223372036854775809, )"
            R"(100000000000000000000, 1.0, 100.0]})");
  EXPECT_TRUE((*v)["a"][0].is_number_unsigned());
  EXPECT_TRUE(IsBigInteger((*v)["a"][2]));
  EXPECT_EQ(BigIntegerText((*v)["a"][3]), "100000000000000000000");
  EXPECT_EQ(JsonTypeName((*v)["a"][3]), "a number");
  for (const char* bad : {"{", "[1,]", "NaN", "Infinity", "[1] x", "\"\xFF\""}) {
    auto r = ParseOrderedJson(bad, "x");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("x is not valid JSON (at byte"), std::string::npos) << r.status().message();
  }
}

// Malformed requests: a Status naming what was expected and what was found, never a crash.
TEST(ChatTemplate, MalformedRequestsAreErrors) {
  struct Bad {
    const char* request;
    const char* message_part;
  };
  const Bad cases[] = {
      {R"([1, 2])", "expected an object"},
      {R"({"tools": []})", "expected a \"messages\" array, found none"},
      {R"({"messages": {"role": "user"}})", "expected \"messages\" to be an array, found an object"},
      {R"({"messages": [], "tools": {"a": 1}})", "expected \"tools\" to be an array or null, found an object"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]})",
       "messages[0].tool_calls[0].function.arguments is not valid JSON"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "3"}}]}]})",
       "expected a JSON object, found a number"},
  };
  for (const Bad& bad : cases) {
    auto request = ChatRequestFromJson(Json::parse(bad.request));
    ASSERT_FALSE(request.ok()) << bad.request;
    EXPECT_NE(request.status().message().find(bad.message_part), std::string::npos) << request.status().message();
  }
  struct BadMessages {
    const char* messages;
    const char* message_part;
  };
  const BadMessages renders[] = {
      {R"("hello")", "messages: expected an array of message objects, found a string"},
      {R"([{"role": "user", "content": "x"}, 5])", "messages[1]: expected a message object, found a number"},
      {R"([{"content": "x"}])", "messages[0].role: expected a string, found nothing"},
      {R"([{"role": null}])", "messages[0].role: expected a string, found null"},
      {R"([{"role": "tool", "content": "x"}])", "messages[0]: Message has tool role"},
      {R"([{"role": "assistant", "tool_calls": {"a": 1}}])", "messages[0].tool_calls: expected an array"},
      {R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}])",
       "messages[0].tool_calls[0].function.arguments: expected an object (or a string holding a JSON object), "
       "found nothing"},
      {R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}])",
       "messages[0].tool_calls[0].function.name: expected a string"},
      {R"([{"role": "system", "content": "s", "current_location": ["x"]}])",
       "messages[0].current_location: expected a string, found an array"},
  };
  for (const BadMessages& bad : renders) {
    auto got = RenderChatTemplate(Json::parse(bad.messages), nullptr, {});
    ASSERT_FALSE(got.ok()) << bad.messages;
    EXPECT_NE(got.status().message().find(bad.message_part), std::string::npos) << got.status().message();
  }
  auto tools = RenderChatTemplate(Json::array(), Json::parse(R"([{"name": "f"}])"), {});
  ASSERT_FALSE(tools.ok());
  EXPECT_NE(tools.status().message().find("tools[0]: expected an object with a \"function\" key"), std::string::npos);
}

}  // namespace
}  // namespace m2::chat
