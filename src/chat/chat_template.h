// The MiniMax-M2 chat format: a native renderer of the official Jinja template
// (testdata/reference/minimax-m2/chat_template.jinja), byte-identical to jinja2 rendering it
// the way transformers does (testdata/reference/README.md).
//
//   ]~!b[]~b]system\n{system or model_identity}[\nCurrent date: ..][\nCurrent location: ..]
//       [\n\n# Tools ... <tools>\n<tool>{json}</tool>\n...</tools> ... </minimax:tool_call>][e~[\n
//   ]~b]user\n{text}[e~[\n
//   ]~b]ai\n[<think>\n{reasoning}\n</think>\n\n]{content}[\n<minimax:tool_call>\n<invoke ...>
//       ...</minimax:tool_call>][e~[\n
//   ]~b]tool\n<response>{result}</response>...[e~[\n     (consecutive tool messages share one)
//   ]~b]ai\n<think>\n                                      (the generation prompt)
//
// Messages and tools are JSON in the shape the template receives them (Python values from
// json.loads), kept as nlohmann::ordered_json because key order shows in the output.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "chat/json_parse.h"
#include "chat/py_format.h"

namespace m2::chat {

struct ChatTemplateOptions {
  // Ends the prompt with "]~b]ai\n<think>\n": the model's output then starts inside its
  // reasoning (see output_parser.h).
  bool add_generation_prompt = true;
  // The template variable `model_identity` (a chat_template_kwargs entry in servers): the
  // system text used when there is no system message. Unset: "You are a helpful assistant."
  std::optional<std::string> model_identity;
  // The template reads "Current date: ..." / "Current location: ..." from fields of the
  // system message (messages[0].current_date / .current_location). These fill those fields
  // for a server that knows them - as if the request had them, adding a system message
  // without content (so the identity stays) when there is none. A field the request
  // already has, even empty, wins.
  std::optional<std::string> current_date;
  std::optional<std::string> current_location;
  // A message's "content": null renders as "" - what OpenAI clients send on tool-call turns.
  // jinja2 alone prints str(None), "None" (before the calls of an assistant turn, in a user
  // turn), and rejects it in a tool message (not iterable); vLLM replaces a null content by
  // "" (an empty part list) for every role before rendering, and so does this. Same as no
  // "content" key for assistant and user messages; a tool message gets
  // "<response></response>". False renders exactly as jinja2 does (to compare with it).
  bool null_content_as_empty = true;
};

// Renders the prompt. `messages` must be an array of objects with a string "role"; `tools`
// is null or an array of {"type": "function", "function": {...}}. Numbers print as Python
// prints the json.loads values, integers beyond 64 bits with every digit (py_format.h). Fails,
// never crashes, on every conversation the template rejects, with the template's meaning:
//   - a tool message before any assistant message with tool calls (the template's
//     raise_exception: "Message has tool role, but there was no previous assistant message
//     with a tool call!");
//   - values the template cannot use (a tool-call name that is not a string, arguments
//     that are not an object, a tool without "function", a non-string current_date, ...),
//     where jinja2 raises UndefinedError or TypeError.
// It also rejects messages that are not objects or lack a string "role" (the template
// would silently skip them; an OpenAI request cannot contain them).
Result<std::string> RenderChatTemplate(const Json& messages, const Json& tools,
                                       const ChatTemplateOptions& options);

// The template iterates `tool_call.arguments.items()`, so it needs arguments as an object;
// OpenAI requests carry them as a JSON string. Like vLLM and SGLang before rendering, this
// replaces every string `messages[i].tool_calls[j].function.arguments` with the object it
// encodes (empty or blank text -> {}). A string that is not a JSON object is an error.
Status ParseToolCallArguments(Json& messages);

// An OpenAI chat-completions request: {"messages": [...], "tools": [...]}; other fields are
// ignored. Tool-call arguments are parsed (ParseToolCallArguments). Parse the request text
// with ParseOrderedJson (json_parse.h): it keeps key order and big integers, and makes a
// number beyond double range an error that names where it is.
struct ChatRequest {
  Json messages = Json::array();
  Json tools = nullptr;
};
Result<ChatRequest> ChatRequestFromJson(Json request);

}  // namespace m2::chat
