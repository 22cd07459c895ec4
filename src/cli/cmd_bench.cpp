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
#include "cli/commands.h"
#include "kernels/probe.h"
#include "model/model.h"

namespace m2::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model;
  std::string prefill = "128,512,2048";
  std::string contexts = "128,2048,8192";
  int decode_steps = 16;
  int repeats = 2;
  int threads = 0;
  bool json = false;
  bool scaling = true;
};

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Best of six parallel passes over a buffer much larger than the caches, three plain
// and three with the GEMV kernels' prefetching (whichever reads faster here).
double MeasureBandwidth(ThreadPool& pool) {
  const int64_t n = (1ll << 30) / sizeof(float);
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    std::vector<double> sums(pool.size());
    const bool prefetch = rep % 2 == 1;
    const auto t0 = Clock::now();
    pool.ParallelFor(n, 4096, [&](int64_t b, int64_t e, int th) { sums[th] += ReadAll(buf.data() + b, e - b, prefetch); });
    const double s = Seconds(t0, Clock::now());
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s);
  }
  return best;
}

double MeasurePeakFlops(ThreadPool& pool) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> flops(pool.size());
    const auto t0 = Clock::now();
    pool.ParallelFor(pool.size(), 1, [&](int64_t b, int64_t e, int th) {
      for (int64_t i = b; i < e; ++i) flops[th] += FmaBurst(20'000'000);
    });
    const double s = Seconds(t0, Clock::now());
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / s);
  }
  return best;
}

int64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// Bring every page of the weights into memory so timings measure compute and memory,
// not disk: MADV_POPULATE_READ (Linux 5.14+) maps them in large batches; where the
// kernel lacks it, every page is touched (several times slower: a fault per 4 KiB).
void Prefault(const TensorStore& store) {
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;
#endif
  uint64_t total = 0;
  for (const auto& f : store.files()) total += f->file_size();
  Progress p("reading weights into memory", total, "bytes");
  volatile uint8_t sink = 0;
  const uintptr_t page = 4096;
  for (const auto& f : store.files()) {
    for (const auto& e : f->header().tensors) {
      const TensorView v = f->View(e);
      const uintptr_t b = reinterpret_cast<uintptr_t>(v.data) & ~(page - 1);
      const uintptr_t end = reinterpret_cast<uintptr_t>(v.data) + v.nbytes;
      if (::madvise(reinterpret_cast<void*>(b), end - b, MADV_POPULATE_READ) != 0)
        for (size_t i = 0; i < v.nbytes; i += page) sink = sink + v.data[i];
      p.Advance(v.nbytes);
    }
  }
  (void)sink;
}

struct Costs {
  double linear_flops_per_token = 0;  // every layer's projections, router and top-k experts
  double weight_bytes_per_token = 0;  // decode: weights read for one token
  double lm_head_flops = 0;
};

Costs CountCosts(const Model& m) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  Costs k;
  for (const auto& L : w.layers) {
    for (const LinearWeight* lw : {&L.attn.q, &L.attn.k, &L.attn.v, &L.attn.o, &L.moe.gate}) {
      k.linear_flops_per_token += 2.0 * lw->rows * lw->cols;
      k.weight_bytes_per_token += lw->bytes();
    }
    const ExpertWeights& ex = L.moe.experts[0];  // every expert has the same size
    const double expert_bytes = ex.w1.bytes() + ex.w3.bytes() + ex.w2.bytes();
    const double expert_flops = 2.0 * (ex.w1.rows * ex.w1.cols + ex.w3.rows * ex.w3.cols + ex.w2.rows * ex.w2.cols);
    k.linear_flops_per_token += c.num_experts_per_tok * expert_flops;
    k.weight_bytes_per_token += c.num_experts_per_tok * expert_bytes;
  }
  k.lm_head_flops = 2.0 * w.lm_head.rows * w.lm_head.cols;
  k.weight_bytes_per_token += w.lm_head.bytes() + w.embed.bytes() / w.embed.rows;
  return k;
}

// Attention FLOPs of a token at position p: QK^T and PV over p+1 positions, all layers.
double AttentionFlops(const ModelConfig& c, int64_t p) {
  return 4.0 * c.num_attention_heads * c.head_dim * static_cast<double>(p + 1) * c.num_hidden_layers;
}

int Run(const BenchOptions& o) {
  auto prefill_lens = ParseIdList(o.prefill);
  if (!prefill_lens.ok()) return Fail(Status(prefill_lens.status()).WithContext("--prefill"));
  auto contexts = ParseIdList(o.contexts);
  if (!contexts.ok()) return Fail(Status(contexts.status()).WithContext("--context"));
  if (o.threads > 0) ThreadPool::SetGlobalThreads(o.threads);
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
  KvBlockPool kv_pool(m.cache_layout(64));
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
          float* k = cache.K(l, p, g);
          float* v = cache.V(l, p, g);
          for (int64_t i = 0; i < c.head_dim; ++i) k[i] = nd(rng), v[i] = nd(rng);
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
  if (o.scaling && threads > 1) {
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
  uint64_t file_bytes = 0;
  for (const auto& f : m.store().files()) file_bytes += f->file_size();
  const double kv_pool_bytes = static_cast<double>(kv_pool.blocks_allocated()) * kv_pool.block_floats() * 4;

  std::fprintf(stderr, "measuring the machine again...\n");
  // (SetGlobalThreads above replaced the pool that `pool` referred to.)
  const double bandwidth_after = MeasureBandwidth(ThreadPool::Global());
  const double peak_after = MeasurePeakFlops(ThreadPool::Global());
  const double bandwidth = std::max(bandwidth_before, bandwidth_after);
  const double peak = std::max(peak_before, peak_after);

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
    const double kv_bytes = avg_ctx * c.num_hidden_layers * 2.0 * c.kv_dim() * sizeof(float);
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
                      {"thread_scaling", scaling},
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
  std::printf("\n%-10s %12s %14s %12s\n", "prefill", "tokens/s", "GFLOP/s", "of peak");
  for (const auto& r : prefill_rows)
    std::printf("%-10lld %12.1f %14.1f %11.1f%%\n", (long long)r["tokens"].get<int64_t>(), r["tokens_per_s"].get<double>(),
                r["flops"].get<double>() / r["seconds"].get<double>() / 1e9, 100 * r["compute_utilization"].get<double>());
  std::printf("\n%-10s %12s %14s %14s %12s\n", "context", "tokens/s", "weights MB/tok", "KV MB/tok", "of bandwidth");
  for (const auto& r : decode_rows)
    std::printf("%-10lld %12.2f %14.1f %14.1f %11.1f%%\n", (long long)r["context"].get<int64_t>(),
                r["tokens_per_s"].get<double>(), r["weight_bytes_per_token"].get<double>() / 1e6,
                r["kv_bytes_per_token"].get<double>() / 1e6, 100 * r["bandwidth_utilization"].get<double>());
  std::printf("\nmemory: peak RSS %.2f GiB; weights file %.2f GiB + KV pool %.2f GiB; peak is %+.1f%% of those\n",
              peak_rss / double(1ull << 30), file_bytes / double(1ull << 30), kv_pool_bytes / double(1ull << 30),
              100.0 * (peak_rss / (file_bytes + kv_pool_bytes) - 1.0));
  if (!scaling.is_null())
    std::printf("threads: prefill of 512 tokens is %.2fx faster on %d threads than on 1\n",
                scaling["prefill_512_speedup"].get<double>(), threads);
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
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
