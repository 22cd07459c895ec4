// The streaming output parser: each case's text is parsed whole, fed one byte at a time,
// and split in two at every byte boundary; all must give the same result, and the deltas
// must never split a UTF-8 character.
#include "chat/output_parser.h"

#include <gtest/gtest.h>

#include <random>

#include "chat/chat_template.h"

namespace m2::chat {
namespace {

ChatTemplateOptions NoGenerationPrompt() {
  ChatTemplateOptions options;
  options.add_generation_prompt = false;
  return options;
}

const char kTools[] = R"([
 {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
   "location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
   "days": {"type": "integer"}}}}},
 {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
   "query": {"type": "string"}, "limit": {"type": "integer"}, "exact": {"type": "boolean"},
   "ratio": {"type": "number"}, "filters": {"type": "object"}, "tags": {"type": "array"},
   "score": {"anyOf": [{"type": "number"}, {"type": "null"}]}, "env": {"type": ["object", "null"]},
   "mode": {"enum": [1, 2, "auto"]}, "zip": {"type": ["string", "integer"]}, "opt": {"type": ["boolean", "string"]}}}}},
 {"type": "function", "function": {"name": "run_code", "parameters": {"type": "object", "properties": {
   "code": {"type": "string"}}}}},
 {"name": "flat_tool", "parameters": {"properties": {"n": {"type": "number"}}}}
])";

struct Case {
  const char* name;
  std::string text;
  std::string reasoning;
  std::string content;
  const char* tool_calls;  // JSON array of {"name", "arguments"}
  bool starts_in_reasoning = true;
  bool with_tools = true;
};

// Shorthands for the tool-call XML as the template writes it.
std::string Block(const std::string& invokes) { return "<minimax:tool_call>\n" + invokes + "</minimax:tool_call>"; }
std::string Invoke(const std::string& name, const std::string& params) {
  return "<invoke name=\"" + name + "\">\n" + params + "</invoke>\n";
}
std::string Param(const std::string& key, const std::string& value) {
  return "<parameter name=\"" + key + "\">" + value + "</parameter>\n";
}

std::vector<Case> Cases() {
  const std::string weather = Invoke("get_weather", Param("location", "Paris") + Param("days", "3"));
  const char* weather_call = R"([{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}}])";
  const std::string unknown = Invoke("delete_everything", Param("path", "/"));
  return {
      {"reasoning_then_content", "I think.\n</think>\n\nHello!", "I think.", "Hello!", "[]"},
      {"reasoning_truncated", "Still thinking\n", "Still thinking", "", "[]"},
      {"empty_output", "", "", "", "[]"},
      {"empty_reasoning", "</think>\n\nHi", "", "Hi", "[]"},
      {"inner_newlines_kept", "a\n\nb\n</think>\n\nc\n\nd\n\n", "a\n\nb", "c\n\nd", "[]"},
      {"only_newlines_after_think", "R</think>\n\n\n", "R", "", "[]"},
      {"single_tool_call", "Check weather.\n</think>\n\n" + Block(weather), "Check weather.", "", weather_call},
      {"content_then_tool_call", "R</think>\n\nLet me check.\n" + Block(weather), "R", "Let me check.", weather_call},
      {"all_value_types",
       "R</think>\n\n" + Block(Invoke("search", Param("query", "café <b>") + Param("limit", "5") +
                                                    Param("exact", "true") + Param("ratio", "0.25") +
                                                    Param("filters", R"({"date": {"from": "2024"}, "k": [1, null]})") +
                                                    Param("tags", R"(["a", "ü"])") + Param("score", "null") +
                                                    Param("env", "null") + Param("mode", "2"))),
       "R", "",
       R"([{"name": "search", "arguments": {"query": "café <b>", "limit": 5, "exact": true, "ratio": 0.25,
           "filters": {"date": {"from": "2024"}, "k": [1, null]}, "tags": ["a", "ü"], "score": null, "env": null,
           "mode": 2}}])"},
      {"several_invokes_one_block",
       "R</think>\n\n" + Block(weather + Invoke("get_weather", Param("location", "東京") + Param("unit", "celsius")) +
                               Invoke("run_code", Param("code", "print 1"))),
       "R", "",
       R"([{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}},
           {"name": "get_weather", "arguments": {"location": "東京", "unit": "celsius"}},
           {"name": "run_code", "arguments": {"code": "print 1"}}])"},
      {"two_blocks", "R</think>\n\nA\n" + Block(weather) + "\nB\n" + Block(Invoke("run_code", Param("code", "x"))), "R",
       "A\nB",
       R"([{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}},
           {"name": "run_code", "arguments": {"code": "x"}}])"},
      {"text_after_tool_calls", "R</think>\n\nBefore\n" + Block(weather) + "\n\nAfter.\n", "R", "Before\n\nAfter.",
       weather_call},
      {"text_after_tool_calls_only", "R</think>\n\n" + Block(weather) + "\nAfter.", "R", "After.", weather_call},
      {"string_param_keeps_digits", "R</think>" + Block(Invoke("get_weather", Param("location", "123"))), "R", "",
       R"([{"name": "get_weather", "arguments": {"location": "123"}}])"},
      {"string_param_raw_whitespace",
       "R</think>" + Block(Invoke("run_code", Param("code", "\n  def f():\n    return 1\n"))), "R", "",
       R"([{"name": "run_code", "arguments": {"code": "\n  def f():\n    return 1\n"}}])"},
      {"integer_param_not_a_number", "R</think>" + Block(Invoke("get_weather", Param("days", "three"))), "R", "",
       R"([{"name": "get_weather", "arguments": {"days": "three"}}])"},
      {"typed_values_trimmed_and_lenient",
       "R</think>" + Block(Invoke("search", Param("limit", "\n 7 \n") + Param("exact", "False") + Param("ratio", "1e-05"))),
       "R", "", R"([{"name": "search", "arguments": {"limit": 7, "exact": false, "ratio": 1e-05}}])"},
      {"null_for_string_param", "R</think>" + Block(Invoke("get_weather", Param("location", "null"))), "R", "",
       R"([{"name": "get_weather", "arguments": {"location": null}}])"},
      {"undeclared_param_stays_string", "R</think>" + Block(Invoke("get_weather", Param("extra", "42"))), "R", "",
       R"([{"name": "get_weather", "arguments": {"extra": "42"}}])"},
      {"object_param_invalid_json", "R</think>" + Block(Invoke("search", Param("filters", "{not json"))), "R", "",
       R"([{"name": "search", "arguments": {"filters": "{not json"}}])"},
      {"flat_tool_definition", "R</think>" + Block(Invoke("flat_tool", Param("n", "2.5"))), "R", "",
       R"([{"name": "flat_tool", "arguments": {"n": 2.5}}])"},
      {"value_with_xml_like_text",
       "R</think>" + Block(Invoke("run_code", Param("code", "if a < b:\n    s = '<div class=\"x\">' + \"</div>\"\n"))), "R",
       "", R"([{"name": "run_code", "arguments": {"code": "if a < b:\n    s = '<div class=\"x\">' + \"</div>\"\n"}}])"},
      {"value_with_closing_tags",
       "R</think>" + Block(Invoke("run_code", Param("code", "x = '</invoke>\n</minimax:tool_call>\n<parameter name=\"y\">'"))),
       "R", "",
       R"([{"name": "run_code", "arguments": {"code": "x = '</invoke>\n</minimax:tool_call>\n<parameter name=\"y\">'"}}])"},
      {"duplicate_parameter_last_wins",
       "R</think>" + Block(Invoke("get_weather", Param("location", "A") + Param("days", "1") + Param("location", "B"))),
       "R", "", R"([{"name": "get_weather", "arguments": {"location": "B", "days": 1}}])"},
      {"unknown_tool_alone", "R</think>\n\nHmm.\n" + Block(unknown), "R", "Hmm.\n" + Block(unknown), "[]"},
      {"unknown_tool_beside_known", "R</think>\n\nHmm.\n" + Block(weather + unknown), "R",
       "Hmm.\n" + unknown.substr(0, unknown.size() - 1), weather_call},
      {"truncated_in_parameter", "R</think>\n\nA\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"loc",
       "R", "A\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"loc", "[]"},
      {"truncated_after_one_invoke", "R</think>\n\n<minimax:tool_call>\n" + weather + "<invoke name=\"run_code\">\n<par",
       "R", "<invoke name=\"run_code\">\n<par", weather_call},
      {"truncated_after_opener", "R</think>\n\nA\n<minimax:tool_call>\n", "R", "A\n<minimax:tool_call>", "[]"},
      {"missing_parameter_close",
       "R</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"days\">3</invoke>\n"
       "</minimax:tool_call>\nafter",
       "R",
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"days\">3</invoke>\n"
       "</minimax:tool_call>\nafter",
       "[]"},
      {"stray_text_in_block", "R</think>\n\n<minimax:tool_call>\nhello\n" + weather + "</minimax:tool_call>", "R",
       "<minimax:tool_call>\nhello\n" + weather + "</minimax:tool_call>", "[]"},
      // Stray text after an invoke is content and the block goes on: its closing tag is
      // format, not content.
      {"stray_text_after_a_call", "R</think>\n\n<minimax:tool_call>\n" + weather + "oops</minimax:tool_call>", "R",
       "oops", weather_call},
      {"unquoted_invoke_name", "R</think>\n\n<minimax:tool_call>\n<invoke name=get_weather>\n</invoke>\n</minimax:tool_call>",
       "R", "<minimax:tool_call>\n<invoke name=get_weather>\n</invoke>\n</minimax:tool_call>", "[]"},
      {"empty_invoke_name", "R</think>" + Block("<invoke name=\"\">\n</invoke>\n"), "R",
       Block("<invoke name=\"\">\n</invoke>\n"), "[]"},
      {"empty_block", "R</think>\n\nX\n<minimax:tool_call>\n</minimax:tool_call>", "R",
       "X\n<minimax:tool_call>\n</minimax:tool_call>", "[]"},
      {"nested_opener_recovers", "R</think>\n\n<minimax:tool_call>\n" + Block(weather), "R", "<minimax:tool_call>",
       weather_call},
      {"invoke_without_parameters", "R</think>" + Block(Invoke("get_weather", "")), "R", "",
       R"([{"name": "get_weather", "arguments": {}}])"},
      {"crlf_whitespace_in_block",
       "R</think><minimax:tool_call>\r\n<invoke name=\"get_weather\">\r\n<parameter name=\"days\">4</parameter>\r\n</invoke>"
       "\r\n</minimax:tool_call>",
       "R", "", R"([{"name": "get_weather", "arguments": {"days": 4}}])"},
      {"tool_xml_inside_reasoning_is_reasoning", "Maybe " + Block(weather) + "\n</think>\n\nNo.",
       "Maybe " + Block(weather), "No.", "[]"},
      {"partial_tags_at_end", "R</think\n\nstill</think>Hello <minim", "R</think\n\nstill", "Hello <minim", "[]"},
      {"angle_brackets_in_content", "R</think>a < b, <b>bold</b>, <minimax:tool_cal>, <think>", "R",
       "a < b, <b>bold</b>, <minimax:tool_cal>, <think>", "[]"},
      {"non_ascii", "思考中…\n</think>\n\n答案 😀\n" + Block(Invoke("get_weather", Param("location", "Zürich 🏔"))),
       "思考中…", "答案 😀", R"([{"name": "get_weather", "arguments": {"location": "Zürich 🏔"}}])"},
      {"invalid_utf8_passes_through", "R\xC3</think>\xFF\xC3(", "R\xC3", "\xFF\xC3(", "[]"},
      {"no_prefix_plain_content", "Hello there.", "", "Hello there.", "[]", false},
      {"no_prefix_leading_think", "\n<think>\nR\n</think>\n\nA", "R", "A", "[]", false},
      {"no_prefix_think_not_first", "A <think>x</think>", "", "A <think>x</think>", "[]", false},
      {"no_prefix_tool_call", "Sure.\n" + Block(weather), "", "Sure.", weather_call, false},
      {"no_tools_any_name_strings", "R</think>" + Block(Invoke("anything", Param("n", "5") + Param("z", "null"))), "R", "",
       R"([{"name": "anything", "arguments": {"n": "5", "z": null}}])", true, false},

      // Malformed calls (output_parser.h): what is recovered.
      {"missing_invoke_close_at_block_end",
       "R</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n" + Param("location", "Paris") +
           Param("days", "3") + "</minimax:tool_call>\nDone.",
       "R", "Done.", weather_call},
      {"missing_invoke_close_before_next_invoke",
       "R</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n" + Param("location", "Paris") +
           Param("days", "3") + Invoke("run_code", Param("code", "x")) + "</minimax:tool_call>",
       "R", "",
       R"([{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}},
           {"name": "run_code", "arguments": {"code": "x"}}])"},
      {"stray_text_between_invokes",
       "R</think>\n\nA\n<minimax:tool_call>\n" + weather + "and then\n" + Invoke("run_code", Param("code", "x")) +
           "</minimax:tool_call>",
       "R", "A\nand then",
       R"([{"name": "get_weather", "arguments": {"location": "Paris", "days": 3}},
           {"name": "run_code", "arguments": {"code": "x"}}])"},
      {"stray_text_between_parameters",
       "R</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n" + Param("location", "Paris") +
           "note: metric\n" + Param("days", "3") + "</invoke>\n</minimax:tool_call>",
       "R", "note: metric", weather_call},
      {"stray_text_in_unknown_invoke_stays_in_it", "R</think>\n\n" + Block(weather + Invoke("nope", "x\n")), "R",
       "<invoke name=\"nope\">\nx\n</invoke>", weather_call},
      {"stray_closing_tags_after_call",
       "R</think>\n\n<minimax:tool_call>\n" + weather + "</invoke>\n</parameter>\n</minimax:tool_call>", "R",
       "</invoke>\n</parameter>", weather_call},
      {"spaces_around_names",
       "R</think>" + Block("<invoke name=\" get_weather \">\n<parameter name=\" days \">3</parameter>\n"
                           "<parameter name=\"\tlocation\">Oslo</parameter>\n</invoke>\n"),
       "R", "", R"([{"name": "get_weather", "arguments": {"days": 3, "location": "Oslo"}}])"},
      {"parameter_opened_before_previous_closed",
       "R</think>" + Block("<invoke name=\"get_weather\">\n<parameter name=\"location\">Paris\r\n"
                           "<parameter name=\"days\">3<parameter name=\"unit\">celsius</parameter>\n</invoke>\n"),
       "R", "", R"([{"name": "get_weather", "arguments": {"location": "Paris", "days": 3, "unit": "celsius"}}])"},
      {"undeclared_parameter_tag_in_value_is_text",
       "R</think>" + Block(Invoke("run_code", Param("code", "a <parameter name=\"other\">b"))), "R", "",
       R"([{"name": "run_code", "arguments": {"code": "a <parameter name=\"other\">b"}}])"},
      {"same_parameter_tag_in_value_is_text",
       "R</think>" + Block(Invoke("run_code", Param("code", "x<parameter name=\"code\">y"))), "R", "",
       R"([{"name": "run_code", "arguments": {"code": "x<parameter name=\"code\">y"}}])"},
      {"no_schema_parameter_tag_in_value_is_text",
       "R</think>" + Block(Invoke("f", "<parameter name=\"a\">1\n" + Param("b", "2"))), "R", "",
       R"([{"name": "f", "arguments": {"a": "1\n<parameter name=\"b\">2"}}])", true, false},

      // Malformed calls: what never runs.
      {"missing_invoke_close_truncated",
       "R</think>\n\nA\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n" + Param("location", "Paris"), "R",
       "A\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"location\">Paris</parameter>", "[]"},
      {"unclosed_invoke_then_truncated_block",
       "R</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n" + Param("location", "Paris") +
           Invoke("run_code", Param("code", "x")),
       "R", "<invoke name=\"get_weather\">\n<parameter name=\"location\">Paris</parameter>",
       R"([{"name": "run_code", "arguments": {"code": "x"}}])"},
      {"truncated_inside_value",
       "R</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"location\">Par", "R",
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"location\">Par", "[]"},
      {"broken_parameter_tag_stops_the_block",
       "R</think>\n\n<minimax:tool_call>\n" + weather +
           "<invoke name=\"run_code\">\n<parameter name=code>x</parameter>\n</invoke>\n</minimax:tool_call>",
       "R", "<invoke name=\"run_code\">\n<parameter name=code>x</parameter>\n</invoke>\n</minimax:tool_call>",
       weather_call},
      {"broken_invoke_tag_after_call",
       "R</think>\n\n<minimax:tool_call>\n" + weather + "<invoke name=run_code>\n</invoke>\n</minimax:tool_call>", "R",
       "<invoke name=run_code>\n</invoke>\n</minimax:tool_call>", weather_call},
      {"tool_call_in_truncated_reasoning_stays_reasoning", "Let me call\n" + Block(weather),
       "Let me call\n" + Block(weather), "", "[]"},
      {"think_span_in_content_is_not_run", "R</think>\n\nA <think>draft " + Block(weather) + " </think> B", "R",
       "A <think>draft " + Block(weather) + " </think> B", "[]"},
      {"think_span_unclosed_in_content", "R</think>\n\nA\n<think>\n" + Block(weather), "R",
       "A\n<think>\n" + Block(weather), "[]"},
      {"call_after_think_span_runs", "R</think>\n\nA <think>x</think>\n" + Block(weather), "R", "A <think>x</think>",
       weather_call},
      {"no_prefix_call_in_leading_think", "<think>\nplan " + Block(weather) + "\n</think>\n\nok", "plan " + Block(weather),
       "ok", "[]", false},

      // Values typed by what the schema clearly means.
      {"lenient_numbers",
       "R</think>" + Block(Invoke("search", Param("limit", "+5") + Param("ratio", ".5") + Param("score", "-.25e1")) +
                           Invoke("get_weather", Param("days", "007")) + Invoke("flat_tool", Param("n", "5."))),
       "R", "",
       R"([{"name": "search", "arguments": {"limit": 5, "ratio": 0.5, "score": -2.5}},
           {"name": "get_weather", "arguments": {"days": 7}}, {"name": "flat_tool", "arguments": {"n": 5.0}}])"},
      {"lenient_numbers_not_when_string_allowed",
       "R</think>" + Block(Invoke("search", Param("zip", "007") + Param("mode", "+1"))), "R", "",
       R"([{"name": "search", "arguments": {"zip": "007", "mode": "+1"}}])"},
      {"boolean_digits_and_words",
       "R</think>" + Block(Invoke("search", Param("exact", "1") + Param("opt", "1")) +
                           Invoke("search", Param("exact", " 0 ")) + Invoke("search", Param("exact", "TRUE")) +
                           Invoke("search", Param("exact", "yes"))),
       "R", "",
       R"([{"name": "search", "arguments": {"exact": true, "opt": "1"}}, {"name": "search", "arguments": {"exact": false}},
           {"name": "search", "arguments": {"exact": true}}, {"name": "search", "arguments": {"exact": "yes"}}])"},
      {"not_numbers_stay_text",
       "R</think>" + Block(Invoke("search", Param("limit", "0x1F") + Param("ratio", "inf") + Param("score", "NaN")) +
                           Invoke("flat_tool", Param("n", "1_000"))),
       "R", "",
       R"([{"name": "search", "arguments": {"limit": "0x1F", "ratio": "inf", "score": "NaN"}},
           {"name": "flat_tool", "arguments": {"n": "1_000"}}])"},
      {"number_beyond_double_stays_text",
       "R</think>" + Block(Invoke("search", Param("ratio", "1e400") + Param("limit", "-1e400") +
                                                Param("filters", "{\"a\": 1e400}") + Param("score", "1e-400"))),
       "R", "", R"([{"name": "search", "arguments": {"ratio": "1e400", "limit": "-1e400", "filters": "{\"a\": 1e400}",
                    "score": 0.0}}])"},
      {"integer_beyond_64_bits_keeps_digits",
       "R</think>" + Block(Invoke("get_weather", Param("days", "123456789012345678901234567890")) +
                           Invoke("search", Param("limit", "-98765432109876543210") +
                                                Param("ratio", "+0123456789012345678901234567890") +
                                                Param("tags", "[18446744073709551616, 18446744073709551615]") +
                                                Param("filters", "{\"id\": -99999999999999999999}"))),
       "R", "",
       R"([{"name": "get_weather", "arguments": {"days": "123456789012345678901234567890"}},
           {"name": "search", "arguments": {"limit": "-98765432109876543210", "ratio": "123456789012345678901234567890",
            "tags": ["18446744073709551616", 18446744073709551615], "filters": {"id": "-99999999999999999999"}}}])"},
  };
}

struct Outcome {
  ParsedOutput parsed;
  std::vector<ParserEvent> events;
};

Outcome Parse(const Case& c, const ToolSet& tools, const std::vector<size_t>& cuts) {
  OutputParser parser(c.with_tools ? tools : ToolSet(), {.starts_in_reasoning = c.starts_in_reasoning});
  Outcome out;
  size_t start = 0;
  for (size_t cut : cuts) {
    parser.Feed(std::string_view(c.text).substr(start, cut - start), out.events);
    start = cut;
  }
  parser.Feed(std::string_view(c.text).substr(start), out.events);
  parser.Finish(out.events);
  for (const ParserEvent& e : out.events) out.parsed.Add(e);
  return out;
}

bool IsValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

void ExpectSame(const Outcome& got, const Outcome& reference, const std::string& how) {
  EXPECT_EQ(got.parsed.ToJson(), reference.parsed.ToJson()) << how;
}

TEST(OutputParser, CasesWholeByteByByteAndEverySplit) {
  auto tools = ToolSet::FromJson(Json::parse(kTools));
  ASSERT_TRUE(tools.ok()) << tools.status().message();
  const std::vector<Case> cases = Cases();
  ASSERT_GE(cases.size(), 30u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Outcome whole = Parse(c, *tools, {});
    EXPECT_EQ(whole.parsed.reasoning_content, c.reasoning);
    EXPECT_EQ(whole.parsed.content, c.content);
    EXPECT_EQ(whole.parsed.ToJson().at("tool_calls"), Json::parse(c.tool_calls));

    std::vector<size_t> every_byte;
    for (size_t i = 1; i < c.text.size(); ++i) every_byte.push_back(i);
    const Outcome bytewise = Parse(c, *tools, every_byte);
    ExpectSame(bytewise, whole, "fed byte by byte");
    for (const ParserEvent& e : bytewise.events) {
      if (e.kind == ParserEvent::Kind::kToolCall) continue;
      EXPECT_FALSE(e.text.empty());
      if (IsValidUtf8(c.text)) {
        EXPECT_TRUE(IsValidUtf8(e.text)) << "a delta splits a character: " << e.text;
      }
    }
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      ExpectSame(Parse(c, *tools, {cut}), whole, "split at byte " + std::to_string(cut));
    }
  }
}

// Random outputs built from tags, partial tags, XML pieces and text, fed in random chunks:
// the result never depends on the chunking.
TEST(OutputParser, RandomTextsGiveTheSameResultForAnyChunking) {
  auto tools = ToolSet::FromJson(Json::parse(kTools));
  ASSERT_TRUE(tools.ok());
  const std::vector<std::string> pieces = {
      "</think>", "</think", "<think>", "\n", "\n\n", " ", "text", "<", "<b>", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
      "<minimax:tool_call>", "</minimax:tool_call>", "<minimax:tool", "<invoke name=\"get_weather\">",
      "<invoke name=\"nope\">", "<invoke name=\"search\">", "</invoke>", "<parameter name=\"days\">",
      "<parameter name=\"location\">", "<parameter name=\"filters\">", "</parameter>", "3", "{\"a\": [1]}", "null",
      "<parameter name=\"x\"", "\r\n", "<invoke name=\" run_code \">", "<parameter name=\"code\">",
      "<parameter name=\" days \">", "oops", "<parameter name=x>", "<invoke name=bad>", "+5", "1e400",
      "123456789012345678901234567890", "<parameter name=\"location\"", "\">"};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 600; ++iter) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < n; ++i) text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    for (bool in_reasoning : {true, false}) {
      Case c{"random", text, "", "", "[]", in_reasoning};
      SCOPED_TRACE(testing::Message() << "text: " << Json(text).dump() << " starts_in_reasoning " << in_reasoning);
      const Outcome whole = Parse(c, *tools, {});
      std::vector<size_t> every_byte;
      for (size_t i = 1; i < text.size(); ++i) every_byte.push_back(i);
      ExpectSame(Parse(c, *tools, every_byte), whole, "byte by byte");
      for (int k = 0; k < 4; ++k) {
        std::vector<size_t> cuts;
        for (size_t i = 1; i < text.size(); ++i) {
          if (std::uniform_int_distribution<int>(0, 4)(rng) == 0) cuts.push_back(i);
        }
        ExpectSame(Parse(c, *tools, cuts), whole, "random chunks");
      }
    }
  }
}

// Deltas come out as soon as they are certain: only a possible tag start, an unfinished
// character and trailing newlines wait.
TEST(OutputParser, HoldsBackOnlyWhatCouldBeATag) {
  OutputParser parser(ToolSet(), {});
  std::vector<ParserEvent> events;
  auto fed = [&](std::string_view text) {
    events.clear();
    parser.Feed(text, events);
    std::string out;
    for (const auto& e : events) out += (e.kind == ParserEvent::Kind::kReasoningDelta ? "R:" : "C:") + e.text + "|";
    return out;
  };
  EXPECT_EQ(fed("Let me"), "R:Let me|");
  EXPECT_EQ(fed(" think </"), "R: think |");  // "</" may begin "</think>"
  EXPECT_EQ(fed("b> ok\n"), "R:</b> ok|");    // it did not; the newline waits
  EXPECT_EQ(fed("\xE4\xB8"), "");              // half of a 3-byte character waits
  EXPECT_EQ(fed("\xAD\n</think>"), "R:\n\xE4\xB8\xAD|");
  EXPECT_EQ(fed("\n\nHi <minimax:tool"), "C:Hi |");
  EXPECT_EQ(fed("box>"), "C:<minimax:toolbox>|");
  EXPECT_EQ(fed("\n<minimax:tool_call>\n<invoke name=\"f\">\n"), "");
  events.clear();
  parser.Feed("<parameter name=\"a\">1</parameter>\n</invoke>\n", events);
  ASSERT_EQ(events.size(), 1u);  // the call is out at </invoke>, before the block closes
  EXPECT_EQ(events[0].kind, ParserEvent::Kind::kToolCall);
  EXPECT_EQ(events[0].tool_call.name, "f");
  EXPECT_EQ(events[0].tool_call.arguments, Json::parse(R"({"a": "1"})"));
  events.clear();
  parser.Feed("</minimax:tool_call>", events);
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(fed("A <thi"), "C:A |");  // "<thi" may begin "<think>"
  EXPECT_EQ(fed("nk> <minimax:tool_call>"), "C:<think>|C: <minimax:tool_call>|");  // drafting: no block in it
  EXPECT_EQ(fed("x</think"), "C:x|");
  EXPECT_EQ(fed(">"), "C:</think>|");
  events.clear();
  parser.Finish(events);
  EXPECT_TRUE(events.empty());
}

// What the template renders for an assistant turn parses back to the same turn.
TEST(OutputParser, ParsesBackWhatTheTemplateRenders) {
  const Json tools_json = Json::parse(kTools);
  auto tools = ToolSet::FromJson(tools_json);
  ASSERT_TRUE(tools.ok());
  const Json turn = Json::parse(R"({"role": "assistant", "content": "Checking two things.\nFirst this.",
    "reasoning_content": "Need weather\n\nand a search.",
    "tool_calls": [
      {"type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris, <FR>", "unit": "celsius", "days": 2}}},
      {"type": "function", "function": {"name": "search", "arguments": {"query": "a\nb</div>", "limit": 3, "exact": false,
        "ratio": 0.5, "filters": {"x": [1, {"y": null}]}, "tags": [], "score": 1e-05, "env": {"k": "v"}, "mode": "auto"}}}]})");
  Json messages = Json::array({Json{{"role", "user"}, {"content", "q"}}, turn});
  Json renderable_tools = tools_json;
  renderable_tools.erase(renderable_tools.size() - 1);  // the flat tool: the template needs "function"
  auto prompt = RenderChatTemplate(messages, renderable_tools, NoGenerationPrompt());
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  // The model's output is the turn after "]~b]ai\n<think>\n", up to the end-of-turn token.
  const std::string marker = "]~b]ai\n<think>\n";
  const size_t begin = prompt->rfind(marker);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = prompt->rfind("[e~[");
  const std::string output = prompt->substr(begin + marker.size(), end - begin - marker.size());
  ParsedOutput parsed = ParseModelOutput(output, *tools);
  EXPECT_EQ(parsed.reasoning_content, turn["reasoning_content"].get<std::string>());
  EXPECT_EQ(parsed.content, turn["content"].get<std::string>());
  ASSERT_EQ(parsed.tool_calls.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(parsed.tool_calls[i].name, turn["tool_calls"][i]["function"]["name"]);
    EXPECT_EQ(parsed.tool_calls[i].arguments, turn["tool_calls"][i]["function"]["arguments"]);
  }
}

// A call whose </invoke> is missing waits for </minimax:tool_call>, and so do the calls after
// it (in order); a complete call before it is out at its </invoke>.
TEST(OutputParser, UnclosedInvokeWaitsForTheBlockToClose) {
  auto tools = ToolSet::FromJson(Json::parse(kTools));
  ASSERT_TRUE(tools.ok());
  OutputParser parser(*tools, {});
  std::vector<ParserEvent> events;
  parser.Feed("R</think>\n\n<minimax:tool_call>\n" + Invoke("run_code", Param("code", "a")), events);
  ASSERT_EQ(events.size(), 2u);  // the reasoning, then the call
  EXPECT_EQ(events[1].tool_call.arguments, Json::parse(R"({"code": "a"})"));
  events.clear();
  parser.Feed("<invoke name=\"run_code\">\n" + Param("code", "b") + Invoke("run_code", Param("code", "c")), events);
  EXPECT_TRUE(events.empty());
  parser.Feed("</minimax:tool_call>", events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].tool_call.arguments, Json::parse(R"({"code": "b"})"));
  EXPECT_EQ(events[1].tool_call.arguments, Json::parse(R"({"code": "c"})"));
  events.clear();
  parser.Finish(events);
  EXPECT_TRUE(events.empty());
}

// Each byte of a value is scanned about once, however it is fed: a long value streamed a
// few bytes at a time parses in linear time (a quadratic parser would take minutes here).
TEST(OutputParser, LongValuesStreamInLinearTime) {
  std::string code;
  while (code.size() < (4 << 20)) code += "if a < b: print('<p>', \"</div>\")\n";
  const std::string text = "R</think>" + Block(Invoke("run_code", Param("code", code)));
  OutputParser parser(ToolSet(), {});
  std::vector<ParserEvent> events;
  for (size_t i = 0; i < text.size(); i += 3) parser.Feed(std::string_view(text).substr(i, 3), events);
  parser.Finish(events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].tool_call.arguments.at("code"), Json(code));
}

// A call with integers beyond 64 bits, rendered, parses back with the digits as strings;
// rendering the parsed call again writes the same prompt.
TEST(OutputParser, BigIntegerArgumentsRoundTrip) {
  const Json tools_json = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
    {"type": "object", "properties": {"id": {"type": "integer"}, "ids": {"type": "array"}}}}}])");
  auto tools = ToolSet::FromJson(tools_json);
  ASSERT_TRUE(tools.ok());
  auto request = ParseOrderedJson(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "",
    "tool_calls": [{"type": "function", "function": {"name": "f",
      "arguments": {"id": 123456789012345678901234567890, "ids": [-18446744073709551617]}}}]}])", "messages");
  ASSERT_TRUE(request.ok()) << request.status().message();
  auto prompt = RenderChatTemplate(*request, tools_json, NoGenerationPrompt());
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_NE(prompt->find("<parameter name=\"id\">123456789012345678901234567890</parameter>\n"
                         "<parameter name=\"ids\">[-18446744073709551617]</parameter>"),
            std::string::npos)
      << *prompt;
  const std::string marker = "]~b]ai\n";
  const size_t begin = prompt->rfind(marker) + marker.size();
  const std::string output = "</think>\n\n" + prompt->substr(begin, prompt->rfind("[e~[") - begin);
  ParsedOutput parsed = ParseModelOutput(output, *tools);
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].arguments,
            Json::parse(R"({"id": "123456789012345678901234567890", "ids": ["-18446744073709551617"]})"));
  EXPECT_EQ(parsed.tool_calls[0].arguments.dump(),  // nlohmann can print every parsed value
            R"({"id":"123456789012345678901234567890","ids":["-18446744073709551617"]})");
  Json again = *request;
  again[1]["tool_calls"][0]["function"]["arguments"] = parsed.tool_calls[0].arguments;
  auto reprompt = RenderChatTemplate(again, tools_json, NoGenerationPrompt());
  ASSERT_TRUE(reprompt.ok());
  // The top-level value is a string now and prints raw, as the integer did; the nested one
  // prints quoted.
  EXPECT_NE(reprompt->find("<parameter name=\"id\">123456789012345678901234567890</parameter>\n"
                           "<parameter name=\"ids\">[\"-18446744073709551617\"]</parameter>"),
            std::string::npos)
      << *reprompt;
}

TEST(ToolSet, LenientValuesOnlyWhereTheSchemaIsClear) {
  const Json number = Json::parse(R"({"type": "number"})");
  const Json integer = Json::parse(R"({"type": "integer"})");
  const Json boolean = Json::parse(R"({"type": "boolean"})");
  const std::pair<const char*, Json> numbers[] = {
      {"+5", 5}, {"-007", -7}, {"00", 0}, {".5", 0.5}, {"-.5", -0.5}, {"5.", 5.0}, {"+1.5E+2", 150.0},
      {"0.000", 0.0}, {"+", "+"}, {".", "."}, {"-", "-"}, {"1e", "1e"}, {"1e+", "1e+"}, {"--5", "--5"},
      {"5..", "5.."}, {"1.2.3", "1.2.3"}, {"0b1", "0b1"}, {"Infinity", "Infinity"}, {"+inf", "+inf"},
      {"1 000", "1 000"}, {"\xD9\xA3", "\xD9\xA3"}, {"+1e999", "+1e999"}, {"12345678901234567890123", "12345678901234567890123"},
  };
  for (const auto& [raw, expected] : numbers) {
    EXPECT_EQ(ConvertParameterValue(raw, &number), expected) << raw;
    EXPECT_EQ(ConvertParameterValue(raw, &integer), expected) << raw;
  }
  EXPECT_EQ(ConvertParameterValue("1", &boolean), Json(true));
  EXPECT_EQ(ConvertParameterValue("0", &boolean), Json(false));
  EXPECT_EQ(ConvertParameterValue("fAlSe", &boolean), Json(false));
  EXPECT_EQ(ConvertParameterValue("2", &boolean), Json("2"));
  EXPECT_EQ(ConvertParameterValue("01", &boolean), Json("01"));
  // With a string allowed, only JSON forms convert.
  const Json either = Json::parse(R"({"anyOf": [{"type": "integer"}, {"type": "string"}]})");
  EXPECT_EQ(ConvertParameterValue("+5", &either), Json("+5"));
  EXPECT_EQ(ConvertParameterValue("5", &either), Json(5));
}

TEST(ToolSet, DeepValuesStayText) {
  const Json schema = Json::parse(R"({"type": "array"})");
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  EXPECT_EQ(ConvertParameterValue(deep, &schema), Json(deep));
  EXPECT_EQ(ConvertParameterValue("[[1]]", &schema), Json::parse("[[1]]"));
}

TEST(ToolSet, BadToolsAreErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"a": 1})", "tools: expected an array of tools or null, found an object"},
      {R"([3])", "tools[0]: expected an object, found a number"},
      {R"([{"function": "f"}])", "tools[0].function: expected an object, found a string"},
      {R"([{"function": {"parameters": {}}}])", "tools[0].function.name: expected a string, found nothing"},
      {R"([{"name": "f", "parameters": []}])", "tools[0].parameters: expected a JSON schema object, found an array"},
  };
  for (const auto& [json, message] : cases) {
    auto set = ToolSet::FromJson(Json::parse(json));
    ASSERT_FALSE(set.ok()) << json;
    EXPECT_NE(set.status().message().find(message), std::string::npos) << set.status().message();
  }
  auto none = ToolSet::FromJson(nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace m2::chat
