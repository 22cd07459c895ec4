// Microseconds per Sampler::Sample at the M2 vocabulary size (200,064), per sampling setting.
//
//   ninja -C build sampler_bench && build/bench/sampler_bench [seconds per setting, default 1]
//
// Two kinds of rows, 16 of each, used in turn:
//   model: normal logits with std 3 plus 8 large values (10 to 20), so that usually a few
//          tokens hold most of the mass, as in a real model's output;
//   flat:  the same normal logits without the large values, the mass spread over tens of
//          thousands of tokens (a harder case for anything that avoids a full sort).
// Each setting runs in 5 blocks of about seconds / 5; printed is the best block's mean,
// in wall time and in this thread's CPU time (on a shared machine the two differ).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench_args.h"
#include "runtime/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;
using m2::runtime::Sampler;
using m2::runtime::SamplingParams;

constexpr int kVocab = 200064;
constexpr int kRows = 16;

std::vector<std::vector<float>> MakeRows(bool peaks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::uniform_real_distribution<float> peak(10.f, 20.f);
  std::uniform_int_distribution<int> id(0, kVocab - 1);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& l : row) l = normal(rng);
    if (peaks)
      for (int i = 0; i < 8; ++i) row[id(rng)] = peak(rng);
  }
  return rows;
}

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Micros {
  double wall = 1e30, cpu = 1e30;
};

Micros MicrosPerSample(const SamplingParams& p, const std::vector<std::vector<float>>& rows, double seconds) {
  Sampler s(p);
  int64_t sink = 0;
  for (int i = 0; i < 2; ++i) sink += s.Sample(rows[i % kRows], {});
  Micros best;
  for (int b = 0; b < 5; ++b) {
    const auto t0 = Clock::now();
    const double c0 = CpuSeconds();
    int64_t calls = 0;
    double elapsed = 0;
    do {
      for (int i = 0; i < 8; ++i, ++calls) sink += s.Sample(rows[calls % kRows], {});
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < seconds / 5);
    best.wall = std::min(best.wall, elapsed * 1e6 / calls);
    best.cpu = std::min(best.cpu, (CpuSeconds() - c0) * 1e6 / calls);
  }
  if (sink == -1) std::printf("!");
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  if (argc > 2 || (argc > 1 && !m2::bench::ParseDecimal("sampler_bench", "SECONDS", argv[1], 0.01, 3600, &seconds))) {
    std::fprintf(stderr, "usage: sampler_bench [SECONDS per setting (0.01 to 3600), default 1]\n");
    return 2;
  }
  const auto model = MakeRows(true, 1), flat = MakeRows(false, 2);
  struct Setting {
    const char* name;
    double temperature;
    int64_t top_k;
    double top_p, min_p;
  };
  const Setting settings[] = {
      {"greedy", 0, 0, 1, 0},
      {"temperature 1", 1, 0, 1, 0},
      {"top_k 40", 1, 40, 1, 0},
      {"top_p 0.95", 1, 0, 0.95, 0},
      {"min_p 0.05", 1, 0, 1, 0.05},
      {"top_k 40 + top_p 0.95 + min_p 0.05", 1, 40, 0.95, 0.05},
  };
  std::printf("vocab %d, microseconds per Sample() (wall / thread CPU)\n%-36s %17s %17s\n", kVocab, "setting",
              "model", "flat");
  for (const Setting& st : settings) {
    SamplingParams p;
    p.temperature = st.temperature;
    p.top_k = st.top_k;
    p.top_p = st.top_p;
    p.min_p = st.min_p;
    p.seed = 42;
    const Micros a = MicrosPerSample(p, model, seconds), b = MicrosPerSample(p, flat, seconds);
    std::printf("%-36s %8.1f /%7.1f %8.1f /%7.1f\n", st.name, a.wall, a.cpu, b.wall, b.cpu);
  }
  return 0;
}
