// Decode GEMV speed per weight format on one thread, as bytes of weights read per second
// next to the read-bandwidth probe (MeasureReadBandwidth) over the same amount of memory, so the ratio
// says how close each kernel comes to the memory limit; then prefill GEMM GFLOP/s on one
// thread next to the measured FMA peak.
//
//   ninja -C build gemv_bench && build/bench/gemv_bench [MiB per format, default 512]
//   build/bench/gemv_bench --batch [MiB]   batched decode on all threads
//   build/bench/gemv_bench --int8 [MiB]    q8 / q4: fp32 against int8 activations (every int8
//                                           kernel this CPU runs, taking turns), all threads
//   build/bench/gemv_bench --gemm [MiB [FORMAT]]   prefill GEMMs (FP8, q8, q4, or FORMAT =
//                                           fp8-block | q8 | q4 alone): exact, bf16 and int8
//                                           activations (each where the CPU has it, taking
//                                           turns), all threads; bf16 on the vector units and
//                                           on the tile unit (AMX)
//   build/bench/gemv_bench --gemm-fp8 [MiB]   the same for the FP8 weights only
//   build/bench/gemv_bench --turns [MiB [NAME [TOKENS [ROWS]]]]   decode kernels (bf16, FP8, q8, q4, as
//                                           auto picks them, and FP8 exact; NAME: those whose name contains it;
//                                           TOKENS per product, default 1; ROWS: each matrix's rows instead of
//                                           the case's own) against a read of the same bytes,
//                                           taking turns, all threads: the ratio within one memory regime;
//                                           the rows a pass, prefetch and chunk order take turns too,
//                                           and each is also timed in L2
//   build/bench/gemv_bench --bf16 [MiB]    bf16 / FP8 decode: exact against bf16 activations,
//                                           one thread and all threads
//   build/bench/gemv_bench --read [MiB]    the read probe's patterns, one thread and all
//   build/bench/gemv_bench --overlap [MiB] a streaming read with 0-32 FMAs per 64 bytes, all
//                                           threads: its rate alone (in L1) and its share of
//                                           the read from memory (turns, as --turns)
//   build/bench/gemv_bench --moe [FORMAT]  MoE decode steps over M2's 256 experts (q4, q8
//                                           or fp8-block): whole experts per thread against the
//                                           rows jobs, taking turns between reads, all threads
//   build/bench/gemv_bench --attention     decode attention over 1k-32k cached positions, one thread,
//                                           exact and bf16 products; then from memory on 2 threads
//                                           in the pool's layout (a plane per head) and the former one
//   build/bench/gemv_bench --small         cache-resident small matrices (the bundled model's) at
//                                           1-9 tokens, one thread, against the FMA peak
//
// Each format gets its own set of matrices of the given total size (well above the
// last-level cache), walked in order once per repetition like the layers of a decode step.
// Shapes: 3072 x 1536 (an M2 expert's down projection is 3072 x 1536, gate/up 1536 x 3072).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench_args.h"
#include "base/cpu.h"
#include "base/dtype.h"
#include "base/huge_buffer.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kernels/linear_bf16.h"
#include "kernels/linear_int8.h"
#include "kernels/linear_int16.h"
#include "kernels/probe.h"
#include "model/layers.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

struct Set {
  m2::WeightFormat format;
  // In 2 MiB pages, as a model's weights are mapped (base/huge_buffer.h).
  std::unique_ptr<m2::HugePageBuffer> data, scale;
  std::vector<m2::LinearWeight> mats;
};

Set Make(m2::WeightFormat f, int64_t rows, int64_t cols, int64_t total_bytes) {
  Set s;
  s.format = f;
  m2::LinearWeight proto;
  proto.format = f;
  proto.rows = rows;
  proto.cols = cols;
  const int64_t data_bytes = proto.data_bytes(), scale_bytes = proto.bytes() - data_bytes;
  const int64_t n = std::max<int64_t>(1, total_bytes / (data_bytes + scale_bytes));
  s.data = std::make_unique<m2::HugePageBuffer>(static_cast<size_t>(n * data_bytes));
  s.scale = std::make_unique<m2::HugePageBuffer>(static_cast<size_t>(std::max<int64_t>(1, n * scale_bytes)));
  std::mt19937 rng(1);
  // Plausible values (denormals would slow the FMAs down and measure nothing useful):
  // bf16 weights of magnitude 2^-8..2^-5 with random signs and mantissas; fp8 codes about
  // normal (sigma 100 of 448), int codes from random bytes; scales ~ 1e-3.
  if (f == m2::WeightFormat::kBF16) {
    auto* p = reinterpret_cast<uint16_t*>(s.data->data());
    for (size_t i = 0; i < s.data->size() / 2; ++i)
      p[i] = static_cast<uint16_t>(((rng() & 1) << 15) | ((119 + rng() % 4) << 7) | (rng() & 0x7f));
  } else if (f == m2::WeightFormat::kFp8Block) {
    // Distributed as a checkpoint's codes (m2 make-bench-model does the same).
    const std::vector<uint8_t> codes = m2::GaussianFp8Codes(100.0f);
    for (size_t i = 0; i < s.data->size(); ++i) s.data->data()[i] = codes[rng() & 0xffff];
  } else {
    for (size_t i = 0; i < s.data->size(); ++i) s.data->data()[i] = static_cast<uint8_t>(rng() & 0x7e);
  }
  if (f == m2::WeightFormat::kFp8Block) {
    auto* p = reinterpret_cast<float*>(s.scale->data());
    for (size_t i = 0; i < s.scale->size() / 4; ++i) p[i] = 1e-3f;
  } else {
    auto* p = reinterpret_cast<uint16_t*>(s.scale->data());
    for (size_t i = 0; i < s.scale->size() / 2; ++i) p[i] = 0x1400;  // ~1e-3 in fp16
  }
  for (int64_t i = 0; i < n; ++i) {
    m2::LinearWeight w = proto;
    w.data = s.data->data() + i * data_bytes;
    w.scale = scale_bytes ? s.scale->data() + i * scale_bytes : nullptr;
    s.mats.push_back(w);
  }
  return s;
}

// The read probe's buffer: `total` bytes of 1.0f in 2 MiB pages, like the weights.
class ReadBuffer {
 public:
  explicit ReadBuffer(int64_t total) : mem_(static_cast<size_t>(total)) {
    std::fill_n(data(), size(), 1.0f);
  }
  float* data() const { return reinterpret_cast<float*>(mem_.data()); }
  size_t size() const { return mem_.size() / sizeof(float); }

 private:
  m2::HugePageBuffer mem_;
};

// The turns of a --turns / --overlap run by the reads around them, fastest first: the
// first half are "the faster half" (what a kernel gives where the memory is fast).
std::vector<size_t> ByReadsFastestFirst(const std::vector<double>& reads) {
  std::vector<size_t> order(reads.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return reads[a] > reads[b]; });
  return order;
}

// Per-turn ratios summed up: median and range over all turns, and the median over the
// turns whose reads were in the faster half (what a kernel gives where the memory is
// fast), with the range of those reads.
struct TurnsSummary {
  double median, lo, hi, fast_median, fast_read_lo, fast_read_hi;
};
TurnsSummary Summarize(const std::vector<double>& ratios, const std::vector<double>& reads) {
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  const std::vector<size_t> order = ByReadsFastestFirst(reads);
  std::vector<double> fast;
  for (size_t i = 0; i < order.size() / 2; ++i) fast.push_back(ratios[order[i]]);
  std::sort(fast.begin(), fast.end());
  return {sorted[sorted.size() / 2], sorted.front(), sorted.back(), fast[fast.size() / 2],
          reads[order[order.size() / 2 - 1]], reads[order[0]]};
}

}  // namespace

// Batched decode on all threads (`gemv_bench --batch [MiB]`): Linear() at 1-16 tokens
// over matrices of the lm_head's and an expert's shapes, as GB/s of weights read and
// GFLOP/s: where a batch of decode steps turns from memory-bound to FMA-bound.
int BatchMode(int64_t total) {
  double best_read = 0;
  {
    const ReadBuffer buf(total);
    best_read = m2::MeasureReadBandwidth(m2::ThreadPool::Global(), buf.data(), static_cast<int64_t>(buf.size()), 2);
  }
  std::printf("%d threads, %s kernels; parallel read %.2f GB/s\n", m2::ThreadPool::Global().size(),
              m2::ActiveIsa() == m2::KernelIsa::kAvx512 ? "avx512" : "avx2", best_read / 1e9);
  std::printf("%-10s %6s %6s %6s %10s %8s %10s\n", "format", "rows", "cols", "tokens", "GB/s", "of read", "GFLOP/s");
  for (auto [f, r, c] : {std::tuple<m2::WeightFormat, int64_t, int64_t>{m2::WeightFormat::kBF16, 8192, 3072},
                         {m2::WeightFormat::kFp8Block, 6144, 3072}}) {
    Set s = Make(f, r, c, total);
    for (int64_t n : {1, 2, 4, 5, 8, 12, 16}) {
      std::vector<float> xs(static_cast<size_t>(n * c)), ys(static_cast<size_t>(n * r));
      for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.01f * static_cast<float>(i));
      double best = 0;
      for (int rep = 0; rep < 3; ++rep) {
        int64_t bytes = 0;
        const auto t0 = Clock::now();
        for (const auto& w : s.mats) {
          m2::Linear(w, xs.data(), n, ys.data());
          bytes += w.bytes();
        }
        best = std::max(best, bytes / Seconds(t0));
      }
      const double flops = best / static_cast<double>(s.mats[0].bytes()) * 2.0 * static_cast<double>(r * c * n);
      std::printf("%-10s %6lld %6lld %6lld %10.2f %7.0f%% %10.1f\n", m2::WeightFormatName(f), static_cast<long long>(r),
                  static_cast<long long>(c), static_cast<long long>(n), best / 1e9, 100.0 * best / best_read,
                  flops / 1e9);
    }
  }
  return 0;
}

// The best of 3 rounds of `burst` on every thread of the pool at once, in operations per
// second (FmaBurst: the fp32 FMA peak; the dot-product bursts: their instructions' peaks).
double BurstPeak(m2::ThreadPool& pool, double (*burst)(int64_t)) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> ops(static_cast<size_t>(pool.size()));
    const auto t0 = Clock::now();
    pool.ParallelFor(pool.size(), 1, [&](int64_t b, int64_t e, int th) {
      for (int64_t i = b; i < e; ++i) ops[static_cast<size_t>(th)] += burst(20'000'000);
    });
    double sum = 0;
    for (double o : ops) sum += o;
    best = std::max(best, sum / Seconds(t0));
  }
  return best;
}

// q8 / q4 with exact (fp32) against int8 activations (`gemv_bench --int8 [MiB]`), all
// threads, expert-shaped matrices (1536 x 3072): decode batches of 1-8 tokens as GB/s of
// weights read, prefill of 64 and 128 tokens as GFLOP/s, next to the parallel read and
// the FMA peak measured here.
int Int8Mode(int64_t total) {
  m2::ThreadPool& pool = m2::ThreadPool::Global();
  double best_read = 0;
  {
    const ReadBuffer buf(total);
    best_read = m2::MeasureReadBandwidth(pool, buf.data(), static_cast<int64_t>(buf.size()), 2);
  }
  const double peak = BurstPeak(pool, m2::FmaBurst);  // FmaBurst on every thread at once
  std::printf("%d threads, %s kernels; parallel read %.2f GB/s, fp32 FMA peak %.1f GFLOP/s\n", pool.size(),
              m2::ActiveKernelsName(), best_read / 1e9, peak / 1e9);
  // The int8 kernels this CPU can run, each called directly (activations quantized in the
  // timed part, as Linear() does); the variants take turns within each repetition, so a
  // slow spell of the machine hits them alike.
  std::vector<m2::Int8RowsFn> kernels = {m2::LinearInt8RowsAvx2};
  if (m2::Cpu().has_avx512() && m2::Cpu().avx512_vnni) kernels.push_back(m2::LinearInt8RowsAvx512Vnni);
  if (m2::Cpu().avx_vnni) kernels.push_back(m2::LinearInt8RowsAvxVnni);
  std::printf("%-6s %-16s %6s %10s %8s %10s %8s\n", "format", "acts", "tokens", "GB/s", "of read", "GFLOP/s",
              "of peak");
  const int64_t r = 1536, c = 3072, G = c / m2::kQuantGroup;
  for (auto f : {m2::WeightFormat::kQ8, m2::WeightFormat::kQ4}) {
    Set s = Make(f, r, c, total);
    for (int64_t n : {1, 2, 3, 4, 8, 64, 128}) {
      std::vector<float> xs(static_cast<size_t>(n * c)), ys(static_cast<size_t>(n * r));
      for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.01f * static_cast<float>(i));
      std::vector<int8_t> q(static_cast<size_t>(n * c));
      std::vector<float> dc(static_cast<size_t>(2 * n * G));
      // Prefill sizes walk fewer matrices: the time is compute, not memory.
      const size_t mats = n > 8 ? std::min<size_t>(s.mats.size(), 48) : s.mats.size();
      const int variants = 1 + static_cast<int>(kernels.size());
      std::vector<double> best(static_cast<size_t>(variants));
      for (int rep = 0; rep < 3; ++rep)
        for (int v = 0; v < variants; ++v) {
          int64_t bytes = 0;
          const auto t0 = Clock::now();
          for (size_t i = 0; i < mats; ++i) {
            m2::LinearWeight& w = s.mats[i];
            if (v == 0) {
              w.activations = m2::ActivationMode::kExact;
              m2::LinearOnPool(w, xs.data(), n, ys.data(), pool);
            } else {
              m2::QuantizeActivationsInt8Avx2(xs.data(), n, c, q.data(), dc.data(), dc.data() + n * G);
              const m2::Int8Activations a{.q = q.data(), .d = dc.data(), .c = dc.data() + n * G, .n = n, .cols = c};
              pool.ParallelFor(r, 16, [&](int64_t r0, int64_t r1, int) { kernels[v - 1](w, a, ys.data(), r0, r1); });
            }
            bytes += w.bytes();
          }
          best[v] = std::max(best[v], bytes / Seconds(t0));
        }
      for (int v = 0; v < variants; ++v) {
        const double flops = best[v] / static_cast<double>(s.mats[0].bytes()) * 2.0 * static_cast<double>(r * c * n);
        const std::string acts = v == 0 ? "fp32" : std::string("int8 ") + m2::Int8RowsKernelName(kernels[v - 1]);
        std::printf("%-6s %-16s %6lld %10.2f %7.0f%% %10.1f %7.0f%%\n", m2::WeightFormatName(f), acts.c_str(),
                    static_cast<long long>(n), best[v] / 1e9, 100.0 * best[v] / best_read, flops / 1e9,
                    100.0 * flops / peak);
      }
    }
  }
  return 0;
}

// Prefill GEMMs of FP8 / q8 / q4 weights (`gemv_bench --gemm [MiB]`), all threads, an expert's
// shapes: exact (fp32 FMA), bf16 (vdpbf16ps, AVX-512 BF16) and int8 (vpdpbusd, AVX-512
// VNNI) activations through Linear(), each where the CPU has it, taking turns within each
// repetition; GFLOP/s (2 per multiply-add) next to the FMA peak measured here.
// only: a format's name (fp8-block, q8, q4) to time that format alone, or empty for all.
int GemmMode(int64_t total, const std::string& only) {
  m2::ThreadPool& pool = m2::ThreadPool::Global();
  const double peak = BurstPeak(pool, m2::FmaBurst);
  struct Mode {
    const char* first;
    m2::ActivationMode second;
    bool amx = false;
  };
  const bool amx = m2::AmxBf16Available();
  std::vector<Mode> modes = {{"exact", m2::ActivationMode::kExact}};
  if (m2::Bf16GemmAvailable()) modes.push_back({amx ? "bf16-vec" : "bf16", m2::ActivationMode::kBf16Prefill});
  if (amx) modes.push_back({"bf16-amx", m2::ActivationMode::kBf16Prefill, true});
  const m2::Int8GemmKernel int8_q4 = m2::Int8GemmFor(m2::WeightFormat::kQ4);
  if (int8_q4 != m2::Int8GemmKernel::kNone) modes.push_back({"int8", m2::ActivationMode::kInt8DecodeInt8Prefill});
  const int64_t int16_lanes = m2::Int16GemmLanes();  // q8 and FP8 only (q4 prints 0)
  if (int16_lanes > 0) modes.push_back({"int16", m2::ActivationMode::kInt16DecodeInt16Prefill});
  std::printf("%d threads, %s kernels; fp32 FMA peak %.1f GFLOP/s", pool.size(), m2::ActiveKernelsName(),
              peak / 1e9);
  if (int16_lanes > 0)
    std::printf(", int16 GEMM's %s peak %.1f Gop/s", int16_lanes == 16 ? "vpdpwssd" : "vpmaddwd + vpaddd",
                BurstPeak(pool, int16_lanes == 16 ? m2::Int16DotBurstAvx512Vnni : m2::Int16DotBurstAvx2) / 1e9);
  if (m2::Bf16GemmAvailable()) std::printf(", vdpbf16ps peak %.1f", BurstPeak(pool, m2::Bf16DotBurstAvx512) / 1e9);
  if (int8_q4 == m2::Int8GemmKernel::kAvx512Vnni)
    std::printf(", vpdpbusd peak %.1f Gop/s", BurstPeak(pool, m2::Int8DotBurstAvx512Vnni) / 1e9);
  else if (int8_q4 == m2::Int8GemmKernel::kAvxVnni)
    std::printf(", vpdpbusd (256-bit) peak %.1f Gop/s", BurstPeak(pool, m2::Int8DotBurstAvxVnni) / 1e9);
  else if (int8_q4 == m2::Int8GemmKernel::kAvx2)
    std::printf(", vpmaddubsw + vpaddw peak %.1f Gop/s (int8 GEMM: AVX2 q4), q8's vpsignb + vpmaddubsw + vpmaddwd + vpaddd %.1f",
                BurstPeak(pool, m2::Int8DotBurstAvx2) / 1e9, BurstPeak(pool, m2::Int8DotBurstAvx2Signed) / 1e9);
  std::printf("; %zu prefill paths (percentages: of the FMA peak)\n", modes.size());
  std::printf("%-6s %6s %6s %6s", "format", "rows", "cols", "tokens");
  for (const auto& m : modes) std::printf(" %9s GFLOP/s", m.first);
  std::printf("\n");
  for (auto f : {m2::WeightFormat::kFp8Block, m2::WeightFormat::kQ8, m2::WeightFormat::kQ4})
    for (auto [r, c] : {std::pair<int64_t, int64_t>{1536, 3072}, {3072, 1536}}) {
      if (!only.empty() && only != m2::WeightFormatName(f)) continue;
      Set s = Make(f, r, c, total);
      for (int64_t n : {16, 40, 64, 128, 512}) {
        std::vector<float> xs(static_cast<size_t>(n * c)), ys(static_cast<size_t>(n * r));
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.01f * static_cast<float>(i));
        std::vector<double> best(modes.size());
        for (int rep = 0; rep < 5; ++rep)
          for (size_t v = 0; v < modes.size(); ++v) {
            // int8 / int16 on FP8 weights: kInt8Prefill / kInt16Prefill (requantized or
            // converted per group as the GEMM unpacks them).
            const bool int8 = modes[v].second == m2::ActivationMode::kInt8DecodeInt8Prefill;
            const bool int16 = modes[v].second == m2::ActivationMode::kInt16DecodeInt16Prefill;
            const bool fp8 = f == m2::WeightFormat::kFp8Block;
            const m2::ActivationMode mode = int8 && fp8    ? m2::ActivationMode::kInt8Prefill
                                            : int16 && fp8 ? m2::ActivationMode::kInt16Prefill
                                                           : modes[v].second;
            if (int8 && m2::Int8GemmFor(f) == m2::Int8GemmKernel::kNone) continue;  // no int8 GEMM (printed as 0)
            if (int16 && f == m2::WeightFormat::kQ4) continue;  // q8 and FP8 only
            if (amx) m2::SetAmxBf16ForTesting(modes[v].amx);
            const auto t0 = Clock::now();
            int calls = 0;
            do {
              m2::LinearWeight& w = s.mats[static_cast<size_t>(calls) % s.mats.size()];
              w.activations = mode;
              m2::LinearOnPool(w, xs.data(), n, ys.data(), pool);
            } while (++calls < 4 || Seconds(t0) < 0.04);
            best[v] = std::max(best[v], 2.0 * static_cast<double>(r * c * n) * calls / Seconds(t0));
          }
        std::printf("%-6s %6lld %6lld %6lld", m2::WeightFormatName(f), static_cast<long long>(r),
                    static_cast<long long>(c), static_cast<long long>(n));
        for (double b : best) std::printf(" %9.1f (%3.0f%%)", b / 1e9, 100.0 * b / peak);
        std::printf("\n");
      }
    }
  return 0;
}

// Small cache-resident matrices (`gemv_bench --small`): the bundled model's shapes (hidden
// 192, bf16), one thread, the kernel alone (no thread pool), 1-9 tokens: speculative
// verification and batched decode of a model that lives in the cache are compute-bound,
// so what matters is GFLOP/s against the FMA peak, and how the cost of k tokens grows
// relative to one.
int SmallMode() {
  const bool avx512 = m2::ActiveIsa() == m2::KernelIsa::kAvx512;
  double peak = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    const double f = m2::FmaBurst(20'000'000);
    peak = std::max(peak, f / Seconds(t0));
  }
  std::printf("one thread, %s kernels, fp32 FMA peak %.1f GFLOP/s; weights in cache\n", avx512 ? "avx512" : "avx2",
              peak / 1e9);
  std::printf("%-6s %6s %6s %6s %10s %8s %10s\n", "format", "rows", "cols", "tokens", "GFLOP/s", "of peak",
              "vs 1 token");
  for (auto [r, c] : {std::pair<int64_t, int64_t>{8192, 192}, {384, 192}, {192, 384}, {96, 192}, {192, 96}}) {
    Set s = Make(m2::WeightFormat::kBF16, r, c, r * c * 2);
    const m2::LinearWeight& w = s.mats[0];
    double one = 0;
    for (int64_t n : {1, 2, 3, 4, 5, 6, 8, 9}) {
      std::vector<float> xs(static_cast<size_t>(n * c)), ys(static_cast<size_t>(n * r));
      for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.01f * static_cast<float>(i));
      // About 20 ms of work per repetition.
      const int64_t iters = std::max<int64_t>(4, static_cast<int64_t>(2e9 / (2.0 * r * c * n)));
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < iters; ++i) {
          const bool ok = avx512 ? m2::LinearRowsAvx512(w, xs.data(), n, ys.data(), 0, r)
                                 : m2::LinearRowsAvx2(w, xs.data(), n, ys.data(), 0, r);
          if (!ok) return 1;
        }
        best = std::min(best, Seconds(t0) / static_cast<double>(iters));
      }
      if (n == 1) one = best;
      const double flops = 2.0 * static_cast<double>(r * c * n) / best;
      std::printf("%-6s %6lld %6lld %6lld %10.1f %7.0f%% %9.2fx\n", "bf16", static_cast<long long>(r),
                  static_cast<long long>(c), static_cast<long long>(n), flops / 1e9, 100.0 * flops / peak, best / one);
    }
  }
  // q8 / q4 at M2's hidden size, a few rows (L2-resident), exact, int8 and (q8) int16 activations,
  // through Linear() on a one-thread pool (int8 includes quantizing the activations): the
  // kernels' own speed, which decode needs above the memory's per core.
  std::printf("%-6s %-5s %6s %6s %6s %10s %10s\n", "format", "acts", "rows", "cols", "tokens", "GB/s", "GFLOP/s");
  m2::ThreadPool one(1);
  for (auto f : {m2::WeightFormat::kQ8, m2::WeightFormat::kQ4}) {
    const int64_t r = 128, c = 3072;
    Set s = Make(f, r, c, 1);
    m2::LinearWeight w = s.mats[0];
    for (int64_t n : {1, 2, 4, 8}) {
      std::vector<float> xs(static_cast<size_t>(n * c)), ys(static_cast<size_t>(n * r));
      for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.01f * static_cast<float>(i));
      for (int mode = 0; mode < 3; ++mode) {
        if (mode == 2 && f != m2::WeightFormat::kQ8) continue;  // int16: q8 only
        w.activations = mode == 1 ? m2::ActivationMode::kInt8 : mode == 2 ? m2::ActivationMode::kInt16 : m2::ActivationMode::kExact;
        const int64_t iters = std::max<int64_t>(4, static_cast<int64_t>(1e8 / (2.0 * r * c * n)));
        double best = 1e30;
        for (int rep = 0; rep < 40; ++rep) {  // short repetitions, the best: this VM loses whole time slices
          const auto t0 = Clock::now();
          for (int64_t i = 0; i < iters; ++i) m2::LinearOnPool(w, xs.data(), n, ys.data(), one);
          best = std::min(best, Seconds(t0) / static_cast<double>(iters));
        }
        std::printf("%-6s %-5s %6lld %6lld %6lld %10.2f %10.1f\n", m2::WeightFormatName(f), mode == 1 ? "int8" : mode == 2 ? "int16" : "fp32",
                    static_cast<long long>(r), static_cast<long long>(c), static_cast<long long>(n),
                    static_cast<double>(w.bytes()) / best / 1e9, 2.0 * static_cast<double>(r * c * n) / best / 1e9);
      }
    }
  }
  return 0;
}

// Decode attention (`gemv_bench --attention`): one query token, one KV head with M2's GQA
// group (6 query heads of 128) over a bf16 cache of 16-token blocks in shuffled order (as
// a long-running pool hands them out), one thread. Reported as GB/s of K and V read,
// GFLOP/s, and the time per position; a long context's decode step is made of these.
int AttentionMode() {
  const int64_t group = 6, D = 128, bt = 16, max_len = 32768;
  const int64_t nblocks = max_len / bt;
  // K and V in 2 MiB pages (so 64-byte aligned rows), as the KV pool's arenas are (page-
  // aligned mappings): a vector's 16-byte alignment made most vector loads split cache lines.
  const size_t kv_elems = static_cast<size_t>(nblocks * bt * D);
  const m2::HugePageBuffer k_mem(kv_elems * 2), v_mem(kv_elems * 2);
  const std::span<uint16_t> k(reinterpret_cast<uint16_t*>(k_mem.data()), kv_elems),
      v(reinterpret_cast<uint16_t*>(v_mem.data()), kv_elems);
  std::mt19937 rng(3);
  for (auto& x : k) x = static_cast<uint16_t>(0x3c00 + rng() % 0x200 - 0x100 + ((rng() & 1) << 15));  // bf16 around +-2^-7
  for (auto& x : v) x = static_cast<uint16_t>(0x3c00 + rng() % 0x200 - 0x100 + ((rng() & 1) << 15));
  std::vector<int32_t> blocks(static_cast<size_t>(nblocks));
  for (int64_t i = 0; i < nblocks; ++i) blocks[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<float> q(static_cast<size_t>(group * D)), out(q.size()), scratch(static_cast<size_t>(group * max_len));
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * static_cast<float>(i));
  std::printf("decode attention, one thread, %s kernels: %lld query heads per KV head, head_dim %lld, bf16 KV\n",
              m2::ActiveKernelsName(), static_cast<long long>(group), static_cast<long long>(D));
  const bool bf16 = m2::AttentionBf16Available();
  std::printf("%8s %6s %10s %10s %12s %14s\n", "length", "math", "GB/s", "GFLOP/s", "ns/position", "max |diff|");
  std::vector<float> exact(q.size());
  for (int64_t len : {1024, 4096, 8192, 32768})
    for (const m2::AttentionMath math : {m2::AttentionMath::kExact, m2::AttentionMath::kBf16}) {
    if (math == m2::AttentionMath::kBf16 && !bf16) continue;
    m2::KvHeadView kv;
    kv.k_base = k.data();
    kv.v_base = v.data();
    kv.blocks = blocks.data();
    kv.block_stride = bt * D;
    kv.head_offset = 0;
    kv.block_tokens = bt;
    kv.row_stride = D;
    kv.length = len;
    kv.dtype = m2::KvDtype::kBf16;
    double best = 1e30;
    for (int rep = 0; rep < 30; ++rep) {
      const auto t0 = Clock::now();
      m2::AttendQueries(q.data(), group * D, 1, group, D, kv, 0.088f, scratch.data(), out.data(), group * D, math);
      best = std::min(best, Seconds(t0));
    }
    // bf16 products against the exact kernel's outputs (the first row of each length).
    float diff = 0;
    if (math == m2::AttentionMath::kExact) exact = out;
    else
      for (size_t i = 0; i < out.size(); ++i) diff = std::max(diff, std::fabs(out[i] - exact[i]));
    const double bytes = 2.0 * static_cast<double>(len * D * 2), flops = 4.0 * static_cast<double>(group * len * D);
    std::printf("%8lld %6s %10.2f %10.1f %12.2f %14.3g\n", static_cast<long long>(len),
                math == m2::AttentionMath::kExact ? "exact" : "bf16", bytes / best / 1e9, flops / best / 1e9,
                best / static_cast<double>(len) * 1e9, diff);
  }
  // From memory, as a decode step meets the cache: the M2 slice's 4 layers x 8 KV heads at
  // context 8192 (128 MiB of K and V, past the last-level cache), blocks in order, each
  // layer's heads split over 2 threads as the model splits them. Two layouts of a layer's
  // arena: "planes", the KV pool's (kv_cache.h: each head's rows of every block in one
  // plane, so a sequence's rows of a head are one run of memory), and "blocks", the one
  // before it (a block holding every head's rows, head after head: a head's rows in 4 KiB
  // runs 32 KiB apart). Configurations take turns, the best of 8 rounds each. A third,
  // "q8": the planes layout with the q8 cache (--kv-dtype q8: 144 bytes a row against 256).
  const int64_t layers = 4, kv_heads = 8, len = 8192, lblocks = len / bt;
  const size_t layer_elems = static_cast<size_t>(lblocks * kv_heads * bt * D);
  const m2::HugePageBuffer km(layer_elems * 2 * layers), vm(layer_elems * 2 * layers);
  std::memset(km.data(), 0x3c, layer_elems * 2 * layers);
  std::memset(vm.data(), 0x3c, layer_elems * 2 * layers);
  const int64_t row8 = m2::KvRowElems(m2::KvDtype::kQ8, D);  // bytes of a q8 row
  const size_t layer_bytes8 = static_cast<size_t>(lblocks * kv_heads * bt * row8);
  const m2::HugePageBuffer km8(layer_bytes8 * layers), vm8(layer_bytes8 * layers);
  {
    std::vector<float> src(static_cast<size_t>(D));
    for (size_t r = 0; r < layer_bytes8 * layers / static_cast<size_t>(row8); ++r) {
      for (auto& x : src) x = std::sin(0.11f * static_cast<float>(r % 977) + static_cast<float>(&x - src.data()));
      m2::StoreKv(src.data(), D, m2::KvDtype::kQ8, km8.data() + r * static_cast<size_t>(row8));
      m2::StoreKv(src.data(), D, m2::KvDtype::kQ8, vm8.data() + r * static_cast<size_t>(row8));
    }
  }
  std::vector<int32_t> order(static_cast<size_t>(lblocks));
  for (int64_t i = 0; i < lblocks; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  m2::ThreadPool pool(2);
  std::vector<std::vector<float>> sc(2, std::vector<float>(static_cast<size_t>(group * len)));
  std::vector<float> o(static_cast<size_t>(kv_heads * group * D));
  // One timed pass over every layer's KV heads: layer l's K and V at base + l * layer_bytes,
  // head g's rows at g * head_stride elements, blocks block_stride elements apart.
  const auto time_layers = [&](const uint8_t* kbase, const uint8_t* vbase, size_t layer_bytes, int64_t block_stride,
                               int64_t head_stride, int64_t row, m2::KvDtype dtype, m2::AttentionMath math) {
    const auto t0 = Clock::now();
    for (int64_t l = 0; l < layers; ++l)
      pool.ParallelFor(kv_heads, 1, [&](int64_t g0, int64_t g1, int th) {
        for (int64_t g = g0; g < g1; ++g) {
          m2::KvHeadView kv;
          kv.k_base = kbase + static_cast<size_t>(l) * layer_bytes;
          kv.v_base = vbase + static_cast<size_t>(l) * layer_bytes;
          kv.blocks = order.data();
          kv.block_stride = block_stride;
          kv.head_offset = g * head_stride;
          kv.block_tokens = bt;
          kv.row_stride = row;
          kv.length = len;
          kv.dtype = dtype;
          m2::AttendQueries(q.data(), group * D, 1, group, D, kv, 0.088f, sc[static_cast<size_t>(th)].data(),
                            o.data() + g * group * D, group * D, math);
        }
      });
    return Seconds(t0);
  };
  double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};  // [planes][bf16]
  double best_q8 = 1e30;
  for (int rep = 0; rep < 8; ++rep) {
    best_q8 = std::min(best_q8, time_layers(km8.data(), vm8.data(), layer_bytes8, bt * row8, lblocks * bt * row8, row8,
                                            m2::KvDtype::kQ8, m2::AttentionMath::kExact));
    for (int planes = 0; planes < 2; ++planes)
      for (int b = 0; b < (bf16 ? 2 : 1); ++b)
        best[planes][b] = std::min(
            best[planes][b],
            time_layers(km.data(), vm.data(), layer_elems * 2, planes ? bt * D : kv_heads * bt * D,
                        planes ? lblocks * bt * D : bt * D, D, m2::KvDtype::kBf16,
                        b ? m2::AttentionMath::kBf16 : m2::AttentionMath::kExact));
  }
  const double bytes = static_cast<double>(layers * kv_heads * len * D * 2 * 2);
  for (int planes = 1; planes >= 0; --planes)
    for (int b = 0; b < (bf16 ? 2 : 1); ++b)
      std::printf("from memory, 2 threads, %s, %-6s: %lld layers x %lld KV heads at %lld: %.2f ms, %.1f GB/s of K and V\n",
                  planes ? "planes" : "blocks", b ? "bf16" : "exact", static_cast<long long>(layers),
                  static_cast<long long>(kv_heads), static_cast<long long>(len), best[planes][b] * 1e3,
                  bytes / best[planes][b] / 1e9);
  std::printf("from memory, 2 threads, planes, q8    : %lld layers x %lld KV heads at %lld: %.2f ms, %.1f GB/s of K and V\n",
              static_cast<long long>(layers), static_cast<long long>(kv_heads), static_cast<long long>(len),
              best_q8 * 1e3, bytes * static_cast<double>(row8) / static_cast<double>(2 * D) / best_q8 / 1e9);
  return 0;
}

// The bf16 decode kernels against a double-precision sum of the same products (weights
// decoded exactly, activations rounded to bf16 as the kernel rounds them): every FP8 code but
// the two NaNs, both signs, a different scale per block, rows that leave a remainder for
// the kernel's row blocks, 1-4 tokens; FP8 decoded both ways (Fp8GemvGfni: the GFNI bit
// moves drop the subnormal codes, so the sum leaves them out there). Returns the number of
// results outside 1e-5 of the sum of |products| (fp32 accumulation in another order).
int64_t CheckGemvBf16() {
  std::mt19937 rng(7);
  int64_t bad = 0;
  for (int way = 0; way < 3; ++way) {
    const auto f = way < 2 ? m2::WeightFormat::kFp8Block : m2::WeightFormat::kBF16;
    const bool gfni = way == 1;
    m2::SetFp8GemvGfniForTesting(gfni ? 1 : 0);
    const int64_t rows = 263, cols = 384;
    m2::LinearWeight w;
    w.format = f;
    w.rows = rows;
    w.cols = cols;
    std::vector<uint8_t> fp8(static_cast<size_t>(rows * cols));
    std::vector<uint16_t> b16(static_cast<size_t>(rows * cols));
    std::vector<float> scales(static_cast<size_t>(w.scale_rows() * w.scale_cols()));
    for (auto& v : fp8) {
      do v = static_cast<uint8_t>(rng()); while ((v & 0x7f) == 0x7f);
    }
    for (auto& v : b16) v = static_cast<uint16_t>(((rng() & 1) << 15) | ((115 + rng() % 12) << 7) | (rng() & 0x7f));
    for (auto& v : scales) v = std::ldexp(1.0f + static_cast<float>(rng() % 256) / 256.0f, -10 + static_cast<int>(rng() % 4));
    if (f == m2::WeightFormat::kFp8Block) {
      w.data = fp8.data();
      w.scale = scales.data();
    } else {
      w.data = b16.data();
    }
    if (!m2::GemvBf16Supports(w, m2::Cpu().avx512_vbmi && m2::Cpu().gfni)) continue;
    for (int64_t n = 1; n <= 4; ++n) {
      std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows), -1.0f);
      for (auto& v : x) v = std::ldexp(static_cast<float>(rng() % 2000001) / 1e6f - 1.0f, static_cast<int>(rng() % 8) - 4);
      std::vector<uint16_t> xb(x.size());
      const int shift = m2::PackGemvBf16Avx512(x.data(), n, cols, f == m2::WeightFormat::kFp8Block, xb.data());
      if (!m2::GemvRowsBf16Avx512(w, xb.data(), shift, n, y.data(), 0, rows)) {
        std::printf("CHECK FAILED: the kernel refused %s with %lld tokens\n", m2::WeightFormatName(f),
                    static_cast<long long>(n));
        ++bad;
        continue;
      }
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double sum = 0, mag = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const size_t i = static_cast<size_t>(r * cols + k);
            const bool dropped = gfni && (fp8[i] & 0x78) == 0;  // a subnormal code (or zero)
            const double wv = f == m2::WeightFormat::kFp8Block
                                  ? (dropped ? 0.0 : static_cast<double>(m2::Fp8E4M3ToF32(fp8[i]))) *
                                        scales[static_cast<size_t>(r / w.block_rows * w.scale_cols() + k / w.block_cols)]
                                  : static_cast<double>(m2::Bf16ToF32(b16[i]));
            const double xv = m2::Bf16ToF32(m2::RoundToBf16(x[static_cast<size_t>(t * cols + k)]));
            sum += wv * xv;
            mag += std::fabs(wv * xv);
          }
          const double got = y[static_cast<size_t>(t * rows + r)];
          if (!(std::fabs(got - sum) <= 1e-5 * mag)) {
            if (bad < 5)
              std::printf("CHECK FAILED: %s%s, %lld tokens, token %lld row %lld: %.9g, expected %.9g\n",
                          m2::WeightFormatName(f), gfni ? " (GFNI)" : "", static_cast<long long>(n), static_cast<long long>(t),
                          static_cast<long long>(r), got, sum);
            ++bad;
          }
        }
    }
  }
  m2::SetFp8GemvGfniForTesting(-1);
  return bad;
}

// Decode with exact against bf16 activations (`gemv_bench --bf16 [MiB]`, CPUs with AVX-512
// BF16): bf16 and FP8 weights (the lm_head's and an expert's shapes), 1 and 2 tokens, one
// thread and all threads, the two kernels taking turns, as GB/s of weights read next to
// the read probe on the same threads.
int Bf16Mode(int64_t total) {
  if (!m2::Cpu().avx512_bf16 || m2::ActiveIsa() != m2::KernelIsa::kAvx512) {
    std::printf("no AVX-512 BF16 (or M2_KERNELS is not avx512): nothing to compare\n");
    return 0;
  }
  if (const int64_t bad = CheckGemvBf16(); bad > 0) {
    std::printf("the bf16 decode kernels gave %lld wrong results: nothing timed\n", static_cast<long long>(bad));
    return 1;
  }
  std::printf("check: the bf16 decode kernels match a double-precision reference (1-4 tokens, every FP8 code)\n");
  m2::ThreadPool one(1);
  for (m2::ThreadPool* pool : {&one, &m2::ThreadPool::Global()}) {
    double read = 0;
    {
      const ReadBuffer buf(total);
      read = m2::MeasureReadBandwidth(*pool, buf.data(), static_cast<int64_t>(buf.size()), 2);
    }
    std::printf("%d threads: read %.2f GB/s\n%-10s %6s %6s %6s %12s %12s\n", pool->size(), read / 1e9, "format", "rows",
                "cols", "tokens", "exact GB/s", "bf16 GB/s");
    for (auto [f, r, c] : {std::tuple<m2::WeightFormat, int64_t, int64_t>{m2::WeightFormat::kBF16, 8192, 3072},
                           {m2::WeightFormat::kFp8Block, 1536, 3072},
                           {m2::WeightFormat::kFp8Block, 3072, 1536}}) {
      Set s = Make(f, r, c, total);
      if (!m2::GemvBf16Supports(s.mats[0], m2::Cpu().avx512_vbmi && m2::Cpu().gfni)) {
        std::printf("%-10s: the bf16 decode kernel does not take it on this CPU\n", m2::WeightFormatName(f));
        continue;
      }
      for (int64_t n : {1, 2}) {
        std::vector<float> xs(static_cast<size_t>(n * c)), ys(static_cast<size_t>(n * r));
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.01f * static_cast<float>(i));
        std::vector<uint16_t> xb(xs.size());
        double best[2] = {0, 0};
        for (int rep = 0; rep < 6; ++rep) {
          const int v = rep % 2;
          int64_t bytes = 0;
          const auto t0 = Clock::now();
          for (const auto& w : s.mats) {
            if (v == 0) {
              m2::LinearOnPool(w, xs.data(), n, ys.data(), *pool);
            } else {
              const int shift = m2::PackGemvBf16Avx512(xs.data(), n, c, f == m2::WeightFormat::kFp8Block, xb.data());
              pool->ParallelFor(r, 16, [&](int64_t r0, int64_t r1, int) {
                m2::GemvRowsBf16Avx512(w, xb.data(), shift, n, ys.data(), r0, r1);
              });
            }
            bytes += w.bytes();
          }
          best[v] = std::max(best[v], bytes / Seconds(t0));
        }
        std::printf("%-10s %6lld %6lld %6lld %12.2f %12.2f\n", m2::WeightFormatName(f), static_cast<long long>(r),
                    static_cast<long long>(c), static_cast<long long>(n), best[0] / 1e9, best[1] / 1e9);
      }
    }
  }
  return 0;
}

// How much of the read bandwidth a streaming loop keeps as it computes more per byte
// (`gemv_bench --overlap [MiB]`, all threads): m2::ReadWithFmas with 0-32 FMAs per 64
// bytes. For each count, turns of: the loop over a buffer in L1 ("alone": its rate were
// memory free, the compute ceiling), a read, the loop from memory, a read (as --turns).
// A decode GEMV is such a loop: where its compute ceiling is not well above the read, the
// core does not hide the reads behind the arithmetic, and no kernel reaches the read.
int OverlapMode(int64_t total) {
  m2::ThreadPool& pool = m2::ThreadPool::Global();
  const ReadBuffer buf(total);
  const int64_t n = static_cast<int64_t>(buf.size());
  constexpr int64_t kL1Floats = 4096;  // 16 KiB per thread
  std::vector<float> l1(static_cast<size_t>(kL1Floats * pool.size()), 1.0f);
  std::vector<double> sink(static_cast<size_t>(pool.size()));
  const auto loop = [&](int fmas) {  // from memory, bytes per second
    const auto t0 = Clock::now();
    pool.ParallelFor(n, 4096, [&](int64_t b, int64_t e, int th) {
      sink[static_cast<size_t>(th)] += m2::ReadWithFmas(buf.data() + b, e - b, fmas);
    });
    return static_cast<double>(n) * sizeof(float) / Seconds(t0);
  };
  const auto alone = [&](int fmas) {  // in L1: the same bytes' worth of loop, bytes per second
    const int64_t reps = std::max<int64_t>(1, n / (kL1Floats * pool.size()));
    const auto t0 = Clock::now();
    pool.ParallelFor(pool.size(), 1, [&](int64_t b, int64_t e, int th) {
      for (int64_t t = b; t < e; ++t)
        for (int64_t r = 0; r < reps; ++r)
          sink[static_cast<size_t>(th)] += m2::ReadWithFmas(l1.data() + t * kL1Floats, kL1Floats, fmas);
    });
    return static_cast<double>(reps * kL1Floats * pool.size()) * sizeof(float) / Seconds(t0);
  };
  std::printf("%d threads, %s kernels, %lld MiB; FMAs per 64 bytes read. Each turn: the loop alone (in L1), a read, "
              "the loop from memory, a read; the loop's share of the mean of the reads around it, and its speed "
              "alone over them (medians over 6 turns, and over the turns whose reads were in the faster half)\n",
              pool.size(), m2::ActiveKernelsName(), static_cast<long long>(total >> 20));
  std::printf("%6s %12s %14s %12s   %s\n", "FMAs", "alone GB/s", "alone / read", "of the read",
              "faster half: of the read, alone / read (reads)");
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (const int fmas : m2::kReadFmaCounts) {
    // Per turn, so that the compute ceiling and the share come from the same minute (on a
    // shared VM the cores' own speed changes from one minute to the next, as the memory's).
    std::vector<double> alones, shares, over, reads;
    double before = m2::MeasureReadBandwidth(pool, buf.data(), n, 1);
    for (int turn = 0; turn < 6; ++turn) {
      const double a = alone(fmas), k = loop(fmas), after = m2::MeasureReadBandwidth(pool, buf.data(), n, 1);
      reads.push_back(0.5 * (before + after));
      alones.push_back(a);
      shares.push_back(k / reads.back());
      over.push_back(a / reads.back());
      before = after;
    }
    const std::vector<size_t> order = ByReadsFastestFirst(reads);
    std::vector<double> fast_shares, fast_over;
    for (size_t i = 0; i < order.size() / 2; ++i) fast_shares.push_back(shares[order[i]]), fast_over.push_back(over[order[i]]);
    std::printf("%6d %12.1f %13.1fx %11.0f%%   %.0f%%, %.1fx (%.0f-%.0f GB/s)\n", fmas, median(alones) / 1e9,
                median(over), 100 * median(shares), 100 * median(fast_shares), median(fast_over),
                reads[order[order.size() / 2 - 1]] / 1e9, reads[order[0]] / 1e9);
  }
  double total_sink = 0;
  for (double v : sink) total_sink += v;
  return total_sink == 1.5 ? 1 : 0;  // never: keeps the loops' results alive
}

// Read patterns (`gemv_bench --read [MiB]`): one thread and all threads, 1-8 streams,
// with and without prefetching: which the bandwidth probe should take.
int ReadMode(int64_t total) {
  const ReadBuffer buf(total);
  m2::ThreadPool one(1);
  for (m2::ThreadPool* pool : {&one, &m2::ThreadPool::Global()}) {
    for (int streams : {1, 2, 4, 8}) {
      for (bool pf : {false, true}) {
        double best = 0;
        for (int rep = 0; rep < 4; ++rep)
          best = std::max(best, m2::ReadPatternBandwidth(*pool, buf.data(), static_cast<int64_t>(buf.size()), streams, pf));
        std::printf("%d threads, %d streams, prefetch %d: %.2f GB/s\n", pool->size(), streams, pf ? 1 : 0, best / 1e9);
      }
    }
  }
  return 0;
}

// Decode kernels against a read of the very same bytes, taking turns (`gemv_bench --turns
// [MiB]`): on a VM whose memory switches between speeds from one minute (or second) to the
// next, a ceiling measured before or after a timing can belong to another regime; here each
// pass of a kernel over the matrices (TOKENS tokens, every thread, the activation mode `auto`
// gives that format in the model) sits between two reads of the same buffer (the probe's
// four patterns, best of them), and each turn's ratio is to the mean of its two reads.
// The turns rotate through five settings, 10 turns each: one row a pass or each kernel's own
// count (DecodeOneRow, linear.h), the decode kernels' prefetch (RowPrefetch) and the
// order of the row chunks (in order or spread over the threads); each turn also times the
// kernel over a few rows in L2 (its own speed in the same minute). TOKENS (default 1): tokens
// per product, 1 to 8. ROWS (default 0: each case's own, 1,536 for the expert-sized ones):
// every matrix's rows, to see what each product's start and end cost (the q4 int8 kernel on
// a Zen 5 VM in fast minutes: 74-75% of the read over 1,024 rows, 87-88% over 8,192).
int TurnsMode(int64_t total, const std::string& only, int64_t tokens, int64_t rows) {
  m2::ThreadPool& pool = m2::ThreadPool::Global();
  const bool bf16_decode = m2::Bf16PrefillBeatsFp32(m2::WeightFormat::kFp8Block);  // auto: FP8 decode steps on the bf16 kernel (AMD, VBMI)
  const bool int8 = m2::Int8GemmFor(m2::WeightFormat::kQ4) != m2::Int8GemmKernel::kNone;
  struct Case {
    m2::WeightFormat f;
    int64_t rows, cols;
    m2::ActivationMode mode;
    const char* name;
  };
  std::vector<Case> cases = {
      {m2::WeightFormat::kBF16, 8192, 3072, m2::ActivationMode::kExact, "bf16 (the lm_head's kernel)"},
      {m2::WeightFormat::kFp8Block, 1536, 3072, m2::ActivationMode::kExact, "fp8-block, exact"},
      {m2::WeightFormat::kQ8, 1536, 3072, m2::ActivationMode::kExact, "q8, exact"},
      {m2::WeightFormat::kQ8, 1536, 3072, m2::ActivationMode::kInt16Decode, "q8, int16 decode"},
      {m2::WeightFormat::kQ8, 1536, 3072, m2::ActivationMode::kInt8Decode, "q8, int8 decode"},
      {m2::WeightFormat::kQ8, 8192, 3072, m2::ActivationMode::kExact, "q8 8192 x 3072 (a q8 lm_head), exact"},
      {m2::WeightFormat::kQ8, 8192, 3072, m2::ActivationMode::kInt16Decode, "q8 8192 x 3072 (a q8 lm_head), int16 decode"},
      {m2::WeightFormat::kQ4, 1536, 3072, int8 ? m2::ActivationMode::kInt8DecodeInt8Prefill : m2::ActivationMode::kExact,
       int8 ? "q4, int8 decode" : "q4, exact"}};
  if (bf16_decode)  // what `auto` gives FP8 here, besides the exact kernel (--activations exact)
    cases.insert(cases.begin() + 2, {m2::WeightFormat::kFp8Block, 1536, 3072, m2::ActivationMode::kBf16Prefill, "fp8-block, bf16 decode"});
  if (rows < 0 || rows % 16 != 0) {
    std::fprintf(stderr, "gemv_bench --turns MiB FILTER TOKENS ROWS: ROWS is 0 (each case's own) or a multiple of 16, not %lld\n",
                 static_cast<long long>(rows));
    return 2;
  }
  if (tokens < 1 || tokens > 8) {
    std::fprintf(stderr, "gemv_bench --turns MiB [FILTER [TOKENS]]: TOKENS is 1 to 8 (a decode chunk), not %lld\n",
                 static_cast<long long>(tokens));
    return 2;
  }
  if (!only.empty() && std::none_of(cases.begin(), cases.end(), [&](const Case& c) {
        return std::string(c.name).find(only) != std::string::npos;
      })) {
    std::fprintf(stderr, "gemv_bench --turns MiB NAME: no case's name contains '%s'; the cases here:\n", only.c_str());
    for (const Case& c : cases) std::fprintf(stderr, "  %s\n", c.name);
    return 2;
  }
  std::printf("%d threads, %s kernels, %lld MiB per format, %lld token(s); each turn: read, kernel x 3, read (ratios: "
              "kernel / mean of the two reads)\n",
              pool.size(), m2::ActiveKernelsName(), static_cast<long long>(total >> 20), static_cast<long long>(tokens));
  for (Case c : cases) {
    if (!only.empty() && std::string(c.name).find(only) == std::string::npos) continue;
    if (rows > 0) c.rows = rows;
    Set s = Make(c.f, c.rows, c.cols, total);
    int64_t bytes = 0;
    for (auto& w : s.mats) {
      w.activations = c.mode;
      bytes += w.bytes();
    }
    const float* probe = reinterpret_cast<const float*>(s.data->data());
    const int64_t probe_n = static_cast<int64_t>(s.data->size() / sizeof(float));
    std::vector<float> xs(static_cast<size_t>(tokens * c.cols)), ys(static_cast<size_t>(tokens * c.rows));
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.01f * static_cast<float>(i));
    // The settings take turns: one row a pass (DecodeOneRow) and each kernel's own count,
    // the prefetch (RowPrefetch) and the order of the row chunks (SetDecodeChunkOrderForTesting).
    struct Setting {
      const char* name;
      int one_row, prefetch, spread, fp8_gfni;
    };
    // The L2 / L1 + L2 prefetch: RowPrefetch (linear.h), which every decode kernel follows.
    // The FP8 bf16 kernel's decode (Fp8GemvGfni) takes a sixth turn: the byte-table lookups.
    const Setting settings[] = {{"one row a pass, L2 prefetch, chunks spread", 1, 1, 1, -1},
                                {"one row a pass, L2 prefetch, chunks in order", 1, 1, 0, -1},
                                {"one row a pass, L1 + L2 prefetch, chunks spread", 1, 0, 1, -1},
                                {"own rows a pass, L1 + L2 prefetch, chunks spread", 0, 0, 1, -1},
                                {"own rows a pass, L1 + L2 prefetch, chunks in order", 0, 0, 0, -1},
                                {"one row a pass, L2 prefetch, chunks spread, FP8 by table lookups", 1, 1, 1, 0}};
    const bool fp8_bf16 = c.f == m2::WeightFormat::kFp8Block && c.mode == m2::ActivationMode::kBf16Prefill;
    constexpr int kMaxSettings = 6;
    const int kSettings = fp8_bf16 && m2::Fp8GemvGfni() ? 6 : 5;
    const bool one = m2::DecodeOneRow();
    const int chosen = one ? 0 : 3;  // this CPU's choice (the defaults of DecodeOneRow and DecodeRowPrefetch)
    std::vector<double> ratios[kMaxSettings], reads[kMaxSettings], kernel[kMaxSettings], cached[kMaxSettings];
    // The same kernel over a few rows of the first matrix (about 1.5 MiB: in the cores' L2),
    // timed in each turn too: its speed where the memory costs nothing, in the same minute
    // as the reads.
    m2::LinearWeight small = s.mats[0];
    small.rows = std::min<int64_t>(c.rows, std::max<int64_t>(16, (int64_t{3} << 19) / (small.bytes() / c.rows)) / 16 * 16);
    const int64_t small_bytes = small.bytes();
    double before = m2::MeasureReadBandwidth(pool, probe, probe_n, 1);
    for (int turn = 0; turn < 10 * kSettings; ++turn) {
      const int k = turn % kSettings;
      m2::SetDecodeOneRowForTesting(settings[k].one_row);
      m2::SetRowPrefetchForTesting(settings[k].prefetch);
      m2::SetDecodeChunkOrderForTesting(settings[k].spread);
      m2::SetFp8GemvGfniForTesting(settings[k].fp8_gfni);
      const auto t0 = Clock::now();
      for (int rep = 0; rep < 3; ++rep)
        for (const auto& w : s.mats) m2::LinearOnPool(w, xs.data(), tokens, ys.data(), pool);
      const double speed = 3.0 * static_cast<double>(bytes) / Seconds(t0);
      m2::LinearOnPool(small, xs.data(), tokens, ys.data(), pool);
      double best = 1e30;
      for (int rep = 0; rep < 40; ++rep) {
        const auto c0 = Clock::now();
        m2::LinearOnPool(small, xs.data(), tokens, ys.data(), pool);
        best = std::min(best, Seconds(c0));
      }
      cached[k].push_back(static_cast<double>(small_bytes) / best);
      const double after = m2::MeasureReadBandwidth(pool, probe, probe_n, 1);
      reads[k].push_back(0.5 * (before + after));
      kernel[k].push_back(speed);
      ratios[k].push_back(speed / reads[k].back());
      before = after;
    }
    m2::SetDecodeOneRowForTesting(-1);
    m2::SetRowPrefetchForTesting(-1);
    m2::SetDecodeChunkOrderForTesting(-1);
    m2::SetFp8GemvGfniForTesting(-1);
    for (int k = 0; k < kSettings; ++k) {
      std::printf("%s  %s%s\n%-28s", c.name, settings[k].name, k == chosen ? " (this CPU's choice)" : "", "");
      for (size_t i = 0; i < ratios[k].size(); ++i) std::printf(" %.0f/%.0f", kernel[k][i] / 1e9, reads[k][i] / 1e9);
      const TurnsSummary m = Summarize(ratios[k], reads[k]);
      std::printf("\n%-28s GB/s kernel/read per turn above; of the read: median %.0f%% [%.0f-%.0f%%], in the faster "
                  "half of the turns (reads %.0f-%.0f GB/s) %.0f%%\n",
                  "", 100 * m.median, 100 * m.lo, 100 * m.hi, m.fast_read_lo / 1e9, m.fast_read_hi / 1e9,
                  100 * m.fast_median);
      std::vector<double> alone(cached[k].size());
      for (size_t i = 0; i < alone.size(); ++i) alone[i] = cached[k][i] / reads[k][i];
      const TurnsSummary a = Summarize(alone, reads[k]);
      std::printf("%-28s in L2 (%lld KiB, best of 40): %.0f-%.0f GB/s, %.2fx the read (faster half %.2fx)\n", "",
                  static_cast<long long>(small_bytes >> 10), *std::min_element(cached[k].begin(), cached[k].end()) / 1e9,
                  *std::max_element(cached[k].begin(), cached[k].end()) / 1e9, a.median, a.fast_median);
    }
  }
  return 0;
}

// MoE decode steps (`gemv_bench --moe [q4|q8|fp8-block]`): one token at a time through
// M2's 256 experts (W1 / W3 1536 x 3072, W2 3072 x 1536; top 8, so each step reads 8
// experts, nearly all from memory), with the activation mode `auto` gives the format, all
// threads. The ways moe.cpp can run a decode chunk take turns: threads taking whole
// experts, and every used expert's rows as two pool jobs with their chunks handed out in
// order or spread (ThreadPool::Order); each between reads of the experts' bytes, its GB/s
// (the used experts' bytes and the router's, 3 MiB of fp32 read every step; until December
// 2026 the router's were left out, about 5% of a step's bytes) over the mean of the reads
// around it.
int MoeMode(const std::string& name) {
  m2::ThreadPool& pool = m2::ThreadPool::Global();
  const std::string fmt = name.empty() ? "q4" : name;
  m2::WeightFormat f;
  m2::ActivationMode mode = m2::ActivationMode::kExact;
  if (fmt == "q4") {
    f = m2::WeightFormat::kQ4;
    if (m2::Int8GemmFor(f) != m2::Int8GemmKernel::kNone) mode = m2::ActivationMode::kInt8DecodeInt8Prefill;
  } else if (fmt == "q8") {
    f = m2::WeightFormat::kQ8;
    if (m2::ActiveIsa() != m2::KernelIsa::kPortable) mode = m2::ActivationMode::kInt16Decode;
  } else if (fmt == "fp8-block") {
    f = m2::WeightFormat::kFp8Block;
    if (m2::Bf16PrefillBeatsFp32(f)) mode = m2::ActivationMode::kBf16Prefill;
  } else {
    std::fprintf(stderr, "gemv_bench --moe FORMAT: FORMAT is q4, q8 or fp8-block, not '%s'\n", fmt.c_str());
    return 2;
  }
  constexpr int64_t E = 256, Hd = 3072, I = 1536, K = 8;
  m2::LinearWeight proto;
  proto.format = f, proto.rows = I, proto.cols = Hd;
  const int64_t mat = proto.bytes();
  std::printf("building 256 experts of %s (%.0f MiB)...\n", fmt.c_str(), 3.0 * E * mat / (1 << 20));
  Set up = Make(f, I, Hd, 2 * E * mat), down = Make(f, Hd, I, E * mat);
  m2::ModelConfig cfg;
  cfg.hidden_size = Hd, cfg.intermediate_size = I, cfg.num_local_experts = E, cfg.num_experts_per_tok = K;
  m2::MoeWeights w;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> router(static_cast<size_t>(E * Hd));
  for (float& v : router) v = nd(rng);
  w.gate.format = m2::WeightFormat::kF32, w.gate.rows = E, w.gate.cols = Hd, w.gate.data = router.data();
  for (int64_t e = 0; e < E; ++e) {
    m2::ExpertWeights ex{up.mats[static_cast<size_t>(2 * e)], up.mats[static_cast<size_t>(2 * e + 1)], down.mats[static_cast<size_t>(e)]};
    ex.w1.activations = ex.w3.activations = ex.w2.activations = mode;
    w.experts.push_back(ex);
  }
  constexpr int kTokens = 64, kSteps = 32, kTurns = 12;
  std::vector<float> xs(static_cast<size_t>(kTokens * Hd)), out(static_cast<size_t>(Hd));
  for (float& v : xs) v = nd(rng);
  m2::Scratch s;
  const float* probe = reinterpret_cast<const float*>(up.data->data());
  const int64_t probe_n = static_cast<int64_t>(up.data->size() / sizeof(float));
  std::printf("%d threads, %s kernels, activations %s; each turn: read, then %d steps of each way followed by a "
              "read\n",
              pool.size(), m2::ActiveKernelsName(),
              mode == m2::ActivationMode::kExact ? "exact" : f == m2::WeightFormat::kQ4 ? "int8" : f == m2::WeightFormat::kQ8 ? "int16" : "bf16",
              kSteps);
  // The three ways a decode chunk can run, taking turns.
  constexpr int kVariants = 3;
  const char* const variant_name[kVariants] = {"whole experts", "rows in order", "rows spread"};
  const auto steps = [&](int variant, int turn) {
    m2::SetMoeRowsJobsForTesting(variant > 0);
    m2::SetDecodeChunkOrderForTesting(variant == 2 ? 1 : 0);
    int64_t bytes = 0;
    const auto t0 = Clock::now();
    for (int k = 0; k < kSteps; ++k) {
      const float* x = &xs[static_cast<size_t>(((turn * kSteps + k) % kTokens) * Hd)];
      m2::MoeForward(cfg, w, 0, x, 1, out.data(), s, pool, nullptr, nullptr);
      bytes += w.gate.bytes();  // the router's fp32 rows, read every step too
      for (int32_t e : s.used) bytes += w.experts[e].w1.bytes() + w.experts[e].w3.bytes() + w.experts[e].w2.bytes();
    }
    return static_cast<double>(bytes) / Seconds(t0);
  };
  std::vector<double> ratio[kVariants], reads[kVariants];
  double before = m2::MeasureReadBandwidth(pool, probe, probe_n, 1);
  for (int turn = 0; turn < kTurns; ++turn) {
    for (int v = 0; v < kVariants; ++v) {
      const double k = steps(v, turn);
      const double after = m2::MeasureReadBandwidth(pool, probe, probe_n, 1);
      reads[v].push_back(0.5 * (before + after));
      ratio[v].push_back(k / reads[v].back());
      std::printf("  turn %2d %-14s %5.1f GB/s, reads %5.1f GB/s: %5.1f%%\n", turn, variant_name[v], k / 1e9,
                  reads[v].back() / 1e9, 100 * ratio[v].back());
      std::fflush(stdout);
      before = after;
    }
  }
  m2::SetMoeRowsJobsForTesting(true);
  m2::SetDecodeChunkOrderForTesting(-1);
  for (int v = 0; v < kVariants; ++v) {
    const TurnsSummary m = Summarize(ratio[v], reads[v]);
    std::printf("%-14s of the read: median %.1f%% [%.1f-%.1f%%], in the faster half of the turns (reads %.0f-%.0f GB/s) "
                "%.1f%%\n",
                variant_name[v], 100 * m.median, 100 * m.lo, 100 * m.hi, m.fast_read_lo / 1e9, m.fast_read_hi / 1e9,
                100 * m.fast_median);
  }
  return 0;
}

namespace {

constexpr char kUsage[] =
    "Usage: gemv_bench [MiB]                decode GEMV per format (one thread) and prefill GEMM\n"
    "       gemv_bench --batch [MiB]        batched decode, all threads\n"
    "       gemv_bench --int8 [MiB]         q8 / q4: fp32 against int8 activations\n"
    "       gemv_bench --gemm [MiB [fp8-block|q8|q4]]   prefill GEMMs, every activation kind\n"
    "       gemv_bench --gemm-fp8 [MiB]     the same for FP8 weights only\n"
    "       gemv_bench --turns [MiB [NAME [TOKENS [ROWS]]]]   decode kernels against a read of\n"
    "                                       the same bytes, taking turns, all threads\n"
    "       gemv_bench --bf16 [MiB]         bf16 / FP8 decode: exact against bf16 activations\n"
    "       gemv_bench --read [MiB]         the read probe's patterns\n"
    "       gemv_bench --overlap [MiB]      a streaming read with 0-32 FMAs per 64 bytes\n"
    "       gemv_bench --moe [q4|q8|fp8-block]   MoE decode steps over M2's 256 experts\n"
    "       gemv_bench --attention          decode attention over 1k-32k cached positions\n"
    "       gemv_bench --small              the bundled model's small matrices at 1-9 tokens\n"
    "MiB: the memory each set of matrices takes (whole number, at least 1; above the\n"
    "last-level cache for figures from memory). The comment at the top of\n"
    "bench/gemv_bench.cpp says what each mode prints.\n";

// argv[i] as a whole number in [lo, hi], `fallback` where it is absent; false (after an error
// naming the argument, and the usage) where it is not such a number.
bool NumberArg(int argc, char** argv, int i, const char* what, int64_t lo, int64_t hi, int64_t fallback, int64_t* out) {
  long long v = fallback;
  if (i < argc && !m2::bench::ParseWhole("gemv_bench", what, argv[i], lo, hi, &v)) {
    std::fputs(kUsage, stderr);
    return false;
  }
  *out = v;
  return true;
}

// More arguments than the mode takes are an error too, never ignored.
bool AtMost(int argc, int n, const char* mode) {
  if (argc <= n) return true;
  std::fprintf(stderr, "gemv_bench %s: takes at most %d argument(s) in all, got %d\n%s", mode, n - 1, argc - 1, kUsage);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int64_t kMaxMib = int64_t{1} << 20;  // 1 TiB: any more is a typo
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--help" || mode == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  int64_t mib = 0;
  if (mode == "--turns") {  // --turns [MiB [FILTER [TOKENS [ROWS]]]]
    int64_t tokens = 0, rows = 0;
    if (!AtMost(argc, 6, "--turns") || !NumberArg(argc, argv, 2, "MiB", 1, kMaxMib, 1024, &mib) ||
        !NumberArg(argc, argv, 4, "TOKENS", 1, 8, 1, &tokens) || !NumberArg(argc, argv, 5, "ROWS", 0, 1 << 20, 0, &rows))
      return 2;
    return TurnsMode(mib << 20, argc > 3 ? argv[3] : "", tokens, rows);
  }
  if (mode == "--moe") return AtMost(argc, 3, "--moe") ? MoeMode(argc > 2 ? argv[2] : "") : 2;
  if (mode == "--attention") return AtMost(argc, 2, "--attention") ? AttentionMode() : 2;
  if (mode == "--small") return AtMost(argc, 2, "--small") ? SmallMode() : 2;
  if (mode == "--gemm") {  // --gemm [MiB [fp8-block|q8|q4]]
    if (!AtMost(argc, 4, "--gemm") || !NumberArg(argc, argv, 2, "MiB", 1, kMaxMib, 512, &mib)) return 2;
    const std::string only = argc > 3 ? argv[3] : "";
    if (!only.empty() && only != "fp8-block" && only != "q8" && only != "q4") {
      std::fprintf(stderr, "gemv_bench --gemm MiB FORMAT: FORMAT is fp8-block, q8 or q4, not '%s'\n", only.c_str());
      return 2;
    }
    return GemmMode(mib << 20, only);
  }
  if (mode == "--gemm-fp8") {
    if (!AtMost(argc, 3, "--gemm-fp8") || !NumberArg(argc, argv, 2, "MiB", 1, kMaxMib, 512, &mib)) return 2;
    return GemmMode(mib << 20, "fp8-block");
  }
  using ModeFn = int (*)(int64_t);
  const std::pair<const char*, ModeFn> one_size_modes[] = {{"--bf16", Bf16Mode},   {"--overlap", OverlapMode},
                                                           {"--read", ReadMode},   {"--batch", BatchMode},
                                                           {"--int8", Int8Mode}};
  for (const auto& [name, fn] : one_size_modes) {
    if (mode != name) continue;
    if (!AtMost(argc, 3, name) || !NumberArg(argc, argv, 2, "MiB", 1, kMaxMib, 1024, &mib)) return 2;
    return fn(mib << 20);
  }
  if (mode.starts_with("-")) {
    std::fprintf(stderr, "gemv_bench: unknown mode '%s'\n%s", mode.c_str(), kUsage);
    return 2;
  }
  if (!AtMost(argc, 2, "[MiB]") || !NumberArg(argc, argv, 1, "MiB", 1, kMaxMib, 512, &mib)) return 2;
  const int64_t total = mib << 20;
  const bool avx512 = m2::ActiveIsa() == m2::KernelIsa::kAvx512;
  std::printf("one thread, %s kernels, %lld MiB per format\n", avx512 ? "avx512" : "avx2",
              static_cast<long long>(mib));
  // The read probe (one thread): a float buffer of the same size.
  double best_read = 0;
  {
    const ReadBuffer buf(total);
    m2::ThreadPool one(1);
    best_read = m2::MeasureReadBandwidth(one, buf.data(), static_cast<int64_t>(buf.size()), 2);
  }
  std::printf("%-10s %10s %8s\n", "format", "GB/s", "of read");
  std::printf("%-10s %10.2f %7.0f%%\n", "read", best_read / 1e9, 100.0);
  const int64_t rows = 3072, cols = 1536;
  std::vector<float> x(cols), y(rows);
  for (int64_t i = 0; i < cols; ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  for (auto f : {m2::WeightFormat::kBF16, m2::WeightFormat::kFp8Block, m2::WeightFormat::kQ8, m2::WeightFormat::kQ4}) {
    Set s = Make(f, rows, cols, total);
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      int64_t bytes = 0;
      const auto t0 = Clock::now();
      for (const auto& w : s.mats) {
        const bool ok = avx512 ? m2::LinearRowsAvx512(w, x.data(), 1, y.data(), 0, rows)
                               : m2::LinearRowsAvx2(w, x.data(), 1, y.data(), 0, rows);
        if (!ok) return 1;
        bytes += w.bytes();
      }
      best = std::max(best, bytes / Seconds(t0));
    }
    std::printf("%-10s %10.2f %7.0f%%\n", m2::WeightFormatName(f), best / 1e9, 100.0 * best / best_read);
  }

  // Prefill GEMM on one thread: GFLOP/s next to the FMA peak, for an expert's shapes,
  // weights read from memory.
  m2::ThreadPool::SetGlobalThreads(1);
  double peak = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    const double flops = m2::FmaBurst(20'000'000);
    peak = std::max(peak, flops / Seconds(t0));
  }
  std::printf("\nprefill GEMM, one thread; fp32 FMA peak %.1f GFLOP/s\n", peak / 1e9);
  std::printf("%-10s %6s %6s %6s %10s %8s\n", "format", "rows", "cols", "tokens", "GFLOP/s", "of peak");
  for (auto f : {m2::WeightFormat::kFp8Block, m2::WeightFormat::kBF16, m2::WeightFormat::kQ4}) {
    for (auto [r, c] : {std::pair<int64_t, int64_t>{1536, 3072}, {3072, 1536}}) {
      // As many matrices as the GEMV sets (beyond the caches), used in turn like the experts
      // of a layer: each call's weights come from memory, as in a real prefill.
      Set s = Make(f, r, c, total);
      for (int64_t n : {64, 67, 72, 512}) {  // 67, 72: rests of 3 and 8 tokens past whole vectors
        std::vector<float> xs(static_cast<size_t>(n * c)), ys(static_cast<size_t>(n * r));
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.01f * static_cast<float>(i));
        double best = 0;
        for (int rep = 0; rep < 7; ++rep) {  // best of 7 timings of >= 5 calls each
          const auto t0 = Clock::now();
          int calls = 0;
          do m2::Linear(s.mats[calls % s.mats.size()], xs.data(), n, ys.data());
          while (++calls < 5 || Seconds(t0) < 0.05);
          best = std::max(best, 2.0 * static_cast<double>(r * c * n) * calls / Seconds(t0));
        }
        std::printf("%-10s %6lld %6lld %6lld %10.1f %7.0f%%\n", m2::WeightFormatName(f), static_cast<long long>(r),
                    static_cast<long long>(c), static_cast<long long>(n), best / 1e9, 100.0 * best / peak);
      }
    }
  }
  return 0;
}
