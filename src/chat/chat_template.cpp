#include "chat/chat_template.h"

namespace m2::chat {

namespace {

// The special tokens as text (MODEL_SPEC.md "Chat format").
constexpr std::string_view kBeginOfSequence = "]~!b[";
constexpr std::string_view kRoleBegin = "]~b]";
constexpr std::string_view kEndOfTurn = "[e~[";
constexpr std::string_view kToolCallBegin = "<minimax:tool_call>";
constexpr std::string_view kToolCallEnd = "</minimax:tool_call>";

// jinja2's attribute lookup `x.key` on a json.loads value: a dict's item, or Undefined
// (nullptr here) for a missing key and for every non-dict (str, list, numbers and None have
// no attribute the template asks for). Undefined prints as "", is false, and iterates as
// empty; only an attribute lookup *on* Undefined raises (UndefinedError).
const Json* Attr(const Json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool Truthy(const Json* value) { return value != nullptr && PyTruthy(*value); }

bool IsString(const Json* value, std::string_view text) {
  return value != nullptr && value->is_string() && value->get_ref<const std::string&>() == text;
}

// Python's s.split(sep)[0] and s.split(sep)[-1].
std::string_view BeforeFirst(std::string_view s, std::string_view sep) {
  const size_t p = s.find(sep);
  return p == std::string_view::npos ? s : s.substr(0, p);
}
std::string_view AfterLast(std::string_view s, std::string_view sep) {
  const size_t p = s.rfind(sep);
  return p == std::string_view::npos ? s : s.substr(p + sep.size());
}
// Python's s.strip('\n'): only newlines, not other whitespace.
std::string_view StripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// The template's macro visible_text(content).
std::string VisibleText(const Json* content) {
  // Undefined (no "content" key) passes `is iterable and is not mapping` and loops over
  // nothing.
  if (content == nullptr) return "";
  if (content->is_string()) return content->get<std::string>();
  if (content->is_array()) {
    std::string out;
    for (const Json& item : *content) {
      if (item.is_object()) {
        // `item is mapping and item.type == 'text'` -> {{ item.text }}; other parts
        // (images, ...) print nothing.
        if (IsString(Attr(item, "type"), "text")) {
          if (const Json* text = Attr(item, "text")) out += PyStr(*text);
        }
      } else if (item.is_string()) {
        out += item.get_ref<const std::string&>();
      }
    }
    return out;
  }
  // The else branch, `{{ content }}`: str() of a dict, a number, None ("None"), ...
  return PyStr(*content);
}

// One item of a non-string tool message content:
// `tr.output if tr.output is defined else (tr.text if tr.type == 'text' and tr.text is
// defined else tr)`, printed with str().
std::string ToolResultText(const Json& tr) {
  if (const Json* output = Attr(tr, "output")) return PyStr(*output);
  if (IsString(Attr(tr, "type"), "text")) {
    if (const Json* text = Attr(tr, "text")) return PyStr(*text);
  }
  return PyStr(tr);
}

// message.content, with a null content read as "" when `null_as_empty`
// (ChatTemplateOptions::null_content_as_empty).
const Json* Content(const Json& message, bool null_as_empty) {
  static const Json kEmpty = "";
  const Json* content = Attr(message, "content");
  return content != nullptr && content->is_null() && null_as_empty ? &kEmpty : content;
}

// Appends one assistant turn. `after_last_user` is the template's
// `loop.index0 > ns.last_user_index`: reasoning is kept only for the turns after the last
// user message (interleaved thinking within the current tool-use loop).
Status RenderAssistant(const Json& message, const Json* message_content, const std::string& where,
                       bool after_last_user, bool& has_tool_calls, std::string& out) {
  out += kRoleBegin;
  out += "ai\n";
  std::string content = VisibleText(message_content);
  std::string reasoning;
  const Json* reasoning_content = Attr(message, "reasoning_content");
  if (reasoning_content != nullptr && reasoning_content->is_string()) {
    // A string reasoning_content wins, even "", and the content is then printed as is.
    reasoning = reasoning_content->get<std::string>();
  } else if (content.find("</think>") != std::string::npos) {
    // content.split('</think>')[0].strip('\n').split('<think>')[-1].strip('\n'), and the
    // content becomes content.split('</think>')[-1].strip('\n').
    reasoning = StripNewlines(AfterLast(StripNewlines(BeforeFirst(content, "</think>")), "<think>"));
    content = std::string(StripNewlines(AfterLast(content, "</think>")));
  }
  if (!reasoning.empty() && after_last_user) out += "<think>\n" + reasoning + "\n</think>\n\n";
  out += content;

  const Json* tool_calls = Attr(message, "tool_calls");
  has_tool_calls = Truthy(tool_calls);
  if (has_tool_calls) {
    // The template loops over tool_calls and reads `.name` from each item; the items of a
    // string or an object (characters, keys) have none, so jinja2 fails on them.
    if (!tool_calls->is_array()) {
      return Error("{}.tool_calls: expected an array of tool calls, found {}", where, JsonTypeName(*tool_calls));
    }
    out += "\n";
    out += kToolCallBegin;
    out += "\n";
    for (size_t j = 0; j < tool_calls->size(); ++j) {
      const Json& tool_call = (*tool_calls)[j];
      const std::string call_where = fmt::format("{}.tool_calls[{}]", where, j);
      // `{% if tool_call.function %}{% set tool_call = tool_call.function %}`: the OpenAI
      // shape {"function": {"name", "arguments"}}, or the flat {"name", "arguments"}.
      const Json* function = Attr(tool_call, "function");
      const Json& call = Truthy(function) ? *function : tool_call;
      const std::string fn_where = Truthy(function) ? call_where + ".function" : call_where;
      const Json* name = Attr(call, "name");
      if (name == nullptr || !name->is_string()) {
        // '<invoke name="' + tool_call.name + '">': Undefined or non-str -> jinja2 raises.
        return Error("{}.name: expected a string (the tool's name), found {}", fn_where,
                     name == nullptr ? std::string("nothing") : JsonTypeName(*name));
      }
      out += "<invoke name=\"" + name->get<std::string>() + "\">\n";
      // `for k, v in tool_call.arguments.items()`: only a dict has items().
      const Json* arguments = Attr(call, "arguments");
      if (arguments == nullptr || !arguments->is_object()) {
        return Error("{}.arguments: expected an object (or a string holding a JSON object), found {}", fn_where,
                     arguments == nullptr ? std::string("nothing") : JsonTypeName(*arguments));
      }
      for (const auto& [key, value] : arguments->items()) {
        // `v | tojson if v is not string else v`: strings raw, everything else JSON.
        out += "<parameter name=\"" + key + "\">";
        out += value.is_string() ? value.get<std::string>() : PyJsonDumps(value);
        out += "</parameter>\n";
      }
      out += "</invoke>\n";
    }
    out += kToolCallEnd;
    // `last_tool_call.name = message.tool_calls[-1].function.name`: jinja2 raises when the
    // last call has no "function" key (attribute lookup on Undefined), even in flat form.
    if (Attr(tool_calls->back(), "function") == nullptr) {
      return Error("{}.tool_calls[{}]: expected a \"function\" key (the template reads tool_calls[-1].function.name)",
                   where, tool_calls->size() - 1);
    }
  }
  out += kEndOfTurn;
  out += "\n";
  return Status::Ok();
}

// Appends one tool message; `first_of_run` / `last_of_run` say whether it opens / closes a
// run of consecutive tool messages, which share one "]~b]tool" turn.
Status RenderTool(const Json* content, const std::string& where, bool first_of_run, bool last_of_run,
                  std::string& out) {
  if (first_of_run) {
    out += kRoleBegin;
    out += "tool";
  }
  if (content != nullptr && content->is_string()) {
    out += "\n<response>" + content->get<std::string>() + "</response>";
  } else if (content != nullptr) {
    // `{% for tr in message.content %}` (note the "\n" before "</response>" here): a list
    // gives its items, a dict its keys; None, numbers and booleans are not iterable.
    if (content->is_array()) {
      for (const Json& tr : *content) out += "\n<response>" + ToolResultText(tr) + "\n</response>";
    } else if (content->is_object()) {
      for (const auto& [key, value] : content->items()) out += "\n<response>" + key + "\n</response>";
    } else {
      return Error("{}.content: expected a string or an array of content parts, found {}", where,
                   JsonTypeName(*content));
    }
  }  // No "content" key: Undefined iterates as empty.
  if (last_of_run) {
    out += kEndOfTurn;
    out += "\n";
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> RenderChatTemplate(const Json& messages, const Json& tools, const ChatTemplateOptions& options) {
  if (!messages.is_array()) {
    return Error("messages: expected an array of message objects, found {}", JsonTypeName(messages));
  }
  if (JsonNestingExceeds(messages) || JsonNestingExceeds(tools)) {
    return Error("messages/tools: expected JSON nested at most {} levels deep, found deeper", kMaxJsonNesting);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object()) return Error("messages[{}]: expected a message object, found {}", i, JsonTypeName(m));
    const Json* role = Attr(m, "role");
    if (role == nullptr || !role->is_string()) {
      return Error("messages[{}].role: expected a string, found {}", i,
                   role == nullptr ? std::string("nothing") : JsonTypeName(*role));
    }
  }
  if (!tools.is_null() && !tools.is_array()) {
    return Error("tools: expected an array of tools or null, found {}", JsonTypeName(tools));
  }
  auto role_of = [&](size_t i) -> const std::string& { return messages[i].at("role").get_ref<const std::string&>(); };

  // Only a first message with role "system" is the system message; the rest is the
  // conversation (a later system message matches no branch of the loop and is dropped).
  const Json* system = nullptr;
  size_t first = 0;
  if (!messages.empty() && role_of(0) == "system") {
    system = &messages[0];
    first = 1;
  }
  // Options that fill the system message's fields (see ChatTemplateOptions).
  Json filled_system;
  if (options.current_date || options.current_location) {
    filled_system = system ? *system : Json{{"role", "system"}};
    if (options.current_date && !filled_system.contains("current_date")) {
      filled_system["current_date"] = *options.current_date;
    }
    if (options.current_location && !filled_system.contains("current_location")) {
      filled_system["current_location"] = *options.current_location;
    }
    system = &filled_system;
  }
  const size_t n = messages.size() - first;
  // ns.last_user_index: index (in the conversation) of the last user message, or -1.
  long last_user_index = -1;
  for (size_t i = 0; i < n; ++i) {
    if (role_of(first + i) == "user") last_user_index = static_cast<long>(i);
  }

  std::string out;
  out += kBeginOfSequence;
  out += kRoleBegin;
  out += "system\n";
  // build_system_message(system_message)
  const bool null_as_empty = options.null_content_as_empty;
  const Json* system_content = system ? Content(*system, null_as_empty) : nullptr;
  if (Truthy(system_content)) {
    out += VisibleText(system_content);
  } else {
    out += options.model_identity.value_or("You are a helpful assistant.");
  }
  for (const auto& [key, label] : {std::pair<std::string, std::string>{"current_date", "Current date: "},
                                   {"current_location", "Current location: "}}) {
    const Json* value = system ? Attr(*system, key) : nullptr;
    if (!Truthy(value)) continue;
    // '\n' ~ 'Current date: ' + value: Python's str + non-str raises TypeError.
    if (!value->is_string()) {
      return Error("messages[0].{}: expected a string, found {}", key, JsonTypeName(*value));
    }
    out += "\n" + label + value->get<std::string>();
  }

  if (!tools.empty()) {  // `{% if tools %}`: null and [] render no tools block.
    out += "\n\n# Tools\nYou may call one or more tools to assist with the user query.\n"
           "Here are the tools available in JSONSchema format:\n";
    out += "\n<tools>\n";
    for (size_t i = 0; i < tools.size(); ++i) {
      // render_tool_namespace: <tool>{{ tool.function | tojson }}</tool>; json.dumps of
      // Undefined (no "function") raises TypeError.
      const Json* function = Attr(tools[i], "function");
      if (function == nullptr) {
        return Error("tools[{}]: expected an object with a \"function\" key, found {}", i,
                     tools[i].is_object() ? std::string("an object without one") : JsonTypeName(tools[i]));
      }
      out += "<tool>" + PyJsonDumps(*function) + "</tool>\n";
    }
    out += "</tools>\n\n";
    out += "When making tool calls, use XML format to invoke tools and pass parameters:\n";
    out += "\n";
    out += kToolCallBegin;
    out += "\n<invoke name=\"tool-name-1\">\n"
           "<parameter name=\"param-key-1\">param-value-1</parameter>\n"
           "<parameter name=\"param-key-2\">param-value-2</parameter>\n"
           "...\n"
           "</invoke>\n";
    out += kToolCallEnd;
  }
  out += kEndOfTurn;
  out += "\n";

  // last_tool_call.name is none: no assistant turn with tool calls yet, or the latest
  // assistant turn had none. User turns do not reset it.
  bool tool_call_open = false;
  for (size_t i = 0; i < n; ++i) {
    const Json& m = messages[first + i];
    const std::string& role = role_of(first + i);
    const std::string where = fmt::format("messages[{}]", first + i);
    if (role == "assistant") {
      M2_RETURN_IF_ERROR(
          RenderAssistant(m, Content(m, null_as_empty), where, static_cast<long>(i) > last_user_index,
                          tool_call_open, out));
    } else if (role == "tool") {
      if (!tool_call_open) {
        return Error(
            "{}: Message has tool role, but there was no previous assistant message with a tool call! "
            "(rejected by the chat template)",
            where);
      }
      const bool first_of_run = i == 0 || role_of(first + i - 1) != "tool";
      const bool last_of_run = i + 1 == n || role_of(first + i + 1) != "tool";
      M2_RETURN_IF_ERROR(RenderTool(Content(m, null_as_empty), where, first_of_run, last_of_run, out));
    } else if (role == "user") {
      out += kRoleBegin;
      out += "user\n";
      out += VisibleText(Content(m, null_as_empty));
      out += kEndOfTurn;
      out += "\n";
    }
    // Any other role (a later "system", "developer", ...) renders nothing.
  }

  if (options.add_generation_prompt) {
    out += kRoleBegin;
    out += "ai\n<think>\n";
  }
  return out;
}

Status ParseToolCallArguments(Json& messages) {
  if (!messages.is_array()) return Status::Ok();  // RenderChatTemplate reports it.
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& m = messages[i];
    if (!m.is_object() || !IsString(Attr(m, "role"), "assistant")) continue;
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (size_t j = 0; j < calls->size(); ++j) {
      Json& tool_call = (*calls)[j];
      if (!tool_call.is_object()) continue;
      // The object whose arguments the template reads (see RenderAssistant).
      const bool nested = Truthy(Attr(tool_call, "function"));
      Json& call = nested ? tool_call["function"] : tool_call;
      if (!call.is_object()) continue;
      auto arguments = call.find("arguments");
      if (arguments == call.end() || !arguments->is_string()) continue;
      const std::string where =
          fmt::format("messages[{}].tool_calls[{}]{}.arguments", i, j, nested ? ".function" : "");
      const std::string& text = arguments->get_ref<const std::string&>();
      if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        *arguments = Json::object();
        continue;
      }
      M2_ASSIGN_OR_RETURN(Json parsed, ParseOrderedJson(text, where));
      if (!parsed.is_object()) {
        return Error("{}: expected a JSON object, found {}", where, JsonTypeName(parsed));
      }
      *arguments = std::move(parsed);
    }
  }
  return Status::Ok();
}

Result<ChatRequest> ChatRequestFromJson(Json request) {
  if (!request.is_object()) {
    return Error("chat request: expected an object like {{\"messages\": [...], \"tools\": [...]}}, found {}",
                 JsonTypeName(request));
  }
  ChatRequest out;
  auto messages = request.find("messages");
  if (messages == request.end()) return Error("chat request: expected a \"messages\" array, found none");
  if (!messages->is_array()) {
    return Error("chat request: expected \"messages\" to be an array, found {}", JsonTypeName(*messages));
  }
  out.messages = std::move(*messages);
  auto tools = request.find("tools");
  if (tools != request.end()) {
    if (!tools->is_null() && !tools->is_array()) {
      return Error("chat request: expected \"tools\" to be an array or null, found {}", JsonTypeName(*tools));
    }
    out.tools = std::move(*tools);
  }
  M2_RETURN_IF_ERROR(ParseToolCallArguments(out.messages));
  return out;
}

}  // namespace m2::chat
