// m2 serve: the OpenAI and Anthropic HTTP APIs over the serving core (runtime::Engine).
//
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models   (OpenAI)
//   POST /v1/messages, POST /v1/messages/count_tokens                (Anthropic)
//   GET /health, GET /metrics (Prometheus text)
//
// HTTP/1.1 from cpp-httplib (Debian's libcpp-httplib-dev); streaming as server-sent
// events. Each request is rendered with the chat template, tokenized on its HTTP thread
// and submitted to the engine, whose thread runs the model for everyone; the engine's
// callbacks parse the output (chat/output_parser.h) into the API's events, which the
// HTTP thread writes out. A client that goes away is noticed at the next write (or
// liveness check, every 100 ms while nothing is written) and its request cancelled: the
// engine frees its blocks within one step. No request can run a command: this layer
// has no tool executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace m2::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (see Server::port)
  std::string api_key;               // empty: no authentication
  std::string served_model_name;     // the model id reported and accepted; default: the folder name
  size_t max_body_bytes = 32u << 20;
  bool reasoning_inline = false;     // OpenAI: "<think>...</think>" in content instead of reasoning_content
  int http_threads = 64;             // connections served at once (each stream holds one)
  runtime::SamplingParams defaults;  // generation_config.json
  std::vector<int32_t> eos_ids;      // generation_config.json / config.json, plus "[e~["
};

class Server {
 public:
  Server(Model& model, const text::Tokenizer& tokenizer, runtime::Engine& engine, ServeOptions options);
  ~Server();
  // Binds; then port() is the port in use.
  Status Bind();
  // Serves until Shutdown (blocking).
  Status Serve();
  // Stops accepting, cancels every request (streams end), and makes Serve return.
  // Safe from any thread (not from a signal handler).
  void Shutdown();
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace m2::server
