// m2 serve: the OpenAI and Anthropic APIs over HTTP (src/server), for coding agents and SDKs.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/parallel_flags.h"
#include "cli/sampling_flags.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "server/server.h"
#include "text/tokenizer.h"

namespace m2::cli {

namespace {

struct ServeFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string served_model_name;
  std::string reasoning_format = "separate";
  int64_t max_body_mb = 32;
  int http_threads = 64;
  SamplingFlags sampling;
  EngineFlags engine;
};

int Run(const ServeFlags& f) {
  if (f.reasoning_format != "separate" && f.reasoning_format != "inline")
    return Fail(Error("--reasoning-format: expected separate or inline, found '{}'", f.reasoning_format));
  if (f.port < 0 || f.port > 65535) return Fail(Error("--port: expected 0-65535, found {}", f.port));
  const LoadOptions load{.threads = f.engine.threads, .activations = ActivationsOf(f.engine.activations), .attention = AttentionOf(f.engine.attention), .weights = f.engine.weights};
  auto par = StartParallel(f.engine.parallel, f.model, load);
  if (!par.ok()) return Fail(par.status());
  if (par->exit_code) return *par->exit_code;  // a rank > 0: it has followed rank 0
  auto model = LoadModel(f.model, load, *par);
  if (!model.ok()) return Fail(model.status());
  auto tok = text::Tokenizer::Load(f.model);
  if (!tok.ok()) return Fail(Status(tok.status()).WithContext("m2 serve needs the model's tokenizer.json"));
  auto sampling = ResolveSampling(f.sampling, f.model, (*model)->config());
  if (!sampling.ok()) return Fail(sampling.status());
  auto engine_opts = ResolveEngineFlags(f.engine, (*model)->config());
  if (!engine_opts.ok()) return Fail(engine_opts.status());
  auto engine = runtime::Engine::Create(**model, tok->get(), *engine_opts);
  if (!engine.ok()) return Fail(engine.status());

  server::ServeOptions o;
  o.host = f.host;
  o.port = f.port;
  o.api_key = f.api_key;
  o.served_model_name = f.served_model_name;
  if (o.served_model_name.empty())
    o.served_model_name = std::filesystem::path(f.model).lexically_normal().filename().string();
  if (o.served_model_name.empty() || o.served_model_name == ".")
    o.served_model_name = std::filesystem::absolute(f.model).lexically_normal().parent_path().filename().string();
  o.reasoning_inline = f.reasoning_format == "inline";
  o.max_body_bytes = static_cast<size_t>(f.max_body_mb) << 20;
  o.http_threads = f.http_threads;
  o.defaults = sampling->params;
  o.eos_ids = sampling->eos_ids;
  // The chat format ends the assistant's turn with "[e~[".
  if (auto eot = (*tok)->TokenId("[e~["); eot.has_value()) o.eos_ids.push_back(*eot);

  // SIGINT / SIGTERM are taken by a thread of their own (blocked everywhere else), which
  // shuts the server down cleanly: no new requests, running streams cancelled and ended.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  server::Server srv(**model, **tok, **engine, o);
  if (Status st = srv.Bind(); !st.ok()) return Fail(st);
  const runtime::EngineStats es = (*engine)->stats();
  std::fprintf(stderr,
               "m2 serve: listening on http://%s:%d (model '%s'; KV cache %lld tokens in %s, attention %s; %s)\n"
               "  OpenAI:    OPENAI_BASE_URL=http://%s:%d/v1\n  Anthropic: ANTHROPIC_BASE_URL=http://%s:%d\n",
               f.host.c_str(), srv.port(), o.served_model_name.c_str(),
               static_cast<long long>(es.kv_blocks_total * es.block_tokens), KvDtypeName(engine_opts->kv_dtype),
               AttentionName((*model)->attention_math(), engine_opts->kv_dtype),
               f.api_key.empty() ? "no API key" : "API key required", f.host.c_str(), srv.port(), f.host.c_str(),
               srv.port());
  std::fflush(stderr);
  std::thread signals([&srv, set] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "m2 serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv.Shutdown();
  });
  Status st = srv.Serve();
  srv.Shutdown();
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes the signal thread if no signal came
  signals.join();
  if (!st.ok()) return Fail(st);
  std::fprintf(stderr, "m2 serve: stopped\n");
  return 0;
}

}  // namespace

void AddServe(CLI::App& app, Runner& run) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the model over HTTP: OpenAI (/v1/chat/completions, /v1/completions, /v1/models) and Anthropic "
               "(/v1/messages) APIs, with streaming, reasoning and tool calls.");
  cmd->add_option("-m,--model", f->model, "Model folder (config.json + safetensors + tokenizer.json)")->required();
  cmd->add_option("--host", f->host, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", f->port, "Port (default 8080; 0: any free port, printed at start)");
  cmd->add_option("--api-key", f->api_key,
                  "Require this key ('Authorization: Bearer KEY' or 'x-api-key: KEY') on /v1/ endpoints");
  cmd->add_option("--served-model-name", f->served_model_name, "The model id clients use (default: the folder name)");
  cmd->add_option("--reasoning-format", f->reasoning_format,
                  "OpenAI API: 'separate' (reasoning_content, default) or 'inline' (<think>...</think> in content)");
  cmd->add_option("--max-body-mb", f->max_body_mb, "Largest request body in MiB (default 32)")->check(CLI::Range(1, 4096));
  cmd->add_option("--http-threads", f->http_threads, "Connections served at once (default 64)")->check(CLI::Range(2, 4096));
  AddSamplingFlags(cmd, f->sampling, "Default max tokens when a request gives none is the rest of the context");
  AddEngineFlags(cmd, f->engine, /*serving=*/true);
  cmd->callback([f, &run] { run = [f] { return Run(*f); }; });
}

}  // namespace m2::cli
