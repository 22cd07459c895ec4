// m2 tokenize / m2 detokenize: the tokenizer from the command line, for debugging and
// scripts. `tokenize` prints the ids comma separated (ready for --ids of detokenize,
// logits and generate); with --json it prints {"ids": [...], "tokens": [...]}, the token
// strings as written in tokenizer.json. `detokenize` writes the decoded text exactly,
// with no newline added, so `m2 detokenize` of `m2 tokenize -f F` reproduces F.
#include <cstdio>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "cli/commands.h"
#include "text/tokenizer.h"

namespace m2::cli {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string file;
  bool no_special = false;
  bool json = false;
};

struct DetokenizeOptions {
  std::string model;
  std::string ids;
  bool skip_special = false;
};

int RunTokenize(const TokenizeOptions& o, bool prompt_given) {
  auto tok = text::Tokenizer::Load(o.model);
  if (!tok.ok()) return Fail(tok.status());
  std::string input;
  if (prompt_given) {
    input = o.prompt;
  } else if (!o.file.empty()) {
    auto data = ReadTextFile(o.file);
    if (!data.ok()) return Fail(data.status());
    input = std::move(*data);
  } else {
    input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::vector<int32_t> ids = (*tok)->Encode(input, !o.no_special);
  if (o.json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (int32_t id : ids) tokens.push_back((*tok)->IdToToken(id).value_or(""));
    nlohmann::json out = {{"ids", ids}, {"tokens", tokens}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int RunDetokenize(const DetokenizeOptions& o) {
  auto ids = ParseIdList(o.ids);
  if (!ids.ok()) return Fail(ids.status());
  auto tok = text::Tokenizer::Load(o.model);
  if (!tok.ok()) return Fail(tok.status());
  for (int32_t id : *ids)
    if ((*tok)->TokenBytes(id).empty())
      return Fail(Error("token id {} is not in the tokenizer (ids go up to {})", id, (*tok)->vocab_size() - 1));
  std::string text = (*tok)->Decode(*ids, o.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

void AddTokenize(CLI::App& app, Runner& run) {
  auto t = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (from -p, -f or standard input).");
  cmd->add_option("-m,--model", t->model, "Model folder holding tokenizer.json, or a tokenizer.json file")->required();
  CLI::Option* prompt = cmd->add_option("-p,--prompt", t->prompt, "Text to tokenize");
  cmd->add_option("-f,--file", t->file, "File whose bytes to tokenize")->excludes(prompt);
  cmd->add_flag("--no-special", t->no_special, "Treat special tokens written in the text as plain text");
  cmd->add_flag("--json", t->json, "Print {\"ids\": [...], \"tokens\": [...]} instead of the bare ids");
  cmd->callback([t, prompt, &run] {
    bool prompt_given = prompt->count() > 0;
    run = [t, prompt_given] { return RunTokenize(*t, prompt_given); };
  });

  auto d = std::make_shared<DetokenizeOptions>();
  CLI::App* dcmd = app.add_subcommand("detokenize", "Print the text of token ids, exactly (no newline added).");
  dcmd->add_option("-m,--model", d->model, "Model folder holding tokenizer.json, or a tokenizer.json file")->required();
  dcmd->add_option("--ids", d->ids, "Token ids, comma separated (e.g. 1,2,3)")->required();
  dcmd->add_flag("--skip-special", d->skip_special, "Leave special tokens out of the text");
  dcmd->callback([d, &run] { run = [d] { return RunDetokenize(*d); }; });
}

}  // namespace m2::cli
