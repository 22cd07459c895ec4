#include "base/thread_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <memory>
#include <mutex>

#include "base/check.h"

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

// The futex word is the atomic's own storage (std::atomic<uint32_t> is a plain 32-bit
// word on Linux; checked below).
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
void FutexWait(std::atomic<uint32_t>& word, uint32_t expected) {
  // Returns at once if the word no longer holds `expected` (EAGAIN); callers re-check.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void FutexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

using Clock = std::chrono::steady_clock;

// Ticket fields (thread_pool.h).
constexpr int kIndexBits = 20, kGenShift = 40;
constexpr uint64_t kFieldMask = (uint64_t{1} << kIndexBits) - 1;
constexpr uint64_t kGenMask = (uint64_t{1} << 24) - 1;
uint64_t Gen(uint64_t t) { return (t >> kGenShift) & kGenMask; }
uint64_t Count(uint64_t t) { return (t >> kIndexBits) & kFieldMask; }
uint64_t Index(uint64_t t) { return t & kFieldMask; }

// Spinning. A worker spins at most kMaxSpinMicros for the next job (adapted down to
// kMinSpinMicros, see WorkerLoop); after kPauseOnlyMicros of a spin, worker or caller,
// each round also yields the core to any other runnable thread on it (sched_yield
// returns at once when there is none).
constexpr int kMaxSpinMicros = 500, kMinSpinMicros = 10, kPauseOnlyMicros = 20;
// A caller waiting for chunks that other threads are running spins this long (yielding
// after kPauseOnlyMicros), then sleeps until the last one ends.
constexpr int kCallerSpinMicros = 2000;
// A worker that finds this many jobs in a row already fully taken halves its spin.
constexpr int kMissesBeforeBackoff = 4;

// Calls done() until it holds or `micros` pass; false if it never held.
template <class Done>
bool SpinUntil(int micros, const Done& done) {
  if (done()) return true;
  const auto start = Clock::now();
  const auto pause_only = start + std::chrono::microseconds(kPauseOnlyMicros);
  const auto limit = start + std::chrono::microseconds(micros);
  for (;;) {
    for (int k = 0; k < 64; ++k) {
      if (done()) return true;
      Pause();
    }
    const auto now = Clock::now();
    if (now > limit) return done();
    if (now > pause_only) sched_yield();
  }
}

std::unique_ptr<ThreadPool>& GlobalSlot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex g_global_mu;
}  // namespace

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = AvailableCores();
  M2_CHECK(threads <= 4096, "ThreadPool: at most 4096 threads");  // keeps the ticket's fields apart
  // Workers take no signals: they are created with every signal blocked (a new thread
  // inherits its creator's mask), so a process's SIGINT / SIGTERM handling (m2 serve's
  // signal thread, chat's Ctrl-C) is not bypassed by a worker that happens to get one.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  FutexWakeAll(wake_);
  for (auto& t : workers_) t.join();
}

uint64_t ThreadPool::RunChunks(int thread, int* ran) {
  for (;;) {
    const uint64_t t = ticket_.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t i = Index(t);
    if (i >= Count(t)) return t;
    // A successful claim: the job's fields are those published with this ticket, and
    // stay valid until this chunk is counted off below.
    const int64_t c = spread_ ? SpreadChunk(static_cast<int64_t>(i), static_cast<int64_t>(Count(t)), size())
                              : static_cast<int64_t>(i);
    const int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
    call_(job_, b, e, thread);
    ++*ran;
    if (remaining_.fetch_sub(1) == 1 && caller_sleeping_.load() != 0) FutexWakeAll(remaining_);
  }
}

void ThreadPool::WaitForChunks() {
  const auto done = [this] { return remaining_.load(std::memory_order_acquire) == 0; };
  if (SpinUntil(kCallerSpinMicros, done)) return;
  caller_sleeping_.store(1);
  for (uint32_t r; (r = remaining_.load()) != 0;) FutexWait(remaining_, r);
  caller_sleeping_.store(0);
}

int64_t ThreadPool::SpreadChunk(int64_t i, int64_t chunks, int64_t parts) {
  parts = std::clamp<int64_t>(parts, 1, std::max<int64_t>(chunks, 1));
  const int64_t longest = (chunks + parts - 1) / parts;    // runs of `longest` chunks,
  const int64_t long_runs = chunks - parts * (longest - 1);  // the first long_runs of them; the rest one shorter
  // The first longest - 1 rounds take a chunk from every run; the last round only from the long ones.
  const int64_t full = parts * (longest - 1);
  const int64_t run = i < full ? i % parts : i - full, j = i < full ? i / parts : longest - 1;
  const int64_t start = run < long_runs ? run * longest : long_runs * longest + (run - long_runs) * (longest - 1);
  return start + j;
}

void ThreadPool::Run(int64_t n, int64_t grain, int chunks_per_thread, Trampoline call, const void* fn, Order order) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (n + grain - 1) / grain;
  const int threads = size();
  if (threads == 1 || units == 1) {
    call(fn, 0, n, 0);
    return;
  }
  const int64_t cpt = std::clamp<int64_t>(chunks_per_thread, 1, kMaxChunksPerThread);
  const int64_t per = (units + threads * cpt - 1) / (threads * cpt);
  const int64_t chunks = (units + per - 1) / per;  // <= 128 * 4096: fits the ticket's 20-bit fields
  call_ = call;
  job_ = fn;
  n_ = n;
  chunk_ = per * grain;
  spread_ = order == Order::kSpread;
  remaining_.store(static_cast<uint32_t>(chunks), std::memory_order_relaxed);
  const uint64_t gen = (Gen(ticket_.load(std::memory_order_relaxed)) + 1) & kGenMask;
  ticket_.store(gen << kGenShift | static_cast<uint64_t>(chunks) << kIndexBits);  // seq_cst: see WorkerLoop
  if (sleepers_.load() > 0 && sleepers_.exchange(0) > 0) {
    wake_.fetch_add(1);
    FutexWakeAll(wake_);
  }
  int ran = 0;
  RunChunks(0, &ran);
  WaitForChunks();
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;  // generation of the last job this worker took part in
  int spin_micros = kMaxSpinMicros, misses = 0;
  for (;;) {
    const auto new_job = [&] { return Gen(ticket_.load(std::memory_order_acquire)) != seen || stop_.load(std::memory_order_relaxed); };
    if (!SpinUntil(spin_micros, new_job)) {
      // Sleep. Either the caller's seq_cst ticket store comes first in the total order
      // (and the load below sees the new job), or its read of sleepers_ comes after our
      // increment (and it bumps wake_ after our read of it, so the futex wait returns).
      const uint32_t w = wake_.load();
      sleepers_.fetch_add(1);
      if (Gen(ticket_.load()) == seen && !stop_.load()) FutexWait(wake_, w);
      continue;
    }
    if (stop_.load()) return;
    int ran = 0;
    seen = Gen(RunChunks(index, &ran));
    // Back off when spinning does not pay: jobs keep being over by the time this worker
    // looks (its core is busy elsewhere), so spin for less and sleep sooner. Running a
    // chunk earns the spin back.
    if (ran > 0) {
      misses = 0;
      spin_micros = std::min(kMaxSpinMicros, spin_micros * 2);
    } else if (++misses >= kMissesBeforeBackoff) {
      misses = 0;
      spin_micros = std::max(kMinSpinMicros, spin_micros / 2);
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
