// m2 chat: an interactive, streaming, multi-turn conversation in the chat format.
//
// Reads one user message per line from standard input (a terminal or a pipe). The
// model's reasoning is shown apart from its answer: dim on a terminal, and on a pipe as
// lines starting "[thinking] " and "[answer] ", so scripts can tell them apart. Tool
// calls and results are shown as "[tool call] ..." / "[tool result] ...". Statistics go
// to standard error after each reply.
//
// Ctrl-C stops the reply being generated (the partial reply stays in the history); at
// the prompt, a second Ctrl-C in a row quits, as do end of input and "/exit".
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <memory>

#include "base/mapped_file.h"
#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/parallel_flags.h"
#include "cli/sampling_flags.h"
#include "cli/shell_tools.h"
#include "model/model.h"
#include "runtime/chat_session.h"
#include "runtime/generator.h"
#include "text/tokenizer.h"

namespace m2::cli {

namespace {

struct ChatOptions {
  std::string model;
  std::string system;
  std::string tools;
  std::string save_history;
  double tool_timeout = 60;
  int max_tool_rounds = 8;
  SamplingFlags sampling;
  EngineFlags engine;
};

// Set by the SIGINT handler; read by the generation loop (as its cancel flag) and the
// line reader.
std::atomic<bool> g_interrupted{false};

extern "C" void OnSigintDuringChat(int) { g_interrupted.store(true); }

enum class ReadStatus { kLine, kEof, kInterrupted };

// Reads one line from fd 0 with read(2), so that Ctrl-C (SIGINT installed without
// SA_RESTART) interrupts the wait, which std::getline would retry silently.
class LineReader {
 public:
  ReadStatus Next(std::string& line) {
    line.clear();
    while (true) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return ReadStatus::kLine;
      }
      if (eof_) {
        if (buf_.empty()) return ReadStatus::kEof;
        line.swap(buf_);  // a last line without a newline
        return ReadStatus::kLine;
      }
      if (g_interrupted.exchange(false)) return ReadStatus::kInterrupted;
      char chunk[4096];
      const ssize_t n = read(STDIN_FILENO, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;  // the flag is checked at the top
      if (n <= 0) {
        eof_ = true;
        continue;
      }
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  std::string buf_;
  bool eof_ = false;
};

// Shows one reply as it streams: reasoning and answer apart, tool traffic marked.
class ReplyPrinter {
 public:
  explicit ReplyPrinter(bool tty) : tty_(tty) {}

  void Reasoning(std::string_view text) {
    if (section_ != Section::kReasoning) {
      EndSection();
      Write(tty_ ? "\x1b[2m" : "[thinking] ");
      section_ = Section::kReasoning;
    }
    Write(text);
  }
  void Content(std::string_view text) {
    if (section_ != Section::kContent) {
      EndSection();
      if (!tty_) Write("[answer] ");
      section_ = Section::kContent;
    }
    Write(text);
  }
  void Line(const std::string& text) {
    EndSection();
    Write(tty_ ? "\x1b[36m" + text + "\x1b[0m\n" : text + "\n");
  }
  // Ends the reply's last section with a newline.
  void EndSection() {
    if (section_ == Section::kNone) return;
    if (section_ == Section::kReasoning && tty_) Write("\x1b[0m");
    if (!at_line_start_) Write("\n");
    if (section_ == Section::kReasoning && tty_) Write("\n");
    section_ = Section::kNone;
  }

 private:
  enum class Section { kNone, kReasoning, kContent };
  void Write(std::string_view s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    at_line_start_ = s.back() == '\n';
  }
  bool tty_;
  Section section_ = Section::kNone;
  bool at_line_start_ = true;
};

std::string OneLine(std::string s, size_t max = 400) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s)
    if (c == '\n') c = ' ';
  if (s.size() > max) s = s.substr(0, max) + "...";
  return s;
}

Status SaveHistory(const std::string& path, const runtime::ChatSession& session) {
  chat::Json request = {{"messages", session.messages()}};
  if (!session.tools().is_null()) request["tools"] = session.tools();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error("--save-history: cannot write '{}'", path);
  out << request.dump(2, ' ', false, chat::Json::error_handler_t::replace) << "\n";
  if (!out) return Error("--save-history: error while writing '{}'", path);
  return Status::Ok();
}

int Run(ChatOptions& o) {
  const LoadOptions load{.threads = o.engine.threads, .activations = ActivationsOf(o.engine.activations), .attention = AttentionOf(o.engine.attention), .weights = o.engine.weights};
  auto par = StartParallel(o.engine.parallel, o.model, load);
  if (!par.ok()) return Fail(par.status());
  if (par->exit_code) return *par->exit_code;  // a rank > 0: it has followed rank 0
  auto model = LoadModel(o.model, load, *par);
  if (!model.ok()) return Fail(model.status());
  if (Status st = CheckM2ChatFormat((*model)->config()); !st.ok()) return Fail(st);
  auto sampling = ResolveSampling(o.sampling, o.model, (*model)->config());
  if (!sampling.ok()) return Fail(sampling.status());
  auto engine_opts = ResolveEngineFlags(o.engine, (*model)->config());
  if (!engine_opts.ok()) return Fail(engine_opts.status());
  auto tokenizer = text::Tokenizer::Load(o.model);
  if (!tokenizer.ok()) return Fail(Status(tokenizer.status()).WithContext("m2 chat needs the model's tokenizer.json"));

  std::unique_ptr<runtime::ShellTools> shell_tools;
  chat::Json tools = nullptr;
  if (!o.tools.empty()) {
    auto text = ReadTextFile(o.tools);
    if (!text.ok()) return Fail(Status(text.status()).WithContext("--tools"));
    auto json = chat::ParseOrderedJson(*text, "'" + o.tools + "'");
    if (!json.ok()) return Fail(Status(json.status()).WithContext("--tools"));
    auto st = runtime::ShellTools::FromJson(*json, "--tools '" + o.tools + "'");
    if (!st.ok()) return Fail(st.status());
    shell_tools = std::make_unique<runtime::ShellTools>(std::move(*st));
    tools = shell_tools->tools();
  }

  runtime::Generator generator(**model, tokenizer->get(), *engine_opts);
  runtime::Sampler sampler(sampling->params);
  runtime::GenerateOptions gen_opts;
  gen_opts.max_new_tokens = sampling->max_tokens;
  gen_opts.eos_ids = sampling->eos_ids;
  gen_opts.ignore_eos = o.sampling.ignore_eos;
  gen_opts.stop_strings = o.sampling.stop;
  gen_opts.cancel = &g_interrupted;
  runtime::ModelTextGenerator backend(generator, sampler, gen_opts);

  runtime::ChatSessionOptions session_opts;
  session_opts.max_tool_rounds = o.max_tool_rounds;
  auto session = runtime::ChatSession::Create(backend, tools, session_opts);
  if (!session.ok()) return Fail(Status(session.status()).WithContext("--tools"));
  if (!o.system.empty()) {
    if (Status s = session->AddMessage({{"role", "system"}, {"content", o.system}}); !s.ok()) return Fail(s);
  }

  // Ctrl-C interrupts (no SA_RESTART) instead of killing the program.
  struct sigaction sa = {};
  sa.sa_handler = OnSigintDuringChat;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);

  const bool tty_in = isatty(STDIN_FILENO), tty_out = isatty(STDOUT_FILENO);
  if (tty_in)
    std::fprintf(stderr, "m2 chat: type a message and press Enter. Ctrl-C stops a reply; /reset starts over; "
                         "/exit, Ctrl-D or Ctrl-C twice quits.\n");
  ReplyPrinter printer(tty_out);
  runtime::ChatCallbacks cb;
  cb.on_reasoning = [&](std::string_view t) { printer.Reasoning(t); };
  cb.on_content = [&](std::string_view t) { printer.Content(t); };
  cb.on_tool_call = [&](const chat::ToolCall& call) {
    printer.Line("[tool call] " + call.name + " " + call.arguments.dump(-1, ' ', false, chat::Json::error_handler_t::replace));
  };
  cb.on_tool_result = [&](const chat::ToolCall& call, const std::string& result, bool ok) {
    printer.Line(std::string(ok ? "[tool result] " : "[tool error] ") + call.name + ": " + OneLine(result));
  };
  cb.on_reply_done = [&](const runtime::GenerationResult& r) {
    if (r.stop_reason == runtime::StopReason::kCancelled) printer.Line("[interrupted]");
    printer.EndSection();
    std::fprintf(stderr, "[stats] %s; stopped: %s\n", r.stats.Summary().c_str(),
                 runtime::StopReasonName(r.stop_reason));
  };
  runtime::ToolExecutor executor;
  if (shell_tools) {
    executor = [&](const chat::ToolCall& call) {
      // The command runs in its own process group, so Ctrl-C reaches only us: the flag
      // stops it.
      return shell_tools->Run(call, o.tool_timeout, &g_interrupted);
    };
  }

  LineReader reader;
  bool interrupted_at_prompt = false;
  std::string line;
  int exit_code = 0;
  while (true) {
    if (tty_in) {
      std::fputs(tty_out ? "\x1b[1m> \x1b[0m" : "> ", stdout);
      std::fflush(stdout);
    }
    const ReadStatus rs = reader.Next(line);
    if (rs == ReadStatus::kEof) break;
    if (rs == ReadStatus::kInterrupted) {
      if (interrupted_at_prompt) break;
      interrupted_at_prompt = true;
      std::fprintf(stderr, "\n(Ctrl-C again, /exit or Ctrl-D to quit)\n");
      continue;
    }
    interrupted_at_prompt = false;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      auto fresh = runtime::ChatSession::Create(backend, tools, session_opts);
      session = std::move(fresh);
      if (!o.system.empty()) (void)session->AddMessage({{"role", "system"}, {"content", o.system}});
      generator.Reset();
      std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    g_interrupted.store(false);
    auto turn = session->Send(line, cb, executor);
    g_interrupted.store(false);
    if (!turn.ok()) {
      printer.EndSection();
      Fail(turn.status());
      // The history is as before the message; when it no longer fits, only a fresh start helps.
      std::fprintf(stderr, "(the message was not added; /reset starts a new conversation)\n");
      exit_code = 1;
      continue;
    }
    if (!o.save_history.empty()) {
      if (Status s = SaveHistory(o.save_history, *session); !s.ok()) return Fail(s);
    }
  }
  if (tty_in) std::fputs("\n", stdout);
  if (!o.save_history.empty()) {
    if (Status s = SaveHistory(o.save_history, *session); !s.ok()) return Fail(s);
  }
  return exit_code;
}

}  // namespace

void AddChat(CLI::App& app, Runner& run) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "Interactive multi-turn chat (one message per line on standard input), streaming reasoning and answer.");
  cmd->add_option("-m,--model", o->model, "Model folder (config.json + safetensors + tokenizer.json)")->required();
  cmd->add_option("--system", o->system, "System message (default: the chat template's)");
  cmd->add_option("--tools", o->tools,
                  "JSON file: an array of OpenAI tools, each with a \"command\" run by /bin/sh with the call's "
                  "arguments as JSON on standard input; its output is the tool result");
  cmd->add_option("--tool-timeout", o->tool_timeout, "Seconds a tool command may run before it is stopped")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-tool-rounds", o->max_tool_rounds, "Tool rounds per message before control returns to you")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--save-history", o->save_history,
                  "Write the conversation as a chat request ({\"messages\", \"tools\"}) to FILE after each turn");
  AddSamplingFlags(cmd, o->sampling,
                   "Most tokens per reply (default: generation_config.json max_new_tokens, else 256)");
  AddEngineFlags(cmd, o->engine);
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
