// Tools backed by shell commands, for `m2 chat --tools FILE.json`.
//
// The file is a JSON array of OpenAI tools, each with one extra field "command" (beside
// "type" and "function", or inside "function"):
//   [{"type": "function", "command": "python3 weather.py",
//     "function": {"name": "get_weather", "description": "...", "parameters": {...}}}]
// A call runs the command with /bin/sh -c, writes the call's arguments as one JSON object
// to its standard input, and takes its standard output as the tool's result. The model
// never sees "command": it is removed from the tools the template shows.
#pragma once

#include <atomic>
#include <map>
#include <string>

#include "base/status.h"
#include "chat/output_parser.h"
#include "chat/py_format.h"

namespace m2::runtime {

class ShellTools {
 public:
  // `what` names the source in errors.
  static Result<ShellTools> FromJson(const chat::Json& list, const std::string& what);

  // The tools as the chat template should show them ("command" removed).
  const chat::Json& tools() const { return tools_; }

  // Runs one call. Errors: an unknown tool, a command that cannot start, that exits with
  // a non-zero status (its output is in the message), or runs past `timeout_seconds` or
  // until `cancel` is set (then it is killed).
  Result<std::string> Run(const chat::ToolCall& call, double timeout_seconds = 60,
                          const std::atomic<bool>* cancel = nullptr) const;

 private:
  chat::Json tools_ = chat::Json::array();
  std::map<std::string, std::string> commands_;  // tool name -> shell command
};

// Runs `command` with /bin/sh -c in its own process group, feeding `input` to its
// standard input; returns its standard output, or an error as described above (a timeout
// or cancel kills the whole group). Standard error goes to ours.
Result<std::string> RunShellCommand(const std::string& command, const std::string& input, double timeout_seconds,
                                    const std::atomic<bool>* cancel = nullptr);

}  // namespace m2::runtime
