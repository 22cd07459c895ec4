// Subcommands of the `m2` program. Each Add* registers its options on the app and
// sets the callback that runs it; the callback returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace m2::cli {

using Runner = std::function<int()>;

void AddInspect(CLI::App& app, Runner& run);
void AddGenerate(CLI::App& app, Runner& run);
void AddChat(CLI::App& app, Runner& run);         // cmd_chat.cpp
void AddPerplexity(CLI::App& app, Runner& run);   // cmd_perplexity.cpp
void AddLogits(CLI::App& app, Runner& run);
void AddTokenize(CLI::App& app, Runner& run);    // tokenize + detokenize (cmd_tokenize.cpp)
void AddChatTools(CLI::App& app, Runner& run);   // render + parse (cmd_chat_tools.cpp)
void AddBench(CLI::App& app, Runner& run);
void AddMakeBenchModel(CLI::App& app, Runner& run);
void AddQuantize(CLI::App& app, Runner& run);
void AddServe(CLI::App& app, Runner& run);       // cmd_serve.cpp

// "1,2,3" or "1 2 3" -> ids; an error names the bad item.
Result<std::vector<int32_t>> ParseIdList(const std::string& text);
// Prints "m2: error: <message>" to stderr and returns exit code 1.
int Fail(const Status& status);

}  // namespace m2::cli
