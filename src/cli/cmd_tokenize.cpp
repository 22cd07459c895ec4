// Placeholder: filled in by the tokenizer / chat work.
#include "cli/commands.h"

namespace m2::cli {

void AddTokenize(CLI::App& app, Runner& run) {}

}  // namespace m2::cli
