#include "base/thread_pool.h"

#include <sched.h>

#include <memory>

namespace m2 {

namespace {
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = call;
    job_ = fn;
    n_ = n;
    grain_ = grain;
    pending_ = parts - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  const auto [b, e] = Chunk(n, grain, 0, parts);
  if (b < e) call(fn, b, e, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    Trampoline call;
    const void* job;
    int64_t n, grain;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      call = call_;
      job = job_;
      n = n_;
      grain = grain_;
    }
    const auto [b, e] = Chunk(n, grain, index, size());
    if (b < e) call(job, b, e, index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
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
