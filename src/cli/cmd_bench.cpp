// m2 bench: prefill and decode speed, reported against the machine's own ceilings
// measured in the same run (read bandwidth for decode, fp32 FMA peak for prefill).
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "base/cpu.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "cli/bench_serving.h"
#include "cli/bench_util.h"
#include "runtime/engine.h"
#include "cli/commands.h"
#include "kernels/probe.h"
#include "model/model.h"
#include "cli/bench_spec.h"

namespace m2::cli {

namespace {

struct BenchOptions {
  std::string model;
  std::string prefill = "128,512,2048";
  std::string contexts = "128,2048,8192";
  int decode_steps = 16;
  int repeats = 2;
  int threads = 0;
  bool json = false;
  bool scaling = true;
  std::string kv_dtype = "bf16";
  std::string streams;            // e.g. "1,4,8,16": batched decode through the engine
  int64_t stream_context = 128;
  int prefix_turns = 0;           // > 0: the prefix-cache conversation
  int64_t prefix_system = 4000;
  bool serving_only = false;      // skip the single-sequence prefill / decode / scaling sections
  std::string spec = "off";       // lookup: only the speculative-decoding comparison (bench_spec.h)
  int draft = 4;
  int spec_tokens = 200;
};

int Run(const BenchOptions& o) {
  auto prefill_lens = ParseIdList(o.prefill);
  if (!prefill_lens.ok()) return Fail(Status(prefill_lens.status()).WithContext("--prefill"));
  auto contexts = ParseIdList(o.contexts);
  if (!contexts.ok()) return Fail(Status(contexts.status()).WithContext("--context"));
  std::vector<int32_t> streams;
  if (!o.streams.empty()) {
    auto s = ParseIdList(o.streams);
    if (!s.ok()) return Fail(Status(s.status()).WithContext("--streams"));
    streams = *s;
    for (int32_t v : streams)
      if (v < 1 || v > 1024) return Fail(Error("--streams: each count must be in [1, 1024], found {}", v));
  }
  auto kv_dtype = runtime::ParseKvDtype(o.kv_dtype);
  if (!kv_dtype.ok()) return Fail(Status(kv_dtype.status()).WithContext("--kv-dtype"));
  for (int32_t P : *prefill_lens)
    if (P < 1) return Fail(Error("--prefill: each prompt length must be >= 1, found {}", P));
  for (int32_t C : *contexts)
    if (C < 1) return Fail(Error("--context: each context must be >= 1, found {}", C));
  if (o.serving_only) {
    prefill_lens->clear();
    contexts->clear();
  }
  if (o.threads > 0) ThreadPool::SetGlobalThreads(o.threads);
  if (o.spec != "off") {
    runtime::SpecOptions spec;
    auto mode = runtime::ParseSpecMode(o.spec);
    if (!mode.ok()) return Fail(Status(mode.status()).WithContext("--spec"));
    if (*mode == runtime::SpecMode::kMtp) return Fail(Error("--spec mtp is not available in the engine yet; use lookup"));
    spec.mode = *mode;
    spec.draft = o.draft;
    if (Status st = spec.Validate(); !st.ok()) return Fail(st);
    auto model = Model::Load(o.model);
    if (!model.ok()) return Fail(model.status());
    return RunSpecBench(**model, o.model, spec, o.spec_tokens, o.json);
  }
  ThreadPool& pool = ThreadPool::Global();
  const int threads = pool.size();

  std::fprintf(stderr, "measuring the machine: read bandwidth and fp32 FMA peak on %d threads (%s kernels)\n",
               threads, IsaName(ActiveIsa()));
  // The ceilings are measured before and again after the model's timings, and the higher
  // of each pair is the one reported and divided by: on a shared machine that slows down
  // part of the time, a ceiling taken during a slow spell would flatter the ratios.
  const double bandwidth_before = MeasureBandwidth(pool);
  const double peak_before = MeasurePeakFlops(pool);
  { std::ofstream("/proc/self/clear_refs") << "5"; }  // restart the peak-RSS count

  auto model = Model::Load(o.model);
  if (!model.ok()) return Fail(model.status());
  Model& m = **model;
  const ModelConfig& c = m.config();
  Prefault(m.store());
  const Costs costs = CountCosts(m);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  for (int32_t C : *contexts)
    if (C + o.decode_steps + 1 > c.max_position_embeddings)
      return Fail(Error("--context {} plus {} decode steps passes the model's context of {}", C, o.decode_steps,
                        c.max_position_embeddings));
  KvBlockPool kv_pool(m.cache_layout(64, false, *kv_dtype));
  std::vector<float> logits;

  // Prefill: a fresh sequence of P random tokens, logits for the last one only.
  const auto run_prefill = [&](int64_t P) {
    SequenceCache cache(&kv_pool);
    SequenceCache* cs[] = {&cache};
    ForwardBatch b;
    for (int64_t i = 0; i < P; ++i) b.Add(tok(rng), 0, i + 1 == P);
    logits.clear();
    const auto t0 = Clock::now();
    Status st = m.Forward(b, cs, logits);
    const double s = Seconds(t0, Clock::now());
    if (!st.ok()) std::fprintf(stderr, "m2: error: %s\n", st.message().c_str());
    return s;
  };
  std::vector<double> prefill_seconds, prefill_flops;
  for (int32_t P : *prefill_lens) {
    std::fprintf(stderr, "prefill %d tokens (best of %d)...\n", P, o.repeats);
    double s = run_prefill(P);
    for (int r = 1; r < o.repeats; ++r) s = std::min(s, run_prefill(P));
    double flops = costs.linear_flops_per_token * P + costs.lm_head_flops;
    for (int64_t p = 0; p < P; ++p) flops += AttentionFlops(c, p);
    prefill_seconds.push_back(s);
    prefill_flops.push_back(flops);
  }

  // Decode at a given context: the cache is filled with synthetic keys and values (the
  // cost of attention does not depend on their values), then `decode_steps` tokens.
  std::vector<double> decode_seconds;
  for (int32_t C : *contexts) {
    std::fprintf(stderr, "decode at context %d...\n", C);
    SequenceCache cache(&kv_pool);
    Status st = cache.Extend(C - 1);
    if (!st.ok()) return Fail(st);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      for (int64_t p = 0; p + 1 < C; ++p)
        for (int64_t g = 0; g < c.num_key_value_heads; ++g) {
          std::vector<float> k(static_cast<size_t>(c.head_dim)), v(k.size());
          for (int64_t i = 0; i < c.head_dim; ++i) k[i] = nd(rng), v[i] = nd(rng);
          StoreKv(k.data(), c.head_dim, *kv_dtype, cache.KRaw(l, p, g));
          StoreKv(v.data(), c.head_dim, *kv_dtype, cache.VRaw(l, p, g));
        }
    SequenceCache* cs[] = {&cache};
    std::vector<double> steps;
    for (int s = 0; s <= o.decode_steps; ++s) {
      ForwardBatch b;
      b.Add(tok(rng), 0, true);
      logits.clear();
      const auto t0 = Clock::now();
      st = m.Forward(b, cs, logits);
      if (!st.ok()) return Fail(st);
      if (s > 0) steps.push_back(Seconds(t0, Clock::now()));  // step 0 warms up
    }
    // The median step: a step that the machine's other tenants interrupted does not move it.
    std::sort(steps.begin(), steps.end());
    decode_seconds.push_back(steps[steps.size() / 2]);
  }

  nlohmann::json scaling;
  if (o.scaling && threads > 1 && !o.serving_only) {
    std::fprintf(stderr, "prefill 512 tokens on 1 thread and on %d...\n", threads);
    // Alternating, best of `repeats` each, so a slow spell of the machine hits both.
    double multi = 1e30, single = 1e30;
    for (int r = 0; r < o.repeats; ++r) {
      multi = std::min(multi, run_prefill(512));
      ThreadPool::SetGlobalThreads(1);
      single = std::min(single, run_prefill(512));
      ThreadPool::SetGlobalThreads(threads);
    }
    scaling = {{"threads", threads}, {"prefill_512_speedup", single / multi}};
  }

  const int64_t peak_rss = PeakRssBytes();

  // Serving sections, through the engine.
  nlohmann::json streams_rows, prefix, sampling;
  if (!streams.empty())
    streams_rows = BenchStreams(m, costs, streams, o.stream_context, o.decode_steps, *kv_dtype, bandwidth_before);
  if (o.prefix_turns > 0) prefix = BenchPrefixCache(m, o.prefix_system, o.prefix_turns, *kv_dtype);
  double step_for_sampling = !decode_seconds.empty() ? decode_seconds[0] : 0;
  if (step_for_sampling == 0 && streams_rows.is_array() && !streams_rows.empty())
    step_for_sampling = streams_rows[0]["seconds_per_step"].get<double>();
  sampling = BenchSampling(c.vocab_size, step_for_sampling);
  uint64_t file_bytes = 0;
  for (const auto& f : m.store().files()) file_bytes += f->file_size();
  const double kv_pool_bytes = static_cast<double>(kv_pool.blocks_allocated()) * kv_pool.block_bytes();

  std::fprintf(stderr, "measuring the machine again...\n");
  // (SetGlobalThreads above replaced the pool that `pool` referred to.)
  const double bandwidth_after = MeasureBandwidth(ThreadPool::Global());
  const double peak_after = MeasurePeakFlops(ThreadPool::Global());
  const double bandwidth = std::max(bandwidth_before, bandwidth_after);
  const double peak = std::max(peak_before, peak_after);

  if (streams_rows.is_array())
    for (auto& r : streams_rows)
      r["bandwidth_utilization"] = r["bytes_per_step"].get<double>() / r["seconds_per_step"].get<double>() / bandwidth;
  nlohmann::json prefill_rows = nlohmann::json::array();
  for (size_t i = 0; i < prefill_seconds.size(); ++i) {
    const int32_t P = (*prefill_lens)[i];
    const double s = prefill_seconds[i], flops = prefill_flops[i];
    prefill_rows.push_back({{"tokens", P}, {"seconds", s}, {"tokens_per_s", P / s}, {"flops", flops},
                            {"compute_utilization", flops / s / peak}});
  }
  nlohmann::json decode_rows = nlohmann::json::array();
  for (size_t i = 0; i < decode_seconds.size(); ++i) {
    const int32_t C = (*contexts)[i];
    const double per_token = decode_seconds[i];
    const double avg_ctx = C + o.decode_steps / 2.0;
    const double kv_bytes = avg_ctx * static_cast<double>(runtime::KvBytesPerToken(c, *kv_dtype));
    const double bytes = costs.weight_bytes_per_token + kv_bytes;
    decode_rows.push_back({{"context", C}, {"tokens_per_s", 1.0 / per_token}, {"seconds_per_token", per_token},
                           {"weight_bytes_per_token", costs.weight_bytes_per_token}, {"kv_bytes_per_token", kv_bytes},
                           {"bandwidth_utilization", bytes / per_token / bandwidth}});
  }
  nlohmann::json j = {{"model", o.model}, {"kernels", IsaName(ActiveIsa())}, {"cpu", Cpu().Describe()},
                      {"threads", threads}, {"read_bandwidth_bytes_per_s", bandwidth}, {"peak_fp32_flops", peak},
                      {"prefill", prefill_rows}, {"decode", decode_rows}, {"weights_file_bytes", file_bytes},
                      {"kv_pool_bytes", kv_pool_bytes}, {"peak_rss_bytes", peak_rss},
                      {"peak_rss_over_weights_and_kv", peak_rss / (file_bytes + kv_pool_bytes) - 1.0},
                      {"thread_scaling", scaling}, {"kv_dtype", KvDtypeName(*kv_dtype)},
                      {"batched_decode", streams_rows}, {"prefix_cache", prefix}, {"sampling", sampling},
                      {"ceilings_measured", {{"before", {{"read_bandwidth_bytes_per_s", bandwidth_before}, {"peak_fp32_flops", peak_before}}},
                                             {"after", {{"read_bandwidth_bytes_per_s", bandwidth_after}, {"peak_fp32_flops", peak_after}}}}}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("machine: %s kernels, %d threads; read bandwidth %.1f GB/s; fp32 FMA peak %.1f GFLOP/s\n",
              IsaName(ActiveIsa()), threads, bandwidth / 1e9, peak / 1e9);
  std::printf("  (the higher of two measurements: before the timings %.1f GB/s, %.1f GFLOP/s; after %.1f GB/s, %.1f GFLOP/s)\n",
              bandwidth_before / 1e9, peak_before / 1e9, bandwidth_after / 1e9, peak_after / 1e9);
  if (!prefill_rows.empty()) std::printf("\n%-10s %12s %14s %12s\n", "prefill", "tokens/s", "GFLOP/s", "of peak");
  for (const auto& r : prefill_rows)
    std::printf("%-10lld %12.1f %14.1f %11.1f%%\n", (long long)r["tokens"].get<int64_t>(), r["tokens_per_s"].get<double>(),
                r["flops"].get<double>() / r["seconds"].get<double>() / 1e9, 100 * r["compute_utilization"].get<double>());
  if (!decode_rows.empty())
    std::printf("\n%-10s %12s %14s %14s %12s\n", "context", "tokens/s", "weights MB/tok", "KV MB/tok", "of bandwidth");
  for (const auto& r : decode_rows)
    std::printf("%-10lld %12.2f %14.1f %14.1f %11.1f%%\n", (long long)r["context"].get<int64_t>(),
                r["tokens_per_s"].get<double>(), r["weight_bytes_per_token"].get<double>() / 1e6,
                r["kv_bytes_per_token"].get<double>() / 1e6, 100 * r["bandwidth_utilization"].get<double>());
  if (!o.serving_only)
    std::printf("\nmemory: peak RSS %.2f GiB; weights file %.2f GiB + KV pool %.2f GiB; peak is %+.1f%% of those\n",
              peak_rss / double(1ull << 30), file_bytes / double(1ull << 30), kv_pool_bytes / double(1ull << 30),
              100.0 * (peak_rss / (file_bytes + kv_pool_bytes) - 1.0));
  if (!scaling.is_null())
    std::printf("threads: prefill of 512 tokens is %.2fx faster on %d threads than on 1\n",
                scaling["prefill_512_speedup"].get<double>(), threads);
  if (streams_rows.is_array() && !streams_rows.empty() && !streams_rows[0].contains("error")) {
    std::printf("\nbatched decode at context %lld (KV %s):\n%-8s %12s %12s %10s %14s %12s %12s\n", (long long)o.stream_context,
                KvDtypeName(*kv_dtype), "streams", "tokens/s", "per stream", "vs first", "experts/layer", "MB/step",
                "of bandwidth");
    for (const auto& r : streams_rows)
      std::printf("%-8d %12.2f %12.2f %9.2fx %14.1f %12.1f %11.1f%%\n", r["streams"].get<int>(),
                  r["aggregate_tokens_per_s"].get<double>(), r["per_stream_tokens_per_s"].get<double>(),
                  r["speedup_over_first"].get<double>(), r["experts_run_per_layer"].get<double>(),
                  r["bytes_per_step"].get<double>() / 1e6, 100 * r["bandwidth_utilization"].get<double>());
  } else if (streams_rows.is_object()) {
    std::printf("\nbatched decode FAILED: %s\n", streams_rows.dump().c_str());
  }
  if (prefix.is_object() && prefix.contains("turns")) {
    std::printf("\nprefix cache: %lld-token system prefix, time to first token per turn\n%-6s %10s %10s %12s %12s %9s\n",
                (long long)o.prefix_system, "turn", "prompt", "reused", "cache on s", "cache off s", "speedup");
    for (const auto& r : prefix["turns"])
      std::printf("%-6d %10lld %10lld %12.3f %12.3f %8.1fx\n", r["turn"].get<int>(),
                  (long long)r["prompt_tokens"].get<int64_t>(), (long long)r["reused_tokens"].get<int64_t>(),
                  r["ttft_cache_on_s"].get<double>(), r["ttft_cache_off_s"].get<double>(), r["speedup"].get<double>());
    const auto& s2 = prefix["second_conversation"];
    std::printf("second conversation (same system prefix only): %lld of %lld tokens reused, first token in %.3f s "
                "(%.1fx faster than the cold first turn)\n",
                (long long)s2["reused_tokens"].get<int64_t>(), (long long)s2["prompt_tokens"].get<int64_t>(),
                s2["ttft_s"].get<double>(), s2["speedup_over_cold_turn_1"].get<double>());
  } else if (!prefix.is_null()) {
    std::printf("\nprefix cache benchmark FAILED: %s\n", prefix.dump().c_str());
  }
  std::printf("\nsampling at vocabulary %lld:", (long long)c.vocab_size);
  for (const auto& r : sampling) {
    std::printf(" %s %.0f us", r["setting"].get<std::string>().c_str(), r["microseconds"].get<double>());
    if (r.contains("share_of_decode_step")) std::printf(" (%.2f%% of a decode step)", 100 * r["share_of_decode_step"].get<double>());
    std::printf(";");
  }
  std::printf("\n");
  return 0;
}

}  // namespace

void AddBench(CLI::App& app, Runner& run) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure prefill and decode speed against this machine's bandwidth and FMA peak (see make-bench-model).");
  cmd->add_option("-m,--model", o->model, "Model folder")->required();
  cmd->add_option("--prefill", o->prefill, "Prompt lengths to time, comma separated");
  cmd->add_option("--context", o->contexts, "Decode context lengths, comma separated");
  cmd->add_option("--decode-steps", o->decode_steps, "Decode steps timed at each context (the median step is reported)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--repeats", o->repeats, "Runs of each prefill (the fastest is reported)")->check(CLI::Range(1, 100));
  cmd->add_option("-t,--threads", o->threads, "Threads (default: one per core)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", o->json, "Print machine-readable JSON");
  cmd->add_flag("!--no-scaling", o->scaling, "Skip the one-thread prefill used to measure thread scaling");
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache storage: bf16 (default) or f32");
  cmd->add_option("--spec", o->spec,
                  "Only compare speculative decoding (lookup) with plain decoding on code, chat and an edit task, at "
                  "temperature 0 and 1 (needs the model's tokenizer)");
  cmd->add_option("--draft", o->draft, "--spec: most tokens drafted per verification (default 4)");
  cmd->add_option("--spec-tokens", o->spec_tokens, "--spec: tokens generated per case (default 200)")
      ->check(CLI::Range(2, 100000));
  cmd->add_option("--streams", o->streams,
                  "Batched decode through the serving engine with these stream counts, e.g. 1,4,8,16");
  cmd->add_option("--stream-context", o->stream_context, "Prompt tokens of each stream in --streams (default 128)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prefix-turns", o->prefix_turns,
                  "Time to first token over a conversation of N turns, prefix cache on and off (0: skip)")
      ->check(CLI::Range(0, 100));
  cmd->add_option("--prefix-system", o->prefix_system, "System-prompt tokens of that conversation (default 4000)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--serving-only", o->serving_only, "Only the serving sections (--streams, --prefix-turns, sampling)");
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
