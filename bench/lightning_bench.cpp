// Lightning attention kernels (kernels/lightning.h) on one thread, one head of D = 128:
// time per token per head and GFLOP/s next to the measured fp32 FMA peak of one core.
//
//   ninja -C build lightning_bench && build/bench/lightning_bench
//
// FLOPs counted (2 per multiply-add, elementwise decay multiplies not counted):
//  recurrent, per token: 4 D^2 (S += k^T v and o = q S: one multiply-add per state
//    element each; the kernel also multiplies each element by the decay).
//  blocked, per block of m tokens: 2 m D^2 (q S) + 2 m D^2 (state += k^T v) + 2 D m(m+1)/2
//    (q k^T, lower triangle with the diagonal) + 2 D m(m+1)/2 (scores times v): per token
//    4 D^2 + 2 D (m+1). (The dense products transformers computes would be 4 D^2 + 4 D m.)
// Cases:
//  recurrent n = 1, the state resident in cache (the same head again and again);
//  recurrent n = 1 over many heads' states (64 MiB), as a decode step reads them: memory;
//  recurrent over n = 4096 tokens (one pass over the state per token);
//  blocked over n = 4096 tokens with blocks of 256 (the model's), and 64 / 128;
//  blocked, block 256, two heads on the two threads of a pool (wall time).
// The peak is measured (FmaBurst, one thread); in theory it is 2 FMA units x 8 lanes x
// 2 FLOPs x clock per core with AVX2 (x 16 lanes with AVX-512).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "base/thread_pool.h"
#include "kernels/lightning.h"
#include "kernels/probe.h"

namespace {

// Time is this thread's CPU time, not wall time: on a shared machine (this project's
// 2-vCPU VM runs builds beside it) the thread being descheduled would otherwise count.
// (Caches and memory bandwidth are still shared.)
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
};

double Seconds(double a) { return Clock::now() - a; }

// Best seconds per call of fn over `reps` timings of batches of >= 20 ms (the clock is
// read once per batch: reading a thread's CPU time is a system call).
template <class Fn>
double Best(int reps, const Fn& fn) {
  int64_t calls = 1;
  for (;;) {
    const double t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) fn();
    if (Seconds(t0) >= 0.02) break;
    calls *= 2;
  }
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    const double t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) fn();
    best = std::min(best, Seconds(t0) / static_cast<double>(calls));
  }
  return best;
}

}  // namespace

int main() {
  if (const m2::Status st = m2::CheckKernelsEnv(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  const int64_t D = 128, n = 4096;
  const float slope = 0.01f;
  m2::ThreadPool::SetGlobalThreads(1);
  double peak = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    const double flops = m2::FmaBurst(20'000'000);
    peak = std::max(peak, flops / Seconds(t0));
  }
  std::printf("one thread, %s kernels, D %lld; fp32 FMA peak of one core (measured) %.1f GFLOP/s\n",
              m2::ActiveKernelsName(), static_cast<long long>(D), peak / 1e9);

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.3f, 1.0f);
  // q, k, v of each token side by side ([q|k|v], stride 3D), as a fused projection gives them.
  std::vector<float> qkv(static_cast<size_t>(n * 3 * D)), out(static_cast<size_t>(n * D));
  for (auto& f : qkv) f = u(rng);
  const float *q = qkv.data(), *k = q + D, *v = q + 2 * D;
  const int64_t stride = 3 * D;
  std::vector<float> state(static_cast<size_t>(D * D), 0.0f);

  std::printf("%-34s %12s %10s %8s %10s\n", "case", "us/token", "GFLOP/s", "of peak", "state GB/s");
  const auto row = [&](const char* name, double sec_per_token, double flops_per_token, double state_bytes) {
    const double gflops = flops_per_token / sec_per_token / 1e9;
    std::printf("%-34s %12.3f %10.1f %7.0f%%", name, sec_per_token * 1e6, gflops, 100.0 * gflops * 1e9 / peak);
    if (state_bytes > 0) std::printf(" %10.1f", state_bytes / sec_per_token / 1e9);
    std::printf("\n");
  };
  const double rec_flops = 4.0 * D * D, state_rw = 2.0 * 4 * D * D;  // read + write of the state

  // Recurrent, n = 1, one state again and again (64 KiB: in L2).
  {
    int64_t t = 0;
    const double sec = Best(7, [&] {
      m2::LightningRecurrent(q + t * stride, k + t * stride, v + t * stride, stride, 1, D, slope, state.data(),
                             out.data(), D);
      t = (t + 1) % n;
    });
    row("recurrent n=1, state in cache", sec, rec_flops, state_rw);
  }
  // Recurrent, n = 1, a different head's state each call (64 MiB of states: from memory).
  {
    const int64_t heads = (64 << 20) / (D * D * 4);
    std::vector<float> states(static_cast<size_t>(heads * D * D), 0.0f);
    int64_t h = 0;
    const double sec = Best(5, [&] {
      m2::LightningRecurrent(q, k, v, stride, 1, D, slope, states.data() + h * D * D, out.data(), D);
      h = (h + 1) % heads;
    });
    row("recurrent n=1, 64 MiB of states", sec, rec_flops, state_rw);
    std::vector<float> buf(static_cast<size_t>(64 << 18), 1.0f);
    const double read = 4.0 * static_cast<double>(buf.size()) / Best(3, [&] {
                          volatile double s = m2::ReadAll(buf.data(), static_cast<int64_t>(buf.size()), true);
                          (void)s;
                        });
    std::vector<float> small(static_cast<size_t>(D * D), 1.0f);
    const double read_l2 = 4.0 * static_cast<double>(small.size()) / Best(3, [&] {
                             volatile double s = m2::ReadAll(small.data(), static_cast<int64_t>(small.size()));
                             (void)s;
                           });
    std::printf("  (plain read, one thread: %.1f GB/s of 64 MiB, %.1f GB/s of 64 KiB)\n", read / 1e9, read_l2 / 1e9);
  }
  // Recurrent over the whole prompt.
  {
    const double sec =
        Best(3, [&] { m2::LightningRecurrent(q, k, v, stride, n, D, slope, state.data(), out.data(), D); });
    row("recurrent n=4096", sec / n, rec_flops, state_rw);
  }
  // Blocked over the whole prompt.
  for (int64_t block : {256, 128, 64}) {
    std::vector<float> scratch(static_cast<size_t>(m2::LightningScratchFloats(D, block)));
    const double sec = Best(5, [&] {
      m2::LightningBlocked(q, k, v, stride, n, D, slope, block, state.data(), out.data(), D, scratch.data());
    });
    char name[64];
    std::snprintf(name, sizeof(name), "blocked n=4096, block %lld", static_cast<long long>(block));
    row(name, sec / n, 4.0 * D * D + 2.0 * D * static_cast<double>(block + 1), 0);
  }
  // Both cores: two heads (interleaved per token, as the model's projection lays them
  // out) on two threads, wall time; us per token per head, GFLOP/s of both cores
  // against twice the one-core peak.
  {
    const int64_t block = 256, heads = 2, hstride = heads * 3 * D;
    std::vector<float> qkv2(static_cast<size_t>(n * hstride));
    for (auto& f : qkv2) f = u(rng);
    std::vector<float> states(static_cast<size_t>(heads * D * D), 0.0f), outs(static_cast<size_t>(n * heads * D));
    const int64_t sf = m2::LightningScratchFloats(D, block);
    std::vector<float> scratch(static_cast<size_t>(heads * sf));
    m2::ThreadPool pool(2);
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.ParallelFor(heads, 1, [&](int64_t h0, int64_t h1, int th) {
        for (int64_t h = h0; h < h1; ++h) {
          const float* qh = qkv2.data() + h * 3 * D;
          m2::LightningBlocked(qh, qh + D, qh + 2 * D, hstride, n, D, slope, block, states.data() + h * D * D,
                               outs.data() + h * D, heads * D, scratch.data() + th * sf);
        }
      });
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double per = best / static_cast<double>(n * heads);
    const double gflops = (4.0 * D * D + 2.0 * D * (block + 1)) / per / 1e9;
    std::printf("%-34s %12.3f %10.1f %7.0f%%  (wall time, of 2 x peak)\n", "blocked 256, 2 heads on 2 threads",
                per * 1e6, gflops, 100.0 * gflops * 1e9 / (2 * peak));
  }
  return 0;
}
