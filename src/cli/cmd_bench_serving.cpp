#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include <fmt/format.h>

#include "cli/bench_serving.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace m2::cli {

namespace {

runtime::Request BenchRequest(std::vector<int32_t> prompt, int64_t max_new) {
  runtime::Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.options.max_new_tokens = max_new;
  r.options.ignore_eos = true;
  return r;
}

std::vector<int32_t> RandomIds(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = tok(rng);
  return v;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

nlohmann::json BenchStreams(Model& m, const Costs& costs, const std::vector<int32_t>& streams, int64_t context,
                            int steps, KvDtype dtype, double bandwidth) {
  const ModelConfig& c = m.config();
  std::mt19937 rng(11);
  nlohmann::json rows = nlohmann::json::array();
  const double kv_token_bytes = static_cast<double>(runtime::KvBytesPerToken(c, dtype));
  for (int32_t S : streams) {
    std::fprintf(stderr, "batched decode: %d streams at context %lld (prefill first)...\n", S, (long long)context);
    runtime::EngineOptions o;
    o.kv_dtype = dtype;
    o.kv_tokens = S * (context + steps + 64);
    o.max_batch_tokens = std::max<int64_t>(512, S);
    o.max_running = S;
    o.prefix_cache = false;
    auto e = runtime::Engine::Create(m, nullptr, o);
    if (!e.ok()) return {{"error", e.status().message()}};
    std::vector<int64_t> produced(static_cast<size_t>(S), 0);
    std::string failure;  // a stream that ended with an error: the row is failed, not timed
    for (int32_t i = 0; i < S; ++i) {
      runtime::Request r = BenchRequest(RandomIds(rng, context, c.vocab_size), steps + 4);
      r.on_token = [&produced, i](int32_t) { ++produced[static_cast<size_t>(i)]; };
      r.on_done = [&failure](const Status& st, runtime::GenerationResult&) {
        if (!st.ok() && failure.empty()) failure = st.message();
      };
      if (auto id = (*e)->Submit(std::move(r)); !id.ok()) return {{"error", id.status().message()}};
    }
    const auto failed_row = [&] {
      return nlohmann::json{{"error", fmt::format("{} streams: {}", S, failure)}};
    };
    // Prefill until every stream has its first token, then time steps where all decode.
    while (std::any_of(produced.begin(), produced.end(), [](int64_t p) { return p == 0; })) {
      if (!(*e)->Step() && failure.empty()) failure = "the engine ran out of work before every stream had a token";
      if (!failure.empty()) return failed_row();
    }
    std::vector<double> times, bytes;
    double experts = 0;
    for (int s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      const bool worked = (*e)->Step();
      times.push_back(Seconds(t0, Clock::now()));
      if (!worked && failure.empty()) failure = fmt::format("the engine ran out of work at timed step {}", s);
      if (!failure.empty()) return failed_row();
      double kv = 0;
      for (int64_t p : produced) kv += static_cast<double>(context + p - 1) * kv_token_bytes;
      const double run = static_cast<double>(m.experts_run_last_forward());
      experts += run;
      bytes.push_back(costs.shared_bytes + run * costs.expert_bytes + kv);
    }
    const double step = Median(times), step_bytes = Median(bytes);
    rows.push_back({{"streams", S},
                    {"seconds_per_step", step},
                    {"aggregate_tokens_per_s", S / step},
                    {"per_stream_tokens_per_s", 1.0 / step},
                    {"experts_run_per_layer", experts / steps / c.num_hidden_layers},
                    {"bytes_per_step", step_bytes},
                    {"bandwidth_utilization", step_bytes / step / bandwidth}});
  }
  if (!rows.empty()) {
    const double one = rows[0]["aggregate_tokens_per_s"].get<double>();
    for (auto& r : rows) r["speedup_over_first"] = r["aggregate_tokens_per_s"].get<double>() / one;
  }
  return rows;
}

nlohmann::json BenchPrefixCache(Model& m, int64_t system_tokens, int turns, KvDtype dtype) {
  const ModelConfig& c = m.config();
  constexpr int64_t kTurnTokens = 60, kReply = 16;
  std::mt19937 rng(13);
  const std::vector<int32_t> system = RandomIds(rng, system_tokens, c.vocab_size);
  std::vector<std::vector<int32_t>> turn_new;
  for (int t = 0; t < turns; ++t) turn_new.push_back(RandomIds(rng, kTurnTokens, c.vocab_size));
  const std::vector<int32_t> other_user = RandomIds(rng, kTurnTokens, c.vocab_size);

  auto conversation = [&](bool cache, std::vector<double>& ttft, std::vector<int64_t>& reused,
                          std::vector<int64_t>& prompt_lens, double* second_ttft, int64_t* second_reused) -> Status {
    runtime::EngineOptions o;
    o.kv_dtype = dtype;
    o.kv_tokens = 2 * (system_tokens + turns * (kTurnTokens + kReply)) + 256;
    o.prefix_cache = cache;
    M2_ASSIGN_OR_RETURN(auto e, runtime::Engine::Create(m, nullptr, o));
    std::vector<int32_t> prompt = system;
    for (int t = 0; t < turns; ++t) {
      prompt.insert(prompt.end(), turn_new[static_cast<size_t>(t)].begin(), turn_new[static_cast<size_t>(t)].end());
      std::fprintf(stderr, "prefix cache %s: turn %d, prompt %zu tokens...\n", cache ? "on" : "off", t + 1,
                   prompt.size());
      M2_ASSIGN_OR_RETURN(runtime::GenerationResult r, e->Generate(BenchRequest(prompt, kReply)));
      ttft.push_back(r.stats.queue_seconds + r.stats.prefill_seconds);
      reused.push_back(r.stats.reused_tokens);
      prompt_lens.push_back(static_cast<int64_t>(prompt.size()));
      prompt.insert(prompt.end(), r.tokens.begin(), r.tokens.end());
    }
    if (second_ttft != nullptr) {
      std::vector<int32_t> p2 = system;
      p2.insert(p2.end(), other_user.begin(), other_user.end());
      M2_ASSIGN_OR_RETURN(runtime::GenerationResult r, e->Generate(BenchRequest(p2, kReply)));
      *second_ttft = r.stats.queue_seconds + r.stats.prefill_seconds;
      *second_reused = r.stats.reused_tokens;
    }
    return Status::Ok();
  };
  std::vector<double> on, off;
  std::vector<int64_t> reused_on, reused_off, lens, lens2;
  double second = 0;
  int64_t second_reused = 0;
  if (Status st = conversation(true, on, reused_on, lens, &second, &second_reused); !st.ok())
    return {{"error", st.message()}};
  if (Status st = conversation(false, off, reused_off, lens2, nullptr, nullptr); !st.ok())
    return {{"error", st.message()}};
  nlohmann::json rows = nlohmann::json::array();
  for (int t = 0; t < turns; ++t)
    rows.push_back({{"turn", t + 1},
                    {"prompt_tokens", lens[static_cast<size_t>(t)]},
                    {"reused_tokens", reused_on[static_cast<size_t>(t)]},
                    {"ttft_cache_on_s", on[static_cast<size_t>(t)]},
                    {"ttft_cache_off_s", off[static_cast<size_t>(t)]},
                    {"speedup", off[static_cast<size_t>(t)] / on[static_cast<size_t>(t)]}});
  return {{"system_tokens", system_tokens},
          {"turns", rows},
          {"second_conversation",
           {{"prompt_tokens", system_tokens + kTurnTokens},
            {"reused_tokens", second_reused},
            {"ttft_s", second},
            {"speedup_over_cold_turn_1", off[0] / second}}}};
}

nlohmann::json BenchSampling(int64_t vocab, double decode_step_seconds) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (auto& f : logits) f = nd(rng);
  for (int i = 0; i < 20; ++i) logits[static_cast<size_t>(rng() % vocab)] += 12.0f;  // a few likely tokens
  const std::vector<int32_t> context = {1, 2, 3};
  struct Setting {
    const char* name;
    runtime::SamplingParams p;
  };
  std::vector<Setting> settings(4);
  settings[0].name = "greedy";
  settings[0].p.temperature = 0;
  settings[1].name = "temperature 1";
  settings[2].name = "top_k 40, top_p 0.95, min_p 0.05";
  settings[2].p.top_k = 40, settings[2].p.top_p = 0.95, settings[2].p.min_p = 0.05;
  settings[3].name = "top_p 0.95";
  settings[3].p.top_p = 0.95;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : settings) {
    runtime::Sampler sampler(s.p);
    std::vector<double> t;
    for (int i = 0; i < 21; ++i) {
      const auto t0 = Clock::now();
      (void)sampler.Sample(logits, context);
      t.push_back(Seconds(t0, Clock::now()));
    }
    const double sec = Median(t);
    nlohmann::json row = {{"setting", s.name}, {"microseconds", sec * 1e6}};
    if (decode_step_seconds > 0) row["share_of_decode_step"] = sec / decode_step_seconds;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace m2::cli
