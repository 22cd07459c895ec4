#include "base/thread_pool.h"

#include <sched.h>

#include <chrono>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace m2 {

namespace {
inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

std::unique_ptr<ThreadPool>& GlobalSlot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex g_global_mu;

// Chunk `i` of `parts` over [0, n), boundaries rounded to `grain`.
std::pair<int64_t, int64_t> Chunk(int64_t n, int64_t grain, int i, int parts) {
  const int64_t units = (n + grain - 1) / grain;
  const int64_t b = units * i / parts * grain, e = units * (i + 1) / parts * grain;
  return {std::min(b, n), std::min(e, n)};
}
// Calls done() until it holds or `micros` pass; false if it never held.
template <class Done>
bool SpinUntil(int micros, const Done& done) {
  if (done()) return true;
  const auto limit = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (int i = 1;; ++i) {
    for (int k = 0; k < 16; ++k) {
      if (done()) return true;
      Pause();
    }
    if (i % 8 == 0 && std::chrono::steady_clock::now() > limit) return done();
  }
}
}  // namespace

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = AvailableCores();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.store(kStopGeneration, std::memory_order_release);  // ends the spinners too
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(int64_t n, int64_t grain, Trampoline call, const void* fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int parts = size();
  if (parts == 1 || n <= grain) {
    call(fn, 0, n, 0);
    return;
  }
  call_ = call;
  job_ = fn;
  n_ = n;
  grain_ = grain;
  pending_.store(parts - 1, std::memory_order_relaxed);
  bool wake = false;
  {
    // Under the lock, so a worker that is about to sleep either sees the new generation
    // or is counted in sleeping_workers_ and gets the notification.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
    wake = sleeping_workers_ > 0;
  }
  if (wake) start_cv_.notify_all();
  const auto [b, e] = Chunk(n, grain, 0, parts);
  if (b < e) call(fn, b, e, 0);
  if (!SpinUntil(kSpinMicros, [this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_ = true;
    done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    caller_sleeping_ = false;
  }
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    if (!SpinUntil(kSpinMicros, [&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleeping_workers_;
      start_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      --sleeping_workers_;
      if (stop_) return;
    }
    seen = generation_.load(std::memory_order_acquire);
    if (seen == kStopGeneration) return;
    const auto [b, e] = Chunk(n_, grain_, index, size());
    if (b < e) call_(job_, b, e, index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      if (caller_sleeping_) done_cv_.notify_one();
    }
  }
}

ThreadPool& ThreadPool::Global() {
  std::lock_guard<std::mutex> lock(g_global_mu);
  auto& slot = GlobalSlot();
  if (!slot) slot = std::make_unique<ThreadPool>(0);
  return *slot;
}

void ThreadPool::SetGlobalThreads(int threads) {
  std::lock_guard<std::mutex> lock(g_global_mu);
  GlobalSlot() = std::make_unique<ThreadPool>(threads);
}

}  // namespace m2
