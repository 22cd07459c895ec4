// m2 generate: a continuation of one prompt, given as text (-p / -f, tokenized with the
// model folder's tokenizer.json, optionally wrapped as a chat turn with --chat) or as
// token ids (--ids: prints the new ids, no tokenizer needed). Text streams to stdout as
// it is decoded; timing goes to stderr.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>

#include "base/mapped_file.h"
#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/parallel_flags.h"
#include "cli/sampling_flags.h"
#include "model/model.h"
#include "runtime/generator.h"
#include "text/tokenizer.h"

namespace m2::cli {

namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string file;
  std::string ids;
  bool chat = false;
  std::string system;
  SamplingFlags sampling;
  EngineFlags engine;
  CLI::Option *prompt_opt = nullptr, *file_opt = nullptr, *ids_opt = nullptr, *system_opt = nullptr;
};

// Ctrl-C ends the generation early (the text so far and the statistics still print);
// a second Ctrl-C kills as usual.
std::atomic<bool> g_stop{false};
extern "C" void OnSigintDuringGenerate(int) {
  g_stop.store(true);
  signal(SIGINT, SIG_DFL);
}

std::string ReadAll(FILE* f) {
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  return text;
}

Result<std::unique_ptr<text::Tokenizer>> LoadTokenizer(const std::string& dir, const char* why) {
  auto tok = text::Tokenizer::Load(dir);
  if (!tok.ok()) return Status(tok.status()).WithContext(std::string(why) + " need the model's tokenizer.json");
  return tok;
}

int Run(GenerateOptions& o) {
  const LoadOptions load{.threads = o.engine.threads, .activations = ActivationsOf(o.engine.activations), .attention = AttentionOf(o.engine.attention), .weights = o.engine.weights};
  auto par = StartParallel(o.engine.parallel, o.model, load);
  if (!par.ok()) return Fail(par.status());
  if (par->exit_code) return *par->exit_code;  // a rank > 0: it has followed rank 0
  const int sources = static_cast<int>(o.prompt_opt->count() > 0) + static_cast<int>(o.file_opt->count() > 0) +
                      static_cast<int>(o.ids_opt->count() > 0);
  if (sources != 1)
    return Fail(Error("give the prompt one way: -p TEXT, -f FILE or --ids 1,2,3 (found {})",
                      sources == 0 ? "none" : "several"));
  const bool ids_mode = o.ids_opt->count() > 0;
  if (ids_mode && o.chat) return Fail(Error("--chat wraps a text prompt: use -p or -f, not --ids"));
  if (o.system_opt->count() && !o.chat) return Fail(Error("--system applies to --chat prompts only"));

  std::vector<int32_t> prompt;
  if (ids_mode) {
    auto ids = ParseIdList(o.ids);
    if (!ids.ok()) return Fail(ids.status());
    prompt = std::move(*ids);
  }
  auto model = LoadModel(o.model, load, *par);
  if (!model.ok()) return Fail(model.status());
  if (o.chat) {
    if (Status st = CheckM2ChatFormat((*model)->config()); !st.ok()) return Fail(st);
  }
  auto sampling = ResolveSampling(o.sampling, o.model, (*model)->config());
  if (!sampling.ok()) return Fail(sampling.status());
  auto engine_opts = ResolveEngineFlags(o.engine, (*model)->config());
  if (!engine_opts.ok()) return Fail(engine_opts.status());

  std::unique_ptr<text::Tokenizer> tokenizer;
  if (!ids_mode || !o.sampling.stop.empty()) {
    auto tok = LoadTokenizer(o.model, ids_mode ? "stop strings" : "text prompts");
    if (!tok.ok()) return Fail(tok.status());
    tokenizer = std::move(*tok);
  }
  runtime::GenerateOptions gen_opts;
  gen_opts.max_new_tokens = sampling->max_tokens;
  gen_opts.eos_ids = sampling->eos_ids;
  gen_opts.ignore_eos = o.sampling.ignore_eos;
  gen_opts.stop_strings = o.sampling.stop;
  gen_opts.cancel = &g_stop;

  if (!ids_mode) {
    std::string text = o.prompt;
    if (o.file_opt->count()) {
      if (o.file == "-") {
        text = ReadAll(stdin);
      } else {
        auto t = ReadTextFile(o.file);
        if (!t.ok()) return Fail(t.status());
        text = std::move(*t);
      }
    }
    if (o.chat) {
      chat::Json messages = chat::Json::array();
      if (o.system_opt->count()) messages.push_back({{"role", "system"}, {"content", o.system}});
      messages.push_back({{"role", "user"}, {"content", text}});
      auto rendered = chat::RenderChatTemplate(messages, nullptr, {});
      if (!rendered.ok()) return Fail(rendered.status());
      text = std::move(*rendered);
      // The chat format ends the assistant's turn with "[e~[".
      if (auto eot = tokenizer->TokenId("[e~["); eot.has_value()) gen_opts.eos_ids.push_back(*eot);
    }
    // Special tokens written in the prompt ("]~b]user", "<think>") are the model's own.
    prompt = tokenizer->Encode(text, /*parse_special=*/true);
    if (prompt.empty()) return Fail(Error("the prompt is empty after tokenization"));
  }

  runtime::Generator generator(**model, tokenizer.get(), *engine_opts);
  runtime::Sampler sampler(sampling->params);
  bool first = true;
  runtime::TokenCallback on_token;
  runtime::TextCallback on_text;
  if (ids_mode) {
    on_token = [&first](int32_t id) {
      std::printf("%s%d", first ? "" : ",", id);
      std::fflush(stdout);
      first = false;
    };
  } else {
    on_text = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  }
  signal(SIGINT, OnSigintDuringGenerate);
  auto result = generator.Generate(prompt, sampler, gen_opts, on_text, on_token);
  signal(SIGINT, SIG_DFL);
  if (!result.ok()) {
    if (!first) std::printf("\n");
    return Fail(result.status());
  }
  // Ids are a line; text ends as the model ended it, plus a newline on a terminal only so
  // that piped output is exactly the generated text.
  if (ids_mode || isatty(STDOUT_FILENO)) std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "%s\nstopped: %s%s; sampling: %s\n", result->stats.Summary().c_str(),
               runtime::StopReasonName(result->stop_reason),
               result->stop_string.empty() ? "" : (" ('" + result->stop_string + "')").c_str(),
               DescribeSampling(sampling->params).c_str());
  return 0;
}

}  // namespace

void AddGenerate(CLI::App& app, Runner& run) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate a continuation of a prompt (text, or token ids), streaming it to standard output.");
  cmd->add_option("-m,--model", o->model, "Model folder (config.json + safetensors [+ tokenizer.json])")->required();
  o->prompt_opt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text (special tokens like ']~b]user' are parsed)");
  o->file_opt = cmd->add_option("-f,--file", o->file, "Read the prompt text from FILE ('-' for standard input)");
  o->ids_opt = cmd->add_option("--ids", o->ids, "Prompt token ids, comma separated (e.g. 1,2,3); prints the new ids");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt as one user turn of the chat format, with the generation prompt");
  o->system_opt = cmd->add_option("--system", o->system, "System message for --chat");
  AddSamplingFlags(cmd, o->sampling,
                   "Most tokens to generate (default: generation_config.json max_new_tokens, else 256)");
  AddEngineFlags(cmd, o->engine);
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
