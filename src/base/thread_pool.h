// A persistent pool of worker threads for the forward pass. ParallelFor splits an index
// range into one contiguous chunk per thread (the caller's thread takes chunk 0), so a
// kernel sees each weight row exactly once and no work is queued or allocated per call.
//
// Hand-off: a decode step makes ~120 calls, a prefill thousands, with little serial work
// between them. Waking a sleeping thread through a condition variable took 70-120 us per
// call on this project's 2-vCPU VM (the idle vCPU halts and must be re-entered), about 9%
// of a decode step. So workers, and the caller waiting for them, spin on atomics for
// kSpinMicros after each job before falling back to the condition variables; a pool
// that stays idle longer costs nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace m2 {

class ThreadPool {
 public:
  // `threads` counts the calling thread; 0 means one per available core.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end, thread) over [0, n) in size() chunks aligned to `grain`; returns when
  // all are done. Not re-entrant: fn must not call ParallelFor on the same pool. Any
  // callable: it is passed by address, never copied into a std::function (whose storage
  // would be a heap allocation per call for most lambdas).
  template <class Fn>
  void ParallelFor(int64_t n, int64_t grain, const Fn& fn) {
    Run(n, grain, [](const void* f, int64_t b, int64_t e, int t) { (*static_cast<const Fn*>(f))(b, e, t); }, &fn);
  }

  // The process-wide pool used by the kernels (sized by SetGlobalThreads or the cores).
  static ThreadPool& Global();
  static void SetGlobalThreads(int threads);

 private:
  using Trampoline = void (*)(const void* fn, int64_t begin, int64_t end, int thread);
  void Run(int64_t n, int64_t grain, Trampoline call, const void* fn);
  void WorkerLoop(int index);
  static constexpr uint64_t kStopGeneration = ~uint64_t{0};
  static constexpr int kSpinMicros = 500;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  // The job: written by the caller before generation_ is bumped (release), read by the
  // workers after they see the new generation (acquire).
  Trampoline call_ = nullptr;
  const void* job_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  int sleeping_workers_ = 0;    // guarded by mu_
  bool caller_sleeping_ = false;  // guarded by mu_
  bool stop_ = false;             // guarded by mu_
};

// Cores this process may run on.
int AvailableCores();

}  // namespace m2
