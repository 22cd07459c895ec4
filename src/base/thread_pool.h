// A persistent pool of worker threads for the forward pass. Nothing in the model reaches
// a pool by itself: a Model is handed one (model.h, LoadOptions), and the kernels get it
// as an argument. ThreadPool::Global() remains for code outside the model's forward pass
// (the one-argument-less Linear() overload that tests and gemv_bench call).
//
// Work distribution. ParallelFor cuts [0, n) into chunks aligned to `grain` (about
// kChunksPerThread per thread, or as many as ParallelForChunks asks; fixed by n, grain,
// that count and size() alone) and the threads take
// chunks one at a time from an atomic counter; the caller's thread takes chunks too. So a
// thread whose core is busy with another process takes fewer chunks and the others take
// the rest, and a worker that has not woken up by the time every chunk is taken does not
// delay the caller at all: ParallelFor returns when every chunk has been RUN, not when
// every worker has looked in. Only a chunk already started by a thread that then loses
// its core is waited for.
//
// Hand-off: a decode step makes ~120 calls, a prefill thousands, with little serial work
// between them. Waking a sleeping thread took 70-120 us per call on this project's
// 2-vCPU VM, about 9% of a decode step, so workers spin on the job counter for a while
// after each job before they sleep (futex). The spin backs off when it does not pay: a
// worker whose spins keep ending without a job, or whose wake-ups keep finding every
// chunk already taken (its core is shared), spins for less and yields its core while it
// spins, down to sleeping almost at once. A caller waiting for a chunk that another
// thread is running spins briefly, then yields its core, then sleeps.
//
// Determinism: which thread runs which chunk varies from call to call, but the chunk
// boundaries do not (they depend on n, grain, the chunk count asked for and size()
// only), and `thread` (the third argument of fn) is the index of the thread running it:
// 0 for the caller, 1..size()-1 for the workers. A thread may run several chunks of one call, one after another, never
// two at once, so per-thread scratch indexed by `thread` is safe.
#pragma once

#include <atomic>
#include <cstdint>
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

  // fn(begin, end, thread) over [0, n) in chunks aligned to `grain` (each index exactly
  // once); returns when all are done. Not re-entrant: fn must not call ParallelFor on the
  // same pool, and one pool serves one calling thread at a time. Any callable: it is
  // passed by address, never copied into a std::function (whose storage would be a heap
  // allocation per call for most lambdas).
  template <class Fn>
  void ParallelFor(int64_t n, int64_t grain, const Fn& fn) {
    Run(n, grain, kChunksPerThread, [](const void* f, int64_t b, int64_t e, int t) { (*static_cast<const Fn*>(f))(b, e, t); }, &fn,
        Order::kInOrder);
  }
  // As ParallelFor, with up to chunks_per_thread chunks per thread instead of
  // kChunksPerThread (clamped to 1..kMaxChunksPerThread). For long jobs whose end must not
  // wait on one big chunk: a decode step's output matrix, 650 MB on the M2 slice, was cut
  // into 8 chunks of 80 MB, and a thread that finished first idled for 9-11% of the
  // product's time in the minutes the memory is fast (linear.cpp, DecodeChunksPerThread).
  //
  // `order` says which chunk each claim gets. kInOrder: chunk 0, 1, 2, ... so threads
  // running side by side read neighbouring chunks. kSpread: the chunks are cut into one
  // run of consecutive chunks per thread and the claims go to the runs in turn (run 0's
  // first chunk, run 1's first, ..., run 0's second, ...), so threads running side by side
  // read far apart, each mostly along a run of its own (SpreadChunk). The chunk boundaries
  // are the same either way.
  enum class Order { kInOrder, kSpread };
  template <class Fn>
  void ParallelForChunks(int64_t n, int64_t grain, int chunks_per_thread, const Fn& fn, Order order = Order::kInOrder) {
    Run(n, grain, chunks_per_thread, [](const void* f, int64_t b, int64_t e, int t) { (*static_cast<const Fn*>(f))(b, e, t); }, &fn,
        order);
  }
  // The chunk that claim `i` (0 <= i < chunks) gets in a kSpread job of `parts` runs: the
  // runs are consecutive, their lengths differ by at most one (longer ones first), and
  // claims take each run's j-th chunk before any run's (j+1)-th. A bijection on [0, chunks).
  static int64_t SpreadChunk(int64_t i, int64_t chunks, int64_t parts);
  static constexpr int kMaxChunksPerThread = 128;  // 128 x 4096 threads fits the ticket

  // Chunks a ParallelFor is cut into: about min(ceil(n / grain), size() * kChunksPerThread).
  static constexpr int kChunksPerThread = 4;

  // A process-wide pool for code outside the model's forward pass (sized by
  // SetGlobalThreads or the cores). The model never uses it.
  static ThreadPool& Global();
  static void SetGlobalThreads(int threads);

 private:
  using Trampoline = void (*)(const void* fn, int64_t begin, int64_t end, int thread);
  void Run(int64_t n, int64_t grain, int chunks_per_thread, Trampoline call, const void* fn, Order order = Order::kInOrder);
  void WorkerLoop(int index);
  // Takes chunks of the current job and runs them until a claim comes back empty.
  // Returns the ticket of that empty claim (its generation is the job now current) and
  // adds the chunks run to *ran.
  uint64_t RunChunks(int thread, int* ran);
  void WaitForChunks();

  std::vector<std::thread> workers_;
  // The job, written by the caller before it publishes the ticket (release) and read by a
  // thread only after a successful claim (acquire): a claimed chunk keeps its job alive.
  Trampoline call_ = nullptr;
  const void* job_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  bool spread_ = false;
  // Ticket: generation (high 24 bits) | chunks in the job (20 bits) | next chunk (low 20
  // bits). fetch_add(1) claims a chunk of whatever job is current; a claim at or past the
  // chunk count is empty. Each thread makes at most one empty claim per job it sees, so the
  // next-chunk field never overflows into the count.
  std::atomic<uint64_t> ticket_{0};
  // Chunks of the current job not yet finished; the caller returns at 0.
  alignas(64) std::atomic<uint32_t> remaining_{0};
  std::atomic<uint32_t> caller_sleeping_{0};
  // Sleeping workers wait on wake_ (a futex word the caller bumps). sleepers_ counts
  // workers that went to sleep since the last wake-up; the caller takes it to 0 when it
  // wakes them, so one wake-up per sleep, not one per call.
  alignas(64) std::atomic<uint32_t> wake_{0};
  std::atomic<int32_t> sleepers_{0};
  std::atomic<bool> stop_{false};
};

// Cores this process may run on.
int AvailableCores();

}  // namespace m2
