#include "cli/bench_util.h"

#include <sys/mman.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/huge_buffer.h"
#include "base/progress.h"
#include "kernels/probe.h"

namespace m2::cli {

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }


// The best of two rounds of the probe's read patterns (kernels/probe.h) over 1 GiB.
double MeasureBandwidth(ThreadPool& pool) {
  const int64_t n = (1ll << 30) / sizeof(float);
  // In 2 MiB pages, as the weights are mapped (see base/huge_buffer.h).
  const HugePageBuffer mem(static_cast<size_t>(n) * sizeof(float));
  float* const probe = reinterpret_cast<float*>(mem.data());
  std::fill_n(probe, n, 1.0f);
  return MeasureReadBandwidth(pool, probe, n, 2);
}

double MeasurePeakFlops(ThreadPool& pool) { return MeasurePeak(pool, FmaBurst); }
double MeasurePeakBf16Flops(ThreadPool& pool) { return MeasurePeak(pool, Bf16DotBurstAvx512); }
double MeasurePeakAmxFlops(ThreadPool& pool) {
  // A sixteenth of the rounds: each is four 16-cycle tile products, not twelve vector ones.
  return MeasurePeak(pool, [](int64_t iters) { return AmxBf16Burst(iters / 16); });
}
double MeasurePeakInt8Ops(ThreadPool& pool, Int8GemmKernel kernel, WeightFormat format) {
  return MeasurePeak(pool, kernel == Int8GemmKernel::kAvx512Vnni ? Int8DotBurstAvx512Vnni
                           : kernel == Int8GemmKernel::kAvxVnni  ? Int8DotBurstAvxVnni
                           : format == WeightFormat::kQ8         ? Int8DotBurstAvx2Signed
                                                                 : Int8DotBurstAvx2);
}

const char* Int8PeakName(Int8GemmKernel kernel, WeightFormat format) {
  if (kernel == Int8GemmKernel::kAvx512Vnni || kernel == Int8GemmKernel::kAvxVnni) return "vpdpbusd";
  return format == WeightFormat::kQ8 ? "vpsignb + vpmaddubsw + vpmaddwd + vpaddd" : "vpmaddubsw + vpaddw";
}

double MeasurePeak(ThreadPool& pool, double (*burst)(int64_t)) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> flops(pool.size());
    const auto t0 = Clock::now();
    pool.ParallelFor(pool.size(), 1, [&](int64_t b, int64_t e, int th) {
      for (int64_t i = b; i < e; ++i) flops[th] += burst(20'000'000);
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

void Prefault(const Model& m) {
  if (m.ranks() == 1) return Prefault(m.store());
  // A rank of a split model reads only its slices: bring in those pages, not the whole
  // file (its resident memory is then its share, as it would be on a machine of its own).
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;
#endif
  const uintptr_t page = 4096;
  const auto populate = [&](const void* data, int64_t bytes) {
    if (data == nullptr || bytes <= 0) return;
    const uintptr_t b = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(bytes);
    if (::madvise(reinterpret_cast<void*>(b), end - b, MADV_POPULATE_READ) != 0) {
      volatile uint8_t sink = 0;
      for (uintptr_t a = b; a < end; a += page) sink = sink + *reinterpret_cast<const uint8_t*>(a);
      (void)sink;
    }
  };
  auto& w = const_cast<ModelWeights&>(m.weights());
  ForEachLinear(w, [&](LinearWeight& l) {
    if (&l == &w.embed) return;  // read a row per token
    int64_t scale_bytes = 0;
    if (l.format == WeightFormat::kFp8Block) scale_bytes = 4 * l.scale_rows() * l.scale_cols();
    if (l.format == WeightFormat::kQ8 || l.format == WeightFormat::kQ4) scale_bytes = 2 * l.rows * l.scale_cols();
    populate(l.data, l.bytes() - scale_bytes);
    populate(l.scale, scale_bytes);
  });
}

Costs CountCosts(const Model& m) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  Costs k;
  for (const auto& L : w.layers) {
    for (const LinearWeight* lw : {&L.attn.q, &L.attn.k, &L.attn.v, &L.attn.o, &L.lightning.qkv, &L.lightning.gate,
                                   &L.lightning.out, &L.moe.gate}) {
      if (lw->rows == 0) continue;  // the other attention kind's weights
      k.linear_flops_per_token += 2.0 * lw->rows * lw->cols;
      k.weight_bytes_per_token += lw->bytes();
      k.shared_bytes += lw->bytes();
    }
    const ExpertWeights& ex = L.moe.experts[0];  // every expert has the same size
    const double expert_bytes = ex.w1.bytes() + ex.w3.bytes() + ex.w2.bytes();
    const double expert_flops = 2.0 * (ex.w1.rows * ex.w1.cols + ex.w3.rows * ex.w3.cols + ex.w2.rows * ex.w2.cols);
    k.linear_flops_per_token += c.num_experts_per_tok * expert_flops;
    k.weight_bytes_per_token += c.num_experts_per_tok * expert_bytes;
    k.expert_bytes = expert_bytes;
  }
  k.state_bytes_per_token = 2.0 * static_cast<double>(c.lightning_state_bytes());  // read and written
  k.lm_head_flops = 2.0 * w.lm_head.rows * w.lm_head.cols;
  k.weight_bytes_per_token += w.lm_head.bytes() + w.embed.bytes() / w.embed.rows;
  k.shared_bytes += w.lm_head.bytes();
  return k;
}

double AttentionFlops(const ModelConfig& c, int64_t p, bool prefill) {
  const auto lightning = static_cast<double>(c.num_lightning_layers());
  const auto softmax = static_cast<double>(c.num_hidden_layers) - lightning;
  const double H = static_cast<double>(c.num_attention_heads), D = static_cast<double>(c.head_dim);
  const double per_lightning = 4.0 * H * D * D + (prefill ? 4.0 * H * static_cast<double>(c.lightning_block) * D : 0.0);
  return 4.0 * H * D * static_cast<double>(p + 1) * softmax + per_lightning * lightning;
}

}  // namespace m2::cli
