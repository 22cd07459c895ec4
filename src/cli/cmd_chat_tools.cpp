// m2 render: an OpenAI chat request (messages, tools) -> the exact prompt text, rendered
//   natively as the official chat template does, content null as vLLM renders it
//   (chat/chat_template.h). A number beyond double range in the request is an error.
// m2 parse: model output text on stdin -> JSON with reasoning, content and tool calls, as
//   the streaming output parser reports them (chat/output_parser.h).
#include <cstdio>
#include <memory>
#include <string>

#include "base/mapped_file.h"
#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "chat/tool_schema.h"
#include "cli/commands.h"

namespace m2::cli {

namespace {

std::string ReadStdin() {
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) text.append(buf, n);
  return text;
}

// A JSON file, or stdin for "-", parsed keeping key order (it shows in the prompt).
Result<chat::Json> ReadOrderedJson(const std::string& path) {
  if (path == "-") return chat::ParseOrderedJson(ReadStdin(), "standard input");
  M2_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return chat::ParseOrderedJson(text, "'" + path + "'");
}

struct RenderOptions {
  std::string request;
  bool no_generation_prompt = false;
  std::string model_identity;
  std::string current_date;
  std::string current_location;
};

int RunRender(const RenderOptions& o) {
  auto json = ReadOrderedJson(o.request);
  if (!json.ok()) return Fail(json.status());
  auto request = chat::ChatRequestFromJson(std::move(*json));
  if (!request.ok()) return Fail(Status(request.status()).WithContext(o.request));
  chat::ChatTemplateOptions options;
  options.add_generation_prompt = !o.no_generation_prompt;
  if (!o.model_identity.empty()) options.model_identity = o.model_identity;
  if (!o.current_date.empty()) options.current_date = o.current_date;
  if (!o.current_location.empty()) options.current_location = o.current_location;
  auto prompt = chat::RenderChatTemplate(request->messages, request->tools, options);
  if (!prompt.ok()) return Fail(Status(prompt.status()).WithContext(o.request));
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return 0;
}

struct ParseOptions {
  std::string tools;
  bool no_think_prefix = false;
};

int RunParse(const ParseOptions& o) {
  chat::ToolSet tools;
  if (!o.tools.empty()) {
    auto json = ReadOrderedJson(o.tools);
    if (!json.ok()) return Fail(json.status());
    // A tools array, or a whole request whose "tools" it takes.
    chat::Json tools_json = *json;
    if (json->is_object() && json->contains("tools")) tools_json = json->at("tools");
    auto set = chat::ToolSet::FromJson(tools_json);
    if (!set.ok()) return Fail(Status(set.status()).WithContext(o.tools));
    tools = std::move(*set);
  }
  const std::string text = ReadStdin();
  chat::ParsedOutput parsed =
      chat::ParseModelOutput(text, tools, {.starts_in_reasoning = !o.no_think_prefix});
  // Model output need not be valid UTF-8; invalid bytes print as U+FFFD.
  const std::string out = parsed.ToJson().dump(2, ' ', false, chat::Json::error_handler_t::replace);
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace

void AddChatTools(CLI::App& app, Runner& run) {
  auto r = std::make_shared<RenderOptions>();
  CLI::App* render = app.add_subcommand(
      "render", "Render a chat request ({\"messages\": [...], \"tools\": [...]}, OpenAI shape) to the exact prompt text.");
  render->add_option("request", r->request, "JSON file with the request ('-' for standard input)")->required();
  render->add_flag("--no-generation-prompt", r->no_generation_prompt,
                   "Do not end with the generation prompt ']~b]ai\\n<think>\\n'");
  render->add_option("--model-identity", r->model_identity,
                     "System text used when there is no system message (default: the template's)");
  render->add_option("--current-date", r->current_date,
                     "Adds 'Current date: TEXT' to the system text, unless the system message has current_date");
  render->add_option("--current-location", r->current_location,
                     "Adds 'Current location: TEXT', unless the system message has current_location");
  render->callback([r, &run] { run = [r] { return RunRender(*r); }; });

  auto p = std::make_shared<ParseOptions>();
  CLI::App* parse = app.add_subcommand(
      "parse", "Split model output (standard input) into reasoning, content and tool calls, as JSON.");
  parse->add_option("--tools", p->tools,
                    "JSON file with the request's tools (an array, or a request with \"tools\"); types the arguments");
  parse->add_flag("--no-think-prefix", p->no_think_prefix,
                  "The prompt did not end in '<think>\\n': the output starts as content, not reasoning");
  parse->callback([p, &run] { run = [p] { return RunParse(*p); }; });
}

}  // namespace m2::cli
