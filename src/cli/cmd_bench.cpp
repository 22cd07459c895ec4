// m2 bench: prefill and decode speed, reported against the machine's own ceilings
// measured in the same run (read bandwidth for decode, fp32 FMA peak for prefill), with
// best, median, mean and standard deviation over the repetitions. A phase that fails is
// reported as failed (and the command exits with 1), never timed.
// m2 bench --competing-load: 1 thread against N with and without one CPU-bound process
// per core running beside it (see RunCompetingLoad).
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/cpu.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "cli/bench_serving.h"
#include "cli/bench_util.h"
#include "cli/engine_flags.h"
#include "cli/parallel_flags.h"
#include "runtime/engine.h"
#include "cli/commands.h"
#include "kernels/linear_bf16.h"
#include "kernels/linear_int8.h"
#include "kernels/linear_int16.h"
#include "kernels/probe.h"
#include "model/model.h"
#include "cli/bench_spec.h"

namespace m2::cli {

namespace {

// Which prefill GEMM the model's weights take (what --activations, auto included, gave
// them): of the int8 GEMM, the bf16 one on the tile unit, the vector bf16 one and the fp32
// one, the one that multiplies the most weights (a q4 model's few bf16 weights on the tile
// unit do not make the tile unit its ceiling).
enum class PrefillGemm { kFp32, kBf16, kBf16Amx, kInt8, kInt16 };
// The weight format holding most of the parameters that take the int8 GEMM (q8 or q4; the
// AVX2 build's ceiling differs between them; FP8 multiplies as q8 there).
WeightFormat Int8GemmFormatOf(const ModelWeights& weights) {
  int64_t q8 = 0, q4 = 0;
  ForEachLinear(const_cast<ModelWeights&>(weights), [&](LinearWeight& w) {
    if (!UsesInt8Gemm(w, kMaxGemvTokens + 1)) return;
    (w.format == WeightFormat::kQ4 ? q4 : q8) += w.rows * w.cols;
  });
  return q8 > q4 ? WeightFormat::kQ8 : WeightFormat::kQ4;
}

PrefillGemm PrefillGemmOf(const ModelWeights& weights) {
  int64_t params[5] = {0, 0, 0, 0, 0};
  // ForEachLinear takes a mutable model; this only reads.
  ForEachLinear(const_cast<ModelWeights&>(weights), [&](LinearWeight& w) {
    PrefillGemm g = PrefillGemm::kFp32;
    if (UsesInt8Gemm(w, kMaxGemvTokens + 1)) g = PrefillGemm::kInt8;
    else if (UsesInt16Gemm(w, kMaxGemvTokens + 1)) g = PrefillGemm::kInt16;
    else if (UsesBf16Gemm(w, kMaxGemvTokens + 1))
      g = AmxBf16Available() && GemmAmxSupports(w) ? PrefillGemm::kBf16Amx : PrefillGemm::kBf16;
    params[static_cast<int>(g)] += w.rows * w.cols;
  });
  int best = 0;
  for (int g = 1; g < 5; ++g)
    if (params[g] > params[best]) best = g;
  return static_cast<PrefillGemm>(best);
}

// --parallel: what each rank spent on the decode steps between two GatherRankStats (one
// stream at context C: one token per step).
nlohmann::json RankRows(const std::vector<RankStats>& a, const std::vector<RankStats>& b, int32_t context) {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) {
    const double steps = static_cast<double>(b[r].forwards - a[r].forwards);
    if (steps <= 0) continue;
    const double step = (b[r].forward_seconds - a[r].forward_seconds) / steps;
    const double comm = (b[r].forward_comm_seconds - a[r].forward_comm_seconds) / steps;
    rows.push_back({{"rank", r}, {"context", context}, {"steps", steps}, {"weight_bytes", b[r].weight_bytes},
                    {"resident_bytes", b[r].resident_bytes}, {"seconds_per_step", step},
                    {"compute_seconds_per_step", step - comm}, {"communication_seconds_per_step", comm},
                    {"collectives_per_step", static_cast<double>(b[r].comm.calls - a[r].comm.calls) / steps},
                    {"bytes_sent_per_token", static_cast<double>(b[r].comm.bytes_sent - a[r].comm.bytes_sent) / steps},
                    {"bytes_received_per_token",
                     static_cast<double>(b[r].comm.bytes_received - a[r].comm.bytes_received) / steps}});
  }
  return rows;
}

// What m2 bench reads between rounds of decode steps: the first `mib` MiB (256 unless
// --step-reads says otherwise) of a matrix's weights (its data, not its scales), or
// nothing where it holds less: a smaller matrix would sit in the caches of some machines,
// and the read would measure them instead of the memory.
struct StepRead {
  const float* p = nullptr;  // the probe's reads take any bytes (kernels/probe.h)
  int64_t bytes = 0;
};
StepRead StepReadOf(const LinearWeight& w, int64_t mib) {
  const int64_t bytes = mib << 20;
  if (mib <= 0 || !w.valid() || w.data_bytes() < bytes) return {};
  return {static_cast<const float*>(w.data), bytes};
}

struct BenchOptions {
  std::string model;
  std::string prefill = "128,512,2048";
  std::string contexts = "128,2048,8192";
  int decode_steps = 16;
  int context_chunk = 0;  // > 0: also time a prefill chunk of this many tokens at each context
  int repeats = 2;
  int threads = 0;
  bool json = false;
  bool scaling = true;
  int64_t step_read_mib = 256;    // reads of the weights between decode rounds (StepReadOf); 0: none
  std::string kv_dtype = "bf16";
  std::string streams;            // e.g. "1,4,8,16": batched decode through the engine
  int64_t stream_context = 128;
  int prefix_turns = 0;           // > 0: the prefix-cache conversation
  int64_t prefix_system = 4000;
  bool serving_only = false;      // skip the single-sequence prefill / decode / scaling sections
  std::string spec = "off";       // lookup: only the speculative-decoding comparison (bench_spec.h)
  int draft = 4;
  int spec_tokens = 200;
  std::string activations = "auto";  // as generate / chat / serve (engine_flags.h)
  std::string attention = "auto";
  WeightMemory weights = WeightMemory::kAuto;  // --mmap / --no-mmap
  bool competing_load = false;    // only the 1-vs-N-threads test with competing processes
  int load_rounds = 5;
  int64_t load_prompt = 64;
  int load_decode = 128;
  std::string parallel = "off";
  bool probe = false;             // only the read-bandwidth probe, no model
};

// --probe: the memory's read speed on the benchmark's threads, the probe every run of m2
// bench takes before and after its timings, alone (no model): for timing another program
// (scripts/compare_llamacpp.sh reads it around each llama.cpp run, so that both engines'
// decode speeds can be set against the memory of their own minutes).
int RunProbe(const BenchOptions& o) {
  ThreadPool pool(o.threads);
  const double bandwidth = MeasureBandwidth(pool);
  if (o.json) {
    nlohmann::json j = {{"read_bandwidth_bytes_per_s", bandwidth}, {"threads", pool.size()}, {"kernels", ActiveKernelsName()}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("read bandwidth: %.2f GB/s on %d threads (%s kernels)\n", bandwidth / 1e9, pool.size(), ActiveKernelsName());
  }
  return 0;
}

// Statistics of one measurement over its repetitions, in tokens/s: the best and the
// median, and (as llama-bench reports) the mean and the sample standard deviation.
struct Stats {
  double best = 0, median = 0, mean = 0, sd = 0;
  int n = 0;
};
Stats TokensPerSecond(const std::vector<double>& seconds, double tokens) {
  Stats st;
  std::vector<double> v;
  for (double s : seconds) v.push_back(tokens / s);
  if (v.empty()) return st;
  std::sort(v.begin(), v.end());
  st.n = static_cast<int>(v.size());
  st.best = v.back();
  st.median = v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  for (double x : v) st.mean += x;
  st.mean /= st.n;
  if (st.n > 1) {
    double ss = 0;
    for (double x : v) ss += (x - st.mean) * (x - st.mean);
    st.sd = std::sqrt(ss / (st.n - 1));
  }
  return st;
}
nlohmann::json StatsJson(const Stats& s) {
  return {{"best", s.best}, {"median", s.median}, {"mean", s.mean}, {"stddev", s.sd}, {"repetitions", s.n}};
}

// One CPU-bound process per core: children that spin until killed (and die with this
// process: PR_SET_PDEATHSIG). Stopped by the destructor, by pid.
class Competitors {
 public:
  explicit Competitors(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        volatile uint64_t x = 0;
        for (;;) x = x * 6364136223846793005ull + 1;
      }
      if (pid < 0) {
        error_ = fmt::format("fork of competing process {} of {} failed: {}", i + 1, count, std::strerror(errno));
        break;
      }
      pids_.push_back(pid);
    }
  }
  ~Competitors() {
    for (pid_t p : pids_) kill(p, SIGKILL);
    for (pid_t p : pids_) waitpid(p, nullptr, 0);
  }
  const std::string& error() const { return error_; }

 private:
  std::vector<pid_t> pids_;
  std::string error_;
};

// --competing-load: tokens/s of a prefill of `load_prompt` tokens and of `load_decode`
// decode steps after it, on 1 thread and on the pool's N, first on the machine as it is,
// then with one CPU-bound competing process per available core. `load_rounds` rounds,
// 1 and N threads alternating within each; the medians are compared. Fails (exit 1) if
// N threads are slower than 0.9x one thread in any of the four cases.
int RunCompetingLoad(const BenchOptions& o, Model& m, ThreadPool& pool) {
  const ModelConfig& c = m.config();
  const int threads = pool.size();
  if (threads < 2) return Fail(Error("--competing-load compares 1 thread with N: give -t 2 or more (found {})", threads));
  if (o.load_prompt + o.load_decode > c.max_position_embeddings)
    return Fail(Error("--load-prompt {} plus --load-decode {} passes the model's context of {}", o.load_prompt,
                      o.load_decode, c.max_position_embeddings));
  ThreadPool one(1);
  KvBlockPool kv_pool(m.cache_layout(64, false, KvDtype::kBf16));
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(o.load_prompt)), next(static_cast<size_t>(o.load_decode));
  for (auto& t : prompt) t = tok(rng);
  for (auto& t : next) t = tok(rng);
  std::vector<float> logits;
  struct UsePoolOfLoad {  // the model goes back to its own pool however this returns
    Model& m;
    ~UsePoolOfLoad() { m.SetPool(nullptr); }
  } restore{m};
  // One measurement: {prefill seconds, decode seconds}.
  const auto measure = [&](ThreadPool& p) -> Result<std::pair<double, double>> {
    m.SetPool(&p);
    SequenceCache cache(&kv_pool);
    SequenceCache* cs[] = {&cache};
    ForwardBatch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], 0, i + 1 == prompt.size());
    logits.clear();
    auto t0 = Clock::now();
    M2_RETURN_IF_ERROR(m.Forward(b, cs, logits));
    const double prefill = Seconds(t0, Clock::now());
    t0 = Clock::now();
    for (int32_t t : next) {
      ForwardBatch d;
      d.Add(t, 0, true);
      logits.clear();
      M2_RETURN_IF_ERROR(m.Forward(d, cs, logits));
    }
    return std::make_pair(prefill, Seconds(t0, Clock::now()));
  };
  struct Case {
    std::vector<double> prefill[2], decode[2];  // [0]: 1 thread, [1]: N threads
  } cases[2];                                   // [0]: no load, [1]: competing load
  const int competitors = AvailableCores();
  for (int load = 0; load < 2; ++load) {
    std::fprintf(stderr, "%s: %d rounds of prefill %lld + decode %d tokens, 1 and %d threads alternating...\n",
                 load ? fmt::format("with {} competing processes", competitors).c_str() : "machine as it is",
                 o.load_rounds, (long long)o.load_prompt, o.load_decode, threads);
    std::unique_ptr<Competitors> comp;
    if (load) {
      comp = std::make_unique<Competitors>(competitors);
      if (!comp->error().empty()) return Fail(Error("{}", comp->error()));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let them take the cores
    }
    if (auto warm = measure(pool); !warm.ok()) return Fail(warm.status());
    for (int r = 0; r < o.load_rounds; ++r)
      for (int k = 0; k < 2; ++k) {
        auto t = measure(k == 0 ? one : pool);
        if (!t.ok())
          return Fail(Status(t.status()).WithContext(
              fmt::format("{} thread(s){}", k == 0 ? 1 : threads, load ? " under load" : "")));
        cases[load].prefill[k].push_back(t->first);
        cases[load].decode[k].push_back(t->second);
      }
  }
  bool failed = false;
  nlohmann::json rows = nlohmann::json::array();
  for (int load = 0; load < 2; ++load)
    for (int phase = 0; phase < 2; ++phase) {
      const auto& v = phase == 0 ? cases[load].prefill : cases[load].decode;
      const double tokens = phase == 0 ? static_cast<double>(o.load_prompt) : o.load_decode;
      const Stats s1 = TokensPerSecond(v[0], tokens), sn = TokensPerSecond(v[1], tokens);
      const double ratio = sn.median / s1.median;
      const bool ok = ratio >= 0.9;
      failed |= !ok;
      rows.push_back({{"load", load ? "competing" : "none"}, {"phase", phase == 0 ? "prefill" : "decode"},
                      {"one_thread", StatsJson(s1)}, {"n_threads", StatsJson(sn)}, {"ratio_of_medians", ratio},
                      {"pass", ok}});
    }
  if (o.json) {
    std::printf("%s\n", nlohmann::json({{"model", o.model}, {"threads", threads}, {"competing_processes", competitors},
                                        {"kernels", ActiveKernelsName()}, {"cpu", Cpu().Describe()},
                                        {"prompt_tokens", o.load_prompt}, {"decode_tokens", o.load_decode},
                                        {"rounds", o.load_rounds}, {"rows", rows}, {"pass", !failed}})
                            .dump(2)
                            .c_str());
  } else {
    std::printf("competing load: %d threads vs 1, %s kernels, %d rounds (tokens/s: median, mean +- sd)\n", threads,
                ActiveKernelsName(), o.load_rounds);
    std::printf("%-22s %-8s %24s %24s %8s\n", "load", "phase", "1 thread", fmt::format("{} threads", threads).c_str(),
                "ratio");
    for (const auto& r : rows) {
      const auto cell = [](const nlohmann::json& s) {
        return fmt::format("{:.1f} ({:.1f} +- {:.1f})", s["median"].get<double>(), s["mean"].get<double>(),
                           s["stddev"].get<double>());
      };
      std::printf("%-22s %-8s %24s %24s %7.2fx%s\n",
                  r["load"] == "none" ? "none" : fmt::format("{} busy processes", competitors).c_str(),
                  r["phase"].get<std::string>().c_str(), cell(r["one_thread"]).c_str(), cell(r["n_threads"]).c_str(),
                  r["ratio_of_medians"].get<double>(), r["pass"].get<bool>() ? "" : "  FAILED (< 0.9x)");
    }
    std::printf("%s\n", failed ? "FAILED: N threads were slower than 0.9x one thread"
                                : "passed: N threads at least 0.9x one thread in every case");
  }
  return failed ? 1 : 0;
}

// "128,512" -> {128, 512}: token counts, each at least 1; an error names the flag, what it
// expected and what it found.
Result<std::vector<int32_t>> ParseCounts(const std::string& text, const char* flag, const char* what, const char* each) {
  auto v = ParseIdList(text);
  if (!v.ok() || v->empty())
    return Error("{}: expected {} as positive integers separated by commas (e.g. 128,2048), found '{}'", flag, what,
                 text);
  for (int32_t x : *v)
    if (x < 1) return Error("{}: each {} must be at least 1, found {} (in '{}')", flag, each, x, text);
  return v;
}

int Run(const BenchOptions& o) {
  if (o.probe) {
    if (!o.model.empty()) return Fail(Error("m2 bench --probe measures the memory alone: drop -m {}", o.model));
    return RunProbe(o);
  }
  if (o.model.empty())
    return Fail(Error("m2 bench needs a model folder: -m DIR (make one with m2 make-bench-model; or --probe alone, "
                      "which measures the memory's read speed)"));
  auto par = StartParallel(o.parallel, o.model,
                           {.progress = false, .threads = o.threads, .activations = ActivationsOf(o.activations), .attention = AttentionOf(o.attention)});
  if (!par.ok()) return Fail(par.status());
  if (par->exit_code) return *par->exit_code;  // a rank > 0: it has followed rank 0
  auto prefill_lens = ParseCounts(o.prefill, "--prefill", "prompt lengths", "prompt length");
  if (!prefill_lens.ok()) return Fail(prefill_lens.status());
  auto contexts = ParseCounts(o.contexts, "--context", "decode context lengths", "decode context length");
  if (!contexts.ok()) return Fail(contexts.status());
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
  if (Status st = CheckAttentionCache(o.attention, o.kv_dtype); !st.ok()) return Fail(st);
  if (o.serving_only) {
    prefill_lens->clear();
    contexts->clear();
  }
  // The benchmark's threads: one pool, handed to the model (and to the ceilings' probes).
  ThreadPool pool(ThreadsFor(o.threads, *par));
  if (o.spec != "off") {
    runtime::SpecOptions spec;
    auto mode = runtime::ParseSpecMode(o.spec);
    if (!mode.ok()) return Fail(Status(mode.status()).WithContext("--spec"));
    spec.mode = *mode;
    spec.draft = o.draft;
    if (Status st = spec.Validate(); !st.ok()) return Fail(st);
    auto model = LoadModel(o.model, {.pool = &pool, .activations = ActivationsOf(o.activations), .attention = AttentionOf(o.attention), .weights = o.weights}, *par);
    if (!model.ok()) return Fail(model.status());
    return RunSpecBench(**model, o.model, spec, o.spec_tokens, o.json);
  }
  const int threads = pool.size();
  if (o.competing_load) {
    auto model = LoadModel(o.model, {.pool = &pool, .activations = ActivationsOf(o.activations), .attention = AttentionOf(o.attention), .weights = o.weights}, *par);
    if (!model.ok()) return Fail(model.status());
    Prefault(**model);
    return RunCompetingLoad(o, **model, pool);
  }

  std::fprintf(stderr, "measuring the machine: read bandwidth and fp32 FMA peak on %d threads (%s kernels)\n",
               threads, ActiveKernelsName());
  // The ceilings are measured before and again after the model's timings, and the higher
  // of each pair is the one reported and divided by: on a shared machine that slows down
  // part of the time, a ceiling taken during a slow spell would flatter the ratios.
  const double bandwidth_before = MeasureBandwidth(pool);
  const double peak_before = MeasurePeakFlops(pool);
  const ActivationMode mode = ActivationsOf(o.activations);
  { std::ofstream("/proc/self/clear_refs") << "5"; }  // restart the peak-RSS count

  auto model = LoadModel(o.model, {.pool = &pool, .activations = mode, .attention = AttentionOf(o.attention), .weights = o.weights}, *par);
  if (!model.ok()) return Fail(model.status());
  Model& m = **model;
  const ModelConfig& c = m.config();
  if (Status st = runtime::CheckKvDtype(c, *kv_dtype); !st.ok()) return Fail(st);
  // The prefill rows are divided by the ceiling of the GEMM the model's weights took (what
  // --activations, auto included, gave them): with bf16 prefill the vdpbf16ps rate (twice
  // the FMA's on AMD, level with it on Intel) or, where the tile unit runs it, TDPBF16PS's;
  // with int8 prefill (int8+int8) the vpdpbusd rate, four times the FMA's.
  const PrefillGemm gemm = PrefillGemmOf(m.weights());
  const bool int8_gemm = gemm == PrefillGemm::kInt8, int16_gemm = gemm == PrefillGemm::kInt16;
  const bool amx = gemm == PrefillGemm::kBf16Amx;
  const bool bf16 = amx || gemm == PrefillGemm::kBf16;
  const Int8GemmKernel int8_kernel = Int8GemmFor(WeightFormat::kQ4);  // q8's too
  const WeightFormat int8_format = Int8GemmFormatOf(m.weights());
  const bool dot = gemm != PrefillGemm::kFp32;  // a dot-product ceiling for the prefill rows
  const auto measure_dot = [&] {
    return amx ? MeasurePeakAmxFlops(pool)
               : bf16      ? MeasurePeakBf16Flops(pool)
               : int8_gemm ? MeasurePeakInt8Ops(pool, int8_kernel, int8_format)
               : int16_gemm ? MeasurePeak(pool, Int16GemmLanes() == 16 ? Int16DotBurstAvx512Vnni : Int16DotBurstAvx2)
                            : 0.0;
  };
  const double peak_dot_before = measure_dot();
  Prefault(m);
  const Costs costs = CountCosts(m);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  for (int32_t C : *contexts)
    if (C + o.decode_steps + 1 > c.max_position_embeddings)
      return Fail(Error("--context {} plus {} decode steps passes the model's context of {}", C, o.decode_steps,
                        c.max_position_embeddings));
  KvBlockPool kv_pool(m.cache_layout(64, false, *kv_dtype));
  std::vector<float> logits;

  // Prefill: a fresh sequence of P random tokens, logits for the last one only. A failed
  // forward pass is an error, never a time.
  const auto run_prefill = [&](int64_t P) -> Result<double> {
    SequenceCache cache(&kv_pool);
    SequenceCache* cs[] = {&cache};
    ForwardBatch b;
    for (int64_t i = 0; i < P; ++i) b.Add(tok(rng), 0, i + 1 == P);
    logits.clear();
    const auto t0 = Clock::now();
    M2_RETURN_IF_ERROR(m.Forward(b, cs, logits));
    return Seconds(t0, Clock::now());
  };
  bool any_failed = false;
  std::vector<std::vector<double>> prefill_seconds;  // per length: every repetition
  std::vector<std::string> prefill_errors;
  std::vector<double> prefill_flops;
  for (int32_t P : *prefill_lens) {
    std::fprintf(stderr, "prefill %d tokens (%d repetitions)...\n", P, o.repeats);
    std::vector<double> reps;
    std::string error;
    for (int r = 0; r < o.repeats && error.empty(); ++r) {
      auto s = run_prefill(P);
      if (s.ok()) reps.push_back(*s);
      else error = s.status().message();
    }
    if (!error.empty()) {
      std::fprintf(stderr, "m2: error: prefill %d tokens: %s\n", P, error.c_str());
      any_failed = true;
      reps.clear();
    }
    double flops = costs.linear_flops_per_token * P + costs.lm_head_flops;
    for (int64_t p = 0; p < P; ++p) flops += AttentionFlops(c, p, /*prefill=*/true);
    prefill_seconds.push_back(reps);
    prefill_errors.push_back(error);
    prefill_flops.push_back(flops);
  }

  // Decode at a given context: the cache is filled with synthetic keys and values (the
  // cost of attention does not depend on their values), then `decode_steps` tokens. In one
  // process the contexts take turns step by step (a step at 128, one at 2048, one at 8192,
  // again), so a slow spell of the machine falls on all of them and their ratio holds even
  // where single runs drift by 10-30%; split over ranks (--parallel) each context runs on
  // its own, so that the per-rank statistics cover the first context's steps only.
  std::vector<std::vector<double>> decode_steps(contexts->size());  // per context: every timed step
  std::vector<std::string> decode_errors(contexts->size());
  std::vector<double> context_chunk_seconds(contexts->size(), 0.0);  // per context (0: not measured)
  nlohmann::json rank_rows = nlohmann::json::array();  // --parallel: per rank, decode at the first context
  std::vector<std::unique_ptr<SequenceCache>> caches(contexts->size());
  const auto failed = [&](size_t i, const Status& e) {
    std::fprintf(stderr, "m2: error: decode at context %d: %s\n", (*contexts)[i], e.message().c_str());
    any_failed = true;
    decode_steps[i].clear();
    decode_errors[i] = e.message();
    caches[i].reset();
  };
  const auto fill = [&](size_t i) {
    const int32_t C = (*contexts)[i];
    caches[i] = std::make_unique<SequenceCache>(&kv_pool);
    SequenceCache& cache = *caches[i];
    if (Status st = cache.Extend(C - 1); !st.ok()) return failed(i, st);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (c.layer_type(l) == LayerType::kLightning) {  // a state of the same size at any context
        float* state = cache.State(l);
        for (int64_t j = 0; j < c.lightning_state_floats(); ++j) state[j] = 0.01f * nd(rng);
        continue;
      }
      const int64_t heads = cache.layout().layers[static_cast<size_t>(l)].kv_heads;  // this rank's (--parallel)
      std::vector<float> k(static_cast<size_t>(c.head_dim)), v(k.size());
      for (int64_t p = 0; p + 1 < C; ++p)
        for (int64_t g = 0; g < heads; ++g) {
          for (int64_t j = 0; j < c.head_dim; ++j) k[j] = nd(rng), v[j] = nd(rng);
          StoreKv(k.data(), c.head_dim, *kv_dtype, cache.KRaw(l, p, g));
          StoreKv(v.data(), c.head_dim, *kv_dtype, cache.VRaw(l, p, g));
        }
    }
  };
  // One decode step at context i (s = 0 warms up and is not timed).
  const auto step = [&](size_t i, int s) {
    SequenceCache* cs[] = {caches[i].get()};
    ForwardBatch b;
    b.Add(tok(rng), 0, true);
    logits.clear();
    const auto t0 = Clock::now();
    if (Status st = m.Forward(b, cs, logits); !st.ok()) return failed(i, st);
    if (s > 0) decode_steps[i].push_back(Seconds(t0, Clock::now()));
  };
  // Prefill at this context: a chunk of new prompt tokens appended to it (what a long
  // conversation's next turn costs), logits for its last token.
  const auto chunk = [&](size_t i) {
    if (!caches[i] || o.context_chunk <= 0) return;
    SequenceCache* cs[] = {caches[i].get()};
    ForwardBatch b;
    for (int j = 0; j < o.context_chunk; ++j) b.Add(tok(rng), 0, j + 1 == o.context_chunk);
    logits.clear();
    const auto t0 = Clock::now();
    if (Status st = m.Forward(b, cs, logits); !st.ok()) return failed(i, st);
    context_chunk_seconds[i] = Seconds(t0, Clock::now());
  };
  // Between rounds of decode steps, a read of the weights themselves (the first 256 MiB,
  // or --step-reads, of the output matrix, the largest a step reads; the probe's four
  // patterns, best of them): the memory of a shared VM changes speed from one minute to
  // the next, so a ceiling
  // measured before and after the timings can belong to another regime than the steps;
  // each step is also compared with the reads just before and after it. Skipped where
  // that matrix is smaller (it would be read from the caches) or with --step-reads 0.
  const StepRead step_read = StepReadOf(m.weights().lm_head, o.step_read_mib);
  std::vector<double> step_reads;  // after round s = 0, 1, ... (round 0 warms up)
  if (m.ranks() == 1) {
    for (size_t i = 0; i < contexts->size(); ++i) {
      std::fprintf(stderr, "filling a cache of context %d...\n", (*contexts)[i]);
      fill(i);
    }
    std::fprintf(stderr, "decode, the contexts taking turns step by step...\n");
    for (int s = 0; s <= o.decode_steps; ++s) {
      for (size_t i = 0; i < contexts->size(); ++i)
        if (caches[i]) step(i, s);
      if (step_read.bytes > 0) step_reads.push_back(MeasureReadBandwidth(pool, step_read.p, step_read.bytes / 4, 1));
    }
    for (size_t i = 0; i < contexts->size(); ++i) chunk(i);
  } else {
    for (size_t i = 0; i < contexts->size(); ++i) {
      std::fprintf(stderr, "decode at context %d...\n", (*contexts)[i]);
      fill(i);
      std::vector<RankStats> before;
      for (int s = 0; s <= o.decode_steps && caches[i]; ++s) {
        if (s == 1 && i == 0) before = m.GatherRankStats();
        step(i, s);
      }
      if (caches[i] && !before.empty()) rank_rows = RankRows(before, m.GatherRankStats(), (*contexts)[i]);
      chunk(i);
      caches[i].reset();  // one context's cache at a time
    }
  }
  caches.clear();

  nlohmann::json scaling;
  if (o.scaling && threads > 1 && !o.serving_only) {
    std::fprintf(stderr, "prefill 512 tokens on 1 thread and on %d...\n", threads);
    // Alternating, best of `repeats` each, so a slow spell of the machine hits both.
    ThreadPool one(1);
    double multi = 1e30, single = 1e30;
    std::string error;
    for (int r = 0; r < o.repeats && error.empty(); ++r) {
      auto tm = run_prefill(512);
      m.SetPool(&one);
      auto t1 = tm.ok() ? run_prefill(512) : Result<double>(tm.status());
      m.SetPool(nullptr);
      if (!t1.ok()) error = t1.status().message();
      else multi = std::min(multi, *tm), single = std::min(single, *t1);
    }
    if (error.empty()) {
      scaling = {{"threads", threads}, {"prefill_512_speedup", single / multi}};
    } else {
      std::fprintf(stderr, "m2: error: thread scaling (prefill 512): %s\n", error.c_str());
      any_failed = true;
      scaling = {{"threads", threads}, {"error", error}};
    }
  }

  const int64_t peak_rss = PeakRssBytes();

  // Serving sections, through the engine.
  nlohmann::json streams_rows, prefix, sampling;
  if (!streams.empty())
    streams_rows = BenchStreams(m, costs, streams, o.stream_context, o.decode_steps, *kv_dtype, bandwidth_before);
  if (o.prefix_turns > 0) prefix = BenchPrefixCache(m, o.prefix_system, o.prefix_turns, *kv_dtype);
  double step_for_sampling = 0;
  if (!decode_steps.empty() && !decode_steps[0].empty()) step_for_sampling = 1.0 / TokensPerSecond(decode_steps[0], 1).median;
  if (step_for_sampling == 0 && streams_rows.is_array() && !streams_rows.empty())
    step_for_sampling = streams_rows[0]["seconds_per_step"].get<double>();
  sampling = BenchSampling(c.vocab_size, step_for_sampling);
  uint64_t file_bytes = 0;
  for (const auto& f : m.store().files()) file_bytes += f->file_size();
  const double kv_pool_bytes = static_cast<double>(kv_pool.blocks_allocated()) * kv_pool.block_bytes();

  std::fprintf(stderr, "measuring the machine again...\n");
  const double bandwidth_after = MeasureBandwidth(pool);
  const double peak_after = MeasurePeakFlops(pool);
  const double peak_dot_after = measure_dot();
  const double bandwidth = std::max(bandwidth_before, bandwidth_after);
  const double peak = std::max(peak_before, peak_after);
  const double peak_dot = std::max(peak_dot_before, peak_dot_after);
  const double prefill_peak = dot ? peak_dot : peak;  // what prefill rows are divided by

  if (streams_rows.is_array())
    for (auto& r : streams_rows)
      r["bandwidth_utilization"] = r["bytes_per_step"].get<double>() / r["seconds_per_step"].get<double>() / bandwidth;
  // Prefill rows report the best repetition (tokens_per_s, compute_utilization) as before,
  // decode rows the median step; "stats" has best, median, mean and sd of both.
  nlohmann::json prefill_rows = nlohmann::json::array();
  for (size_t i = 0; i < prefill_seconds.size(); ++i) {
    const int32_t P = (*prefill_lens)[i];
    if (!prefill_errors[i].empty()) {
      prefill_rows.push_back({{"tokens", P}, {"error", prefill_errors[i]}});
      continue;
    }
    const Stats st = TokensPerSecond(prefill_seconds[i], P);
    const double s = P / st.best, flops = prefill_flops[i];
    prefill_rows.push_back({{"tokens", P}, {"seconds", s}, {"tokens_per_s", st.best}, {"flops", flops},
                            {"compute_utilization", flops / s / prefill_peak}, {"stats", StatsJson(st)}});
  }
  nlohmann::json decode_rows = nlohmann::json::array();
  for (size_t i = 0; i < decode_steps.size(); ++i) {
    const int32_t C = (*contexts)[i];
    if (!decode_errors[i].empty()) {
      decode_rows.push_back({{"context", C}, {"error", decode_errors[i]}});
      continue;
    }
    const Stats st = TokensPerSecond(decode_steps[i], 1);
    const double per_token = 1.0 / st.median;
    const double avg_ctx = C + o.decode_steps / 2.0;
    const double kv_bytes = avg_ctx * static_cast<double>(runtime::KvBytesPerToken(c, *kv_dtype));
    const double bytes = costs.weight_bytes_per_token + kv_bytes + costs.state_bytes_per_token;
    decode_rows.push_back({{"context", C}, {"tokens_per_s", st.median}, {"seconds_per_token", per_token},
                           {"weight_bytes_per_token", costs.weight_bytes_per_token}, {"kv_bytes_per_token", kv_bytes},
                           {"state_bytes_per_token", costs.state_bytes_per_token},
                           {"cache_bytes_at_context",
                            static_cast<double>(C) * static_cast<double>(runtime::KvBytesPerToken(c, *kv_dtype)) +
                                costs.state_bytes_per_token / 2},
                           {"bandwidth_utilization", bytes / per_token / bandwidth}, {"stats", StatsJson(st)}});
    if (m.ranks() == 1 && step_reads.size() == decode_steps[i].size() + 1 && !decode_steps[i].empty()) {
      // Step s (1-based) ran between reads s - 1 and s: its bytes per second over their mean.
      std::vector<double> ratio, read;
      for (size_t k = 0; k < decode_steps[i].size(); ++k) {
        read.push_back(0.5 * (step_reads[k] + step_reads[k + 1]));
        ratio.push_back(bytes / decode_steps[i][k] / read.back());
      }
      std::vector<size_t> by_read(read.size());
      for (size_t k = 0; k < by_read.size(); ++k) by_read[k] = k;
      std::sort(by_read.begin(), by_read.end(), [&](size_t a, size_t b) { return read[a] > read[b]; });
      std::vector<double> fast;
      for (size_t k = 0; k < (by_read.size() + 1) / 2; ++k) fast.push_back(ratio[by_read[k]]);
      std::sort(fast.begin(), fast.end());
      std::sort(ratio.begin(), ratio.end());
      const auto at = [](const std::vector<double>& v, double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]; };
      decode_rows.back()["of_reads_between_steps"] = {
          {"median", at(ratio, 0.5)}, {"p25", at(ratio, 0.25)}, {"p75", at(ratio, 0.75)},
          {"faster_half_median", at(fast, 0.5)}, {"faster_half_reads_min", read[by_read[fast.size() - 1]]},
          {"faster_half_reads_max", read[by_read[0]]}, {"read_bytes", step_read.bytes}, {"steps", ratio.size()}};
    }
    // Against the first context: the step-time ratio of the steps taken in turn (step s at
    // this context over step s at the first), median and quartiles.
    if (i > 0 && m.ranks() == 1 && decode_steps[0].size() == decode_steps[i].size() && !decode_steps[0].empty()) {
      std::vector<double> ratio;
      for (size_t s = 0; s < decode_steps[i].size(); ++s) ratio.push_back(decode_steps[i][s] / decode_steps[0][s]);
      std::sort(ratio.begin(), ratio.end());
      const auto at = [&ratio](double q) { return ratio[static_cast<size_t>(q * static_cast<double>(ratio.size() - 1))]; };
      decode_rows.back()["step_time_vs_first"] = {{"context", (*contexts)[0]}, {"median", at(0.5)},
                                                  {"p25", at(0.25)}, {"p75", at(0.75)}, {"pairs", ratio.size()}};
    }
    if (context_chunk_seconds[i] > 0) {
      // The chunk's FLOPs: projections and experts per token, attention over the context.
      double flops = costs.linear_flops_per_token * o.context_chunk + costs.lm_head_flops;
      const int64_t at = C + o.decode_steps;
      for (int64_t p = at; p < at + o.context_chunk; ++p) flops += AttentionFlops(c, p, /*prefill=*/true);
      decode_rows.back()["prefill_chunk"] = {
          {"tokens", o.context_chunk}, {"tokens_per_s", o.context_chunk / context_chunk_seconds[i]},
          {"flops", flops}, {"compute_utilization", flops / context_chunk_seconds[i] / prefill_peak}};
    }
  }
  if (streams_rows.is_object() || (prefix.is_object() && prefix.contains("error"))) any_failed = true;
  nlohmann::json j = {{"model", o.model}, {"kernels", ActiveKernelsName()}, {"cpu", Cpu().Describe()},
                      {"threads", threads}, {"activations", o.activations}, {"read_bandwidth_bytes_per_s", bandwidth}, {"peak_fp32_flops", peak},
                      {"prefill", prefill_rows}, {"decode", decode_rows}, {"weights_file_bytes", file_bytes},
                      {"weights_memory", m.store().read_into_memory() ? "read" : "mapped"},
                      {"kv_pool_bytes", kv_pool_bytes}, {"peak_rss_bytes", peak_rss},
                      {"peak_rss_over_weights_and_kv", peak_rss / (file_bytes + kv_pool_bytes) - 1.0},
                      {"thread_scaling", scaling}, {"kv_dtype", KvDtypeName(*kv_dtype)},
                      {"batched_decode", streams_rows}, {"prefix_cache", prefix}, {"sampling", sampling},
                      {"ceilings_measured", {{"before", {{"read_bandwidth_bytes_per_s", bandwidth_before}, {"peak_fp32_flops", peak_before}}},
                                             {"after", {{"read_bandwidth_bytes_per_s", bandwidth_after}, {"peak_fp32_flops", peak_after}}}}}};
  if (dot) {
    const char* key = bf16 ? "peak_bf16_flops" : int16_gemm ? "peak_int16_ops" : "peak_int8_ops";
    j[key] = peak_dot;
    j["ceilings_measured"]["before"][key] = peak_dot_before;
    j["ceilings_measured"]["after"][key] = peak_dot_after;
  }
  if (m.ranks() > 1) j["ranks"] = rank_rows;
  j["attention"] = AttentionName(m.attention_math(), *kv_dtype);
  j["prefill_gemm"] = amx ? "bf16 (tile unit)" : bf16 ? "bf16" : int8_gemm ? "int8" : int16_gemm ? "int16" : "fp32";
  // M2_DECODE_ROWS and M2_DECODE_PREFETCH, or what this CPU gets without them (kernels/linear.h).
  const bool one_row = DecodeOneRow(), l2_prefetch = DecodeRowPrefetch() == RowPrefetch::kL2Stream;
  j["decode_rows_per_pass"] = one_row ? "one" : "own";
  j["decode_prefetch"] = l2_prefetch ? "l2" : "l1+l2";
  j["failed"] = any_failed;
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return any_failed ? 1 : 0;
  }
  std::printf("machine: %s kernels, %d threads; read bandwidth %.1f GB/s; fp32 FMA peak %.1f GFLOP/s; "
              "activations %s; attention %s; decode rows a pass: %s (prefetch into %s)\n",
              ActiveKernelsName(), threads, bandwidth / 1e9, peak / 1e9, o.activations.c_str(),
              AttentionName(m.attention_math(), *kv_dtype), one_row ? "one" : "each kernel's own", l2_prefetch ? "L2" : "L1 + L2");
  std::printf("  (the higher of two measurements: before the timings %.1f GB/s, %.1f GFLOP/s; after %.1f GB/s, %.1f GFLOP/s)\n",
              bandwidth_before / 1e9, peak_before / 1e9, bandwidth_after / 1e9, peak_after / 1e9);
  if (dot)
    std::printf("  %s peak (%s) %.1f %s (before %.1f, after %.1f): the prefill rows' \"of peak\"\n",
                bf16 ? "bf16 dot-product" : int16_gemm ? "int16 dot-product" : "int8 dot-product",
                amx          ? "TDPBF16PS, the tile unit"
                : bf16       ? "vdpbf16ps"
                : int16_gemm ? (Int16GemmLanes() == 16 ? "vpdpwssd" : "vpmaddwd + vpaddd")
                             : Int8PeakName(int8_kernel, int8_format),
                peak_dot / 1e9,
                bf16 ? "GFLOP/s" : "Gop/s", peak_dot_before / 1e9, peak_dot_after / 1e9);
  const auto mean_sd = [](const nlohmann::json& st) {
    return fmt::format("{:.2f} +- {:.2f}", st["mean"].get<double>(), st["stddev"].get<double>());
  };
  if (!prefill_rows.empty())
    std::printf("\n%-10s %12s %12s %22s %14s %12s\n", "prefill", "best tok/s", "median", "mean +- sd (n)", "GFLOP/s (best)",
                bf16 ? "of bf16 peak" : int8_gemm ? "of int8 peak" : int16_gemm ? "of int16 peak" : "of peak");
  for (const auto& r : prefill_rows) {
    if (r.contains("error")) {
      std::printf("%-10lld FAILED: %s\n", (long long)r["tokens"].get<int64_t>(), r["error"].get<std::string>().c_str());
      continue;
    }
    const auto& st = r["stats"];
    std::printf("%-10lld %12.2f %12.2f %22s %14.1f %11.1f%%\n", (long long)r["tokens"].get<int64_t>(),
                st["best"].get<double>(), st["median"].get<double>(),
                fmt::format("{} ({})", mean_sd(st), st["repetitions"].get<int>()).c_str(),
                r["flops"].get<double>() / r["seconds"].get<double>() / 1e9, 100 * r["compute_utilization"].get<double>());
  }
  if (!decode_rows.empty())
    std::printf("\n%-10s %12s %12s %22s %14s %14s %12s\n", "context", "median tok/s", "best", "mean +- sd (n)",
                "weights MB/tok", "KV+state MB/tok", "of bandwidth");
  for (const auto& r : decode_rows) {
    if (r.contains("error")) {
      std::printf("%-10lld FAILED: %s\n", (long long)r["context"].get<int64_t>(), r["error"].get<std::string>().c_str());
      continue;
    }
    const auto& st = r["stats"];
    std::printf("%-10lld %12.2f %12.2f %22s %14.1f %14.1f %11.1f%%\n", (long long)r["context"].get<int64_t>(),
                st["median"].get<double>(), st["best"].get<double>(),
                fmt::format("{} ({})", mean_sd(st), st["repetitions"].get<int>()).c_str(),
                r["weight_bytes_per_token"].get<double>() / 1e6, (r["kv_bytes_per_token"].get<double>() + r["state_bytes_per_token"].get<double>()) / 1e6,
                100 * r["bandwidth_utilization"].get<double>());
  }
  for (size_t k = 0; k < decode_rows.size(); ++k)
    if (const auto& r = decode_rows[k]; r.contains("of_reads_between_steps")) {
      const auto& v = r["of_reads_between_steps"];
      if (k == 0 || !decode_rows[k - 1].contains("of_reads_between_steps"))
        std::printf("against reads of the weights between the steps (%.0f MiB of the output matrix after each round; a "
                    "step's bytes per second over the mean of the reads before and after it):\n",
                    v["read_bytes"].get<double>() / (1 << 20));
      std::printf("context %lld: %.1f%% of the read (median of %d steps; quartiles %.1f-%.1f%%), %.1f%% in the faster "
                  "half (reads %.1f-%.1f GB/s)\n",
                  (long long)r["context"].get<int64_t>(), 100 * v["median"].get<double>(), v["steps"].get<int>(),
                  100 * v["p25"].get<double>(), 100 * v["p75"].get<double>(), 100 * v["faster_half_median"].get<double>(),
                  v["faster_half_reads_min"].get<double>() / 1e9, v["faster_half_reads_max"].get<double>() / 1e9);
    }
  for (const auto& r : decode_rows)
    if (r.contains("step_time_vs_first")) {
      const auto& v = r["step_time_vs_first"];
      std::printf("context %lld: a step takes %.3fx the time of one at context %lld (median of %d steps taken in turn; "
                  "quartiles %.3f-%.3f)\n",
                  (long long)r["context"].get<int64_t>(), v["median"].get<double>(), (long long)v["context"].get<int64_t>(),
                  v["pairs"].get<int>(), v["p25"].get<double>(), v["p75"].get<double>());
    }
  if (!rank_rows.empty()) {
    std::printf("\nsplit over %d ranks (--parallel); the figures above are rank 0's: its slice of the weights against "
                "the bandwidth and peak of its own %d threads.\nDecode at context %lld, per rank and step (1 token; a forward pass, split\ninto compute and collectives, waiting for the other ranks included; collectives and bytes of the passes):\n"
                "%-5s %12s %12s %10s %12s %10s %12s %12s %12s\n",
                m.ranks(), threads, (long long)rank_rows[0]["context"].get<int32_t>(), "rank", "weights GiB", "RSS GiB",
                "pass ms", "compute ms", "comm ms", "collectives", "KB sent", "KB received");
    for (const auto& r : rank_rows)
      std::printf("%-5d %12.3f %12.3f %10.3f %12.3f %10.3f %12.0f %12.1f %12.1f\n", r["rank"].get<int>(),
                  r["weight_bytes"].get<double>() / double(1ull << 30), r["resident_bytes"].get<double>() / double(1ull << 30),
                  1e3 * r["seconds_per_step"].get<double>(), 1e3 * r["compute_seconds_per_step"].get<double>(),
                  1e3 * r["communication_seconds_per_step"].get<double>(), r["collectives_per_step"].get<double>(),
                  r["bytes_sent_per_token"].get<double>() / 1e3, r["bytes_received_per_token"].get<double>() / 1e3);
  }
  bool chunk_header = false;
  for (const auto& r : decode_rows) {
    if (!r.contains("prefill_chunk")) continue;
    if (!chunk_header) {
      std::printf("\n%-10s %14s %16s %12s %16s\n", "context", "chunk tokens", "prefill tok/s", "of peak",
                  "cache MB (1 seq)");
      chunk_header = true;
    }
    const auto& pc = r["prefill_chunk"];
    std::printf("%-10lld %14lld %16.2f %11.1f%% %16.1f\n", (long long)r["context"].get<int64_t>(),
                (long long)pc["tokens"].get<int64_t>(), pc["tokens_per_s"].get<double>(),
                100 * pc["compute_utilization"].get<double>(), r["cache_bytes_at_context"].get<double>() / 1e6);
  }
  if (!o.serving_only)
    std::printf("\nmemory: peak RSS %.2f GiB; weights file %.2f GiB (%s) + KV pool %.2f GiB; peak is %+.1f%% of those\n",
              peak_rss / double(1ull << 30), file_bytes / double(1ull << 30),
              m.store().read_into_memory() ? "read into memory" : "mapped", kv_pool_bytes / double(1ull << 30),
              100.0 * (peak_rss / (file_bytes + kv_pool_bytes) - 1.0));
  if (!scaling.is_null() && scaling.contains("error"))
    std::printf("threads: prefill of 512 tokens on 1 and %d threads FAILED: %s\n", threads,
                scaling["error"].get<std::string>().c_str());
  else if (!scaling.is_null())
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
  if (any_failed) std::printf("FAILED: at least one phase failed (see above); its rows are not timed\n");
  return any_failed ? 1 : 0;
}

}  // namespace

void AddBench(CLI::App& app, Runner& run) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure prefill and decode speed against this machine's bandwidth and FMA peak (see make-bench-model).");
  cmd->add_option("-m,--model", o->model, "Model folder (needed by everything but --probe)");
  cmd->add_flag("--probe", o->probe,
                "Only measure the memory's read speed on -t threads (the probe each run takes before and after its "
                "timings), no model; --json for JSON");
  cmd->add_option("--prefill", o->prefill, "Prompt lengths to time, comma separated");
  cmd->add_option("--context", o->contexts, "Decode context lengths, comma separated");
  cmd->add_option("--context-chunk", o->context_chunk,
                  "Also time a prefill chunk of this many tokens appended at each --context (0: off)")
      ->check(CLI::Range(0, 65536));
  cmd->add_option("--decode-steps", o->decode_steps, "Decode steps timed at each context (the median step is reported)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--repeats", o->repeats,
                  "Runs of each prefill (reported: the fastest, the median, mean and standard deviation)")
      ->check(CLI::Range(1, 100));
  AddThreadsFlag(cmd, o->threads);
  AddActivationsFlag(cmd, o->activations);
  AddAttentionFlag(cmd, o->attention);
  AddWeightMemoryFlags(cmd, o->weights);
  AddParallelFlag(cmd, o->parallel);
  cmd->add_flag("--json", o->json, "Print machine-readable JSON");
  cmd->add_flag("!--no-scaling", o->scaling, "Skip the one-thread prefill used to measure thread scaling");
  cmd->add_option("--step-reads", o->step_read_mib,
                  "MiB of the output matrix's weights read between rounds of decode steps, where it holds that much "
                  "(each step's bytes per second against the reads just before and after it, as a share of the "
                  "memory's speed in that minute); 0: none")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache storage: bf16 (default), f32 (exact) or q8 (int8 in groups of 32 with a "
                  "scale each, 56% of bf16's bytes, not exact)");
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
  cmd->add_flag("--competing-load", o->competing_load,
                "Only this: tokens/s on 1 thread and on -t N (default: every core), without and with one CPU-bound "
                "competing process per core started by the benchmark; fails (exit 1) if N threads are slower than "
                "0.9x one thread");
  cmd->add_option("--load-rounds", o->load_rounds, "--competing-load: rounds of 1 and N threads alternating (default 5)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--load-prompt", o->load_prompt, "--competing-load: prefill tokens timed (default 64)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--load-decode", o->load_decode, "--competing-load: decode steps timed after it (default 128)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->callback([o, &run] { run = [o] { return Run(*o); }; });
}

}  // namespace m2::cli
