#include "server/server.h"

#include <httplib.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "server/reply.h"

namespace m2::server {

using chat::Json;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A Prometheus histogram with fixed buckets (seconds).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // per bucket, not cumulative; last = +Inf
  double sum = 0;
  uint64_t n = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void Observe(double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
    ++n;
  }
  void Write(std::string& out, const char* name, const char* help) const {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      cum += counts[i];
      out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], cum);
    }
    cum += counts.back();
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name, sum, name, n);
  }
};

// One generation in flight: the engine thread writes, the HTTP thread reads.
struct Exchange {
  std::mutex mu;
  std::condition_variable cv;
  std::string frames;  // server-sent events not written yet
  bool done = false;
  uint64_t id = 0;
  Status error;
  Json body;
};

}  // namespace

struct Server::Impl {
  Model& model;
  const text::Tokenizer& tok;
  runtime::Engine& engine;
  ServeOptions o;
  httplib::Server http;
  std::string model_name;
  std::atomic<bool> shutting_down{false};

  // Each token's text, for constraining a forced tool call's name (made on first use).
  std::once_flag pieces_once;
  std::vector<std::string> pieces;
  const std::vector<std::string>& Pieces() {
    std::call_once(pieces_once, [this] {
      const auto V = static_cast<int32_t>(model.config().vocab_size);
      pieces.resize(static_cast<size_t>(V));
      for (int32_t id = 0; id < V; ++id) pieces[static_cast<size_t>(id)] = tok.Decode(std::span<const int32_t>(&id, 1));
    });
    return pieces;
  }

  // Metrics.
  std::mutex metrics_mu;
  std::map<std::pair<std::string, int>, uint64_t> requests;  // (endpoint, status) -> count
  Histogram ttft{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};
  Histogram itl{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;

  Impl(Model& m, const text::Tokenizer& t, runtime::Engine& e, ServeOptions opts)
      : model(m), tok(t), engine(e), o(std::move(opts)) {}

  void Count(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lock(metrics_mu);
    ++requests[{endpoint, status}];
  }

  static bool IsAnthropic(const httplib::Request& req) { return req.path.rfind("/v1/messages", 0) == 0; }

  void SendError(const httplib::Request& req, httplib::Response& res, int status, const std::string& message,
                 const char* type = nullptr) {
    Json body;
    if (IsAnthropic(req)) {
      const char* t = type ? type
                      : status == 401 ? "authentication_error"
                      : status == 404 ? "not_found_error"
                      : status == 413 ? "request_too_large"
                      : status == 503 ? "overloaded_error"
                      : status >= 500 ? "api_error"
                                      : "invalid_request_error";
      body = {{"type", "error"}, {"error", {{"type", t}, {"message", message}}}};
    } else {
      const char* t = type ? type
                      : status == 401 ? "authentication_error"
                      : status == 404 ? "not_found_error"
                      : status == 503 ? "server_busy"
                      : status >= 500 ? "server_error"
                                      : "invalid_request_error";
      body = {{"error", {{"message", message}, {"type", t}, {"param", nullptr}, {"code", status}}}};
    }
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
  }

  bool Authorized(const httplib::Request& req) {
    if (o.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + o.api_key) return true;
    return req.get_header_value("x-api-key") == o.api_key;
  }

  std::string Metrics() {
    const runtime::EngineStats s = engine.stats();
    std::string out;
    std::lock_guard<std::mutex> lock(metrics_mu);
    out += "# HELP m2_requests_total HTTP requests by endpoint and status.\n# TYPE m2_requests_total counter\n";
    for (const auto& [k, v] : requests)
      out += fmt::format("m2_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", k.first, k.second, v);
    auto counter = [&](const char* name, const char* help, double v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
    };
    auto gauge = [&](const char* name, const char* help, double v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
    };
    counter("m2_prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens));
    counter("m2_cached_prompt_tokens_total", "Prompt tokens taken from the prefix cache.", static_cast<double>(cached_tokens));
    counter("m2_generated_tokens_total", "Tokens generated.", static_cast<double>(generated_tokens));
    ttft.Write(out, "m2_time_to_first_token_seconds", "From request to first generated token.");
    itl.Write(out, "m2_inter_token_latency_seconds", "Between consecutive generated tokens of a request.");
    gauge("m2_queue_length", "Requests waiting to start.", static_cast<double>(s.waiting));
    gauge("m2_running_sequences", "Sequences generating.", static_cast<double>(s.running));
    gauge("m2_kv_blocks_total", "KV cache blocks in the budget.", static_cast<double>(s.kv_blocks_total));
    gauge("m2_kv_blocks_used", "KV cache blocks held by sequences.", static_cast<double>(s.kv_blocks_used));
    gauge("m2_kv_blocks_cached", "KV cache blocks kept only for the prefix cache.", static_cast<double>(s.kv_blocks_cached));
    gauge("m2_prefix_cache_hit_rate", "Full prompt blocks found in the prefix cache / looked up.",
          s.prefix_lookups > 0 ? static_cast<double>(s.prefix_hits) / static_cast<double>(s.prefix_lookups) : 0.0);
    gauge("m2_state_checkpoints", "Lightning models: recurrent-state checkpoints kept for the prefix cache.",
          static_cast<double>(s.state_checkpoints));
    counter("m2_preemptions_total", "Sequences whose cache was taken back for others.", static_cast<double>(s.preemptions));
    return out;
  }

  // Runs one generation: prompt ids in, the reply out (streamed or whole).
  void Generate(const httplib::Request& req, httplib::Response& res, const std::string& endpoint,
                std::vector<int32_t> ids, runtime::SamplingParams sampling, std::optional<int64_t> max_tokens,
                std::vector<std::string> stop, int top_logprobs, std::shared_ptr<ChatReply> reply, bool stream,
                Api api, std::optional<runtime::SpecOptions> spec, std::vector<std::string> tool_names = {}) {
    const int64_t ctx = model.config().max_position_embeddings;
    const auto n = static_cast<int64_t>(ids.size());
    if (n >= ctx) {
      Count(endpoint, 400);
      return SendError(req, res, 400,
                       fmt::format("This model's maximum context length is {} tokens, but the prompt has {} tokens "
                                   "(and at least 1 more must be generated)",
                                   ctx, n));
    }
    if (max_tokens && n + *max_tokens > ctx) {
      Count(endpoint, 400);
      return SendError(req, res, 400,
                       fmt::format("This model's maximum context length is {} tokens; you requested {} tokens ({} in "
                                   "the prompt, {} to generate)",
                                   ctx, n + *max_tokens, n, *max_tokens));
    }
    auto ex = std::make_shared<Exchange>();
    const auto t0 = Clock::now();
    auto last_token = std::make_shared<Clock::time_point>(t0);
    auto first = std::make_shared<bool>(true);
    runtime::Request r;
    r.prompt = std::move(ids);
    r.sampling = sampling;
    r.spec = spec;
    r.options.max_new_tokens = max_tokens.value_or(ctx - n);
    r.options.eos_ids = o.eos_ids;
    r.options.stop_strings = std::move(stop);
    r.top_logprobs = top_logprobs;
    if (!tool_names.empty()) r.logits_processor = ToolNameConstraint(std::move(tool_names));
    if (top_logprobs >= 0) r.on_logprobs = [reply](const runtime::TokenLogprobs& lp) { reply->OnLogprobs(lp); };
    r.on_token = [this, last_token, first, t0](int32_t) {
      const auto now = Clock::now();
      std::lock_guard<std::mutex> lock(metrics_mu);
      if (*first) ttft.Observe(Seconds(t0, now)), *first = false;
      else itl.Observe(Seconds(*last_token, now));
      *last_token = now;
    };
    r.on_text = [ex, reply](std::string_view t) {
      std::string f = reply->OnText(t);
      if (f.empty()) return;
      std::lock_guard<std::mutex> lock(ex->mu);
      ex->frames += f;
      ex->cv.notify_all();
    };
    r.on_done = [this, ex, reply, n](const Status& done_err, runtime::GenerationResult& result) {
      // A cancelled request (the client left, or the server is shutting down) must not
      // look complete to whoever still reads it.
      const Status err = !done_err.ok() || result.stop_reason != runtime::StopReason::kCancelled
                             ? done_err
                             : Error("the request was cancelled: the server is shutting down");
      std::string f = reply->Finish(err, result);
      {
        std::lock_guard<std::mutex> lock(metrics_mu);
        prompt_tokens += static_cast<uint64_t>(n);
        cached_tokens += static_cast<uint64_t>(result.stats.reused_tokens);
        generated_tokens += static_cast<uint64_t>(result.tokens.size());
      }
      std::lock_guard<std::mutex> lock(ex->mu);
      ex->frames += f;
      ex->error = err;
      ex->body = reply->body();
      ex->done = true;
      ex->cv.notify_all();
    };
    // The reply's first frames go out before any token.
    ex->frames = reply->Start();
    auto id = engine.Submit(std::move(r));
    if (!id.ok()) {
      const bool busy = id.status().message().find("busy") != std::string::npos;
      Count(endpoint, busy ? 503 : 400);
      return SendError(req, res, busy ? 503 : 400, id.status().message());
    }
    ex->id = *id;
    if (!stream) {
      std::unique_lock<std::mutex> lock(ex->mu);
      ex->cv.wait(lock, [&] { return ex->done; });
      if (!ex->error.ok()) {
        const int status = shutting_down.load() ? 503 : 500;
        Count(endpoint, status);
        lock.unlock();
        return SendError(req, res, status, ex->error.message());
      }
      Count(endpoint, 200);
      res.set_content(ex->body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
      return;
    }
    Count(endpoint, 200);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    runtime::Engine* eng = &engine;
    const bool anthropic = api == Api::kAnthropic;
    res.set_chunked_content_provider(
        "text/event-stream",
        [ex, anthropic](size_t, httplib::DataSink& sink) {
          std::string out;
          bool done = false;
          {
            std::unique_lock<std::mutex> lock(ex->mu);
            auto last = Clock::now();
            while (ex->frames.empty() && !ex->done) {
              ex->cv.wait_for(lock, std::chrono::milliseconds(100));
              if (!ex->frames.empty() || ex->done) break;
              lock.unlock();
              const bool alive = sink.is_writable();
              lock.lock();
              if (!alive) return false;  // the client went away: the releaser cancels
              if (anthropic && Seconds(last, Clock::now()) > 5) {
                ex->frames += "event: ping\ndata: {\"type\": \"ping\"}\n\n";
                last = Clock::now();
              }
            }
            out.swap(ex->frames);
            done = ex->done;
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (done) sink.done();
          return true;
        },
        [ex, eng](bool success) {
          bool finished;
          {
            std::lock_guard<std::mutex> lock(ex->mu);
            finished = ex->done;
          }
          if (!success || !finished) eng->Cancel(ex->id);
        });
  }

  // tool_choice required with several tools: the reply starts '<invoke name="' and the
  // next tokens may only spell one of the offered names and its closing quote; after that
  // the model writes freely. (A name token that would leave every candidate is masked.)
  std::function<void(std::span<float>, std::span<const int32_t>)> ToolNameConstraint(std::vector<std::string> names) {
    for (auto& n : names) n += '"';
    const std::vector<std::string>* table = &Pieces();
    return [names = std::move(names), table](std::span<float> logits, std::span<const int32_t> generated) {
      std::string sofar;
      for (int32_t id : generated) sofar += (*table)[static_cast<size_t>(id)];
      for (const auto& n : names)
        if (sofar.size() >= n.size() && sofar.compare(0, n.size(), n) == 0) return;  // a name is complete
      for (size_t v = 0; v < logits.size(); ++v) {
        const std::string& piece = (*table)[v];
        bool ok = false;
        for (const auto& n : names) {
          if (sofar.size() > n.size() || n.compare(0, sofar.size(), sofar) != 0) continue;
          const std::string_view rest = std::string_view(n).substr(sofar.size());
          // The piece continues the name, or completes it (and may run past it).
          if (!piece.empty() && (rest.rfind(piece, 0) == 0 || std::string_view(piece).rfind(rest, 0) == 0)) {
            ok = true;
            break;
          }
        }
        if (!ok) logits[v] = -INFINITY;
      }
    };
  }

  Result<std::vector<int32_t>> Encode(const std::string& text) {
    std::vector<int32_t> ids = tok.Encode(text, /*parse_special=*/true);
    if (ids.empty()) return Error("the prompt is empty");
    return ids;
  }

  void Chat(const httplib::Request& req, httplib::Response& res, Api api) {
    const std::string endpoint = api == Api::kAnthropic ? "/v1/messages" : "/v1/chat/completions";
    auto body = chat::ParseOrderedJson(req.body, "the request body");
    if (!body.ok()) return Count(endpoint, 400), SendError(req, res, 400, body.status().message());
    auto job = api == Api::kAnthropic ? ParseAnthropicMessages(*body, o.defaults) : ParseOpenAIChat(*body, o.defaults);
    if (!job.ok()) return Count(endpoint, 400), SendError(req, res, 400, job.status().message());
    // Any model name is accepted, as llama.cpp's server does: agents send names of their
    // own (Claude Code asks for its "small fast model" by a name of its choosing), and a
    // 404 there breaks them. Responses carry the served name.
    // tool_choice required with one tool is that tool by name; with several, the name
    // is constrained to the offered ones.
    std::vector<std::string> constrained_names;
    if (job->tool_choice == ToolChoice::kRequired) {
      if (job->tools.size() == 1) {
        job->tool_choice = ToolChoice::kNamed;
        job->tool_name = job->tools[0]["function"]["name"].get<std::string>();
      } else {
        for (const auto& t : job->tools) constrained_names.push_back(t["function"]["name"].get<std::string>());
      }
    }
    if (Status st = CheckM2ChatFormat(model.config()); !st.ok())
      return Count(endpoint, 400), SendError(req, res, 400, st.message());
    std::string forced;
    auto prompt = RenderJobPrompt(*job, &forced);
    if (!prompt.ok()) return Count(endpoint, 400), SendError(req, res, 400, prompt.status().message());
    auto ids = Encode(*prompt);
    if (!ids.ok()) return Count(endpoint, 400), SendError(req, res, 400, ids.status().message());
    if (api == Api::kAnthropic && !job->max_tokens)
      return Count(endpoint, 400), SendError(req, res, 400, "max_tokens: required");
    ReplyConfig rc;
    rc.api = api;
    rc.stream = job->stream;
    rc.include_usage = job->include_usage;
    rc.reasoning_inline = o.reasoning_inline;
    rc.parallel_tool_calls = job->parallel_tool_calls;
    rc.parse_tools = job->tool_choice != ToolChoice::kNone && !job->toolset.empty();
    rc.id = RandomId(api == Api::kAnthropic ? "msg_" : "chatcmpl-");
    rc.model = model_name;
    rc.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    rc.prompt_tokens = static_cast<int64_t>(ids->size());
    rc.tokenizer = job->top_logprobs >= 0 ? &tok : nullptr;
    auto reply = std::make_shared<ChatReply>(rc, job->toolset, forced);
    Generate(req, res, endpoint, std::move(*ids), job->sampling, job->max_tokens, job->stop, job->top_logprobs, reply,
             job->stream, api, job->spec, std::move(constrained_names));
  }

  void Completion(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/v1/completions";
    auto body = chat::ParseOrderedJson(req.body, "the request body");
    if (!body.ok()) return Count(endpoint, 400), SendError(req, res, 400, body.status().message());
    auto job = ParseOpenAICompletion(*body, o.defaults);
    if (!job.ok()) return Count(endpoint, 400), SendError(req, res, 400, job.status().message());
    auto ids = Encode(job->prompt);
    if (!ids.ok()) return Count(endpoint, 400), SendError(req, res, 400, ids.status().message());
    ReplyConfig rc;
    rc.completion = true;
    rc.stream = job->stream;
    rc.include_usage = job->include_usage;
    rc.id = RandomId("cmpl-");
    rc.model = model_name;
    rc.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    rc.prompt_tokens = static_cast<int64_t>(ids->size());
    auto reply = std::make_shared<ChatReply>(rc, chat::ToolSet(), "");
    Generate(req, res, endpoint, std::move(*ids), job->sampling, job->max_tokens.value_or(16), job->stop, -1, reply,
             job->stream, Api::kOpenAI, job->spec);
  }

  void CountTokens(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "/v1/messages/count_tokens";
    auto body = chat::ParseOrderedJson(req.body, "the request body");
    if (!body.ok()) return Count(endpoint, 400), SendError(req, res, 400, body.status().message());
    auto job = ParseAnthropicMessages(*body, o.defaults);
    if (!job.ok()) return Count(endpoint, 400), SendError(req, res, 400, job.status().message());
    if (Status st = CheckM2ChatFormat(model.config()); !st.ok())
      return Count(endpoint, 400), SendError(req, res, 400, st.message());
    auto prompt = RenderJobPrompt(*job, nullptr);
    if (!prompt.ok()) return Count(endpoint, 400), SendError(req, res, 400, prompt.status().message());
    Count(endpoint, 200);
    res.set_content(Json{{"input_tokens", tok.Encode(*prompt, true).size()}}.dump(), "application/json");
  }

  void Routes() {
    http.set_payload_max_length(o.max_body_bytes);
    // Keep-alive stays at cpp-httplib's 5 s: an idle kept-alive connection holds a thread
    // that notices a shutdown only when its keep-alive wait ends.
    const int threads = o.http_threads;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path.rfind("/v1/", 0) == 0 && !Authorized(req)) {
        Count(req.path, 401);
        SendError(req, res, 401, "invalid or missing API key (send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY')");
        // Answered before the body was read: the connection cannot carry another request.
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (shutting_down.load()) {
        SendError(req, res, 503, "the server is shutting down");
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const int status = res.status;
      const std::string msg = status == 413   ? fmt::format("the request body is larger than {} bytes", o.max_body_bytes)
                              : status == 404 ? fmt::format("no such endpoint: {} {}", req.method, req.path)
                                              : fmt::format("HTTP error {}", status);
      SendError(req, res, status, msg);
    });
    http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      Count(req.path, 500);
      SendError(req, res, 500, "internal error: " + what);
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(Json{{"status", "ok"}, {"model", model_name}}.dump(), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(Metrics(), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      Count("/v1/models", 200);
      Json m = {{"id", model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "m2"},
                {"max_model_len", model.config().max_position_embeddings}};
      res.set_content(Json{{"object", "list"}, {"data", Json::array({m})}}.dump(), "application/json");
    });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& q, httplib::Response& r) { Chat(q, r, Api::kOpenAI); });
    http.Post("/v1/messages", [this](const httplib::Request& q, httplib::Response& r) { Chat(q, r, Api::kAnthropic); });
    http.Post("/v1/messages/count_tokens",
              [this](const httplib::Request& q, httplib::Response& r) { CountTokens(q, r); });
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { Completion(q, r); });
  }
};

Server::Server(Model& model, const text::Tokenizer& tokenizer, runtime::Engine& engine, ServeOptions options)
    : impl_(std::make_unique<Impl>(model, tokenizer, engine, std::move(options))) {
  impl_->model_name = impl_->o.served_model_name;
  impl_->Routes();
}

Server::~Server() = default;

Status Server::Bind() {
  const int port = impl_->o.port == 0 ? impl_->http.bind_to_any_port(impl_->o.host)
                                      : (impl_->http.bind_to_port(impl_->o.host, impl_->o.port) ? impl_->o.port : -1);
  if (port < 0)
    return Error("cannot listen on {}:{} (is another server using the port, or is the address not this machine's?)",
                 impl_->o.host, impl_->o.port);
  port_ = port;
  return Status::Ok();
}

Status Server::Serve() {
  impl_->engine.Start();
  const bool ok = impl_->http.listen_after_bind();
  impl_->engine.Stop();
  if (!ok && !impl_->shutting_down.load()) return Error("the HTTP server stopped unexpectedly");
  return Status::Ok();
}

void Server::Shutdown() {
  if (impl_->shutting_down.exchange(true)) return;
  impl_->engine.CancelAll();  // every stream gets its end and its handler returns
  // Let the streams write their last frames before the connections close (at most 5 s).
  const auto t0 = Clock::now();
  while (Seconds(t0, Clock::now()) < 5) {
    const runtime::EngineStats st = impl_->engine.stats();
    if (st.running == 0 && st.waiting == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  impl_->http.stop();
}

}  // namespace m2::server
