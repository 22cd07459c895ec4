// What a ThreadPool job costs beyond its work, in rounds of about 0.2 s for SECONDS seconds,
// so that a run catches the minutes a VM's cores talk to each other slowly.
//
//   build/bench/pool_bench [SECONDS [THREADS]]
//
// Each line (a round, stamped with the seconds since the start): for jobs of 1, 3, 8 and 30 us of work (a timed spin, cut into 8 chunks), with 1 us
// of serial work between jobs as a model's forward pass has, the microseconds per job on the
// calling thread alone and on THREADS threads (default: one per available core), the ratio,
// the share of chunks the workers ran, and the overhead per job: the pool's time less the
// ideal (work / threads + the serial gap). On a 2-vCPU Zen 5 VM in its usual minutes the
// overhead was 0.5-0.6 us a job (1 / 3 / 8 / 30 us jobs 1.05x / 1.34x / 1.63x / 1.86x). For
// a few minutes at a time, with the same binaries, an earlier form of this loop (8 us jobs
// with 2 us gaps, 3 us jobs with 1 us gaps) found it near 1.6 us, the workers still taking
// half of the chunks (8 us jobs 1.32-1.35x against 1.54x in the usual minutes, 3 us jobs
// 1.00-1.09x against 1.35x): the round trips between the cores' caches had slowed, and the
// bundled model's 64-token prefill ran 0.74x of one thread on two then.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "base/thread_pool.h"
#include "bench_args.h"

namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

// Busy for `us` microseconds (no memory traffic: the chunks cost the same on any thread).
void Spin(double us) {
  const auto end = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < end) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  long long seconds = 10, threads = 0;
  if (argc > 3 || (argc > 1 && !m2::bench::ParseWhole("pool_bench", "SECONDS", argv[1], 1, 86400, &seconds)) ||
      (argc > 2 && !m2::bench::ParseWhole("pool_bench", "THREADS", argv[2], 0, 4096, &threads)) || threads == 1) {
    std::fprintf(stderr, "usage: pool_bench [SECONDS (1 or more) [THREADS (0: one per core, else 2 or more)]]\n");
    return 2;
  }
  m2::ThreadPool pool(static_cast<int>(threads));
  if (pool.size() < 2) {
    std::fprintf(stderr, "pool_bench: this machine offers one core; nothing to compare\n");
    return 2;
  }
  constexpr double kGapMicros = 1.0;
  constexpr int kChunks = 8;
  const double jobs[] = {1.0, 3.0, 8.0, 30.0};
  std::printf("%d threads; per job: us alone / us on the pool (ratio, workers' share of chunks, overhead us)\n",
              pool.size());
  const auto start = Clock::now(), stop = start + std::chrono::seconds(seconds);
  while (Clock::now() < stop) {
    std::printf("%6.1f s:", Micros(start, Clock::now()) / 1e6);
    for (double job : jobs) {
      const int calls = static_cast<int>(100000.0 / (job + kGapMicros) / 4.0);  // about 25 ms each way
      auto t0 = Clock::now();
      for (int c = 0; c < calls; ++c) Spin(job), Spin(kGapMicros);
      const double alone = Micros(t0, Clock::now()) / calls;
      std::atomic<int> by_workers{0};
      t0 = Clock::now();
      for (int c = 0; c < calls; ++c) {
        pool.ParallelFor(kChunks, 1, [&](int64_t b, int64_t e, int thread) {
          Spin(job * static_cast<double>(e - b) / kChunks);
          if (thread != 0) by_workers.fetch_add(static_cast<int>(e - b), std::memory_order_relaxed);
        });
        Spin(kGapMicros);
      }
      const double pooled = Micros(t0, Clock::now()) / calls;
      const double ideal = job / pool.size() + kGapMicros;
      std::printf("  %4.0f us: %5.2f / %5.2f (%.2fx, %2.0f%%, %+.2f)", job, alone, pooled, alone / pooled,
                  100.0 * by_workers.load() / (static_cast<double>(calls) * kChunks), pooled - ideal);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
