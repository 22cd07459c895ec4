// ThreadPool: every index is visited exactly once, by chunks aligned to the grain, both
// while the workers are still spinning after the previous job and after they have gone
// to sleep; the pool shuts down cleanly in either state.
#include "base/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace m2 {
namespace {

void ExpectEachIndexOnce(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::atomic<int> bad_chunks{0};
  pool.ParallelFor(n, grain, [&](int64_t b, int64_t e, int thread) {
    if (b % grain != 0 || thread < 0 || thread >= pool.size()) ++bad_chunks;
    for (int64_t i = b; i < e; ++i) ++seen[static_cast<size_t>(i)];
  });
  EXPECT_EQ(bad_chunks.load(), 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, BackToBackJobsWhileWorkersSpin) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 2000; ++rep) ExpectEachIndexOnce(pool, 1 + rep % 97, 1 + rep % 5);
}

TEST(ThreadPool, JobsAfterTheWorkersWentToSleep) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // well past the spin time
    ExpectEachIndexOnce(pool, 1000, 16);
  }
}

TEST(ThreadPool, CallerWaitsForASlowWorker) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  pool.ParallelFor(2, 1, [&](int64_t, int64_t, int thread) {
    if (thread == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the caller's spin
    ++done;
  });
  EXPECT_EQ(done.load(), 2);
}

TEST(ThreadPool, DestroyedWhileSpinningOrSleeping) {
  for (int wait_ms : {0, 5}) {
    ThreadPool pool(4);
    ExpectEachIndexOnce(pool, 64, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }  // the destructor joins every worker (a hang here fails by timeout)
}

TEST(ThreadPool, OneThreadRunsOnTheCaller) {
  ThreadPool pool(1);
  const auto caller = std::this_thread::get_id();
  bool same = false;
  pool.ParallelFor(10, 1, [&](int64_t b, int64_t e, int) { same = std::this_thread::get_id() == caller && b == 0 && e == 10; });
  EXPECT_TRUE(same);
}

}  // namespace
}  // namespace m2
