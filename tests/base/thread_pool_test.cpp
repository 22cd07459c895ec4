// ThreadPool: every index is visited exactly once, in chunks aligned to the grain whose
// boundaries do not depend on which thread runs them; `thread` is a stable slot (a thread
// never runs two chunks at once, and two threads never share a slot); the caller does not
// wait for a worker that has not started; all of it also while other threads compete for
// the cores; the pool shuts down cleanly while its workers spin or sleep.
#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace m2 {
namespace {

using Chunks = std::vector<std::pair<int64_t, int64_t>>;

// Runs one ParallelFor and checks each index once, grain-aligned chunks, valid slots, one
// OS thread per slot and no slot running two chunks at once. Returns the chunks, sorted.
Chunks ExpectEachIndexOnce(ThreadPool& pool, int64_t n, int64_t grain, int chunks_per_thread = ThreadPool::kChunksPerThread,
                           ThreadPool::Order order = ThreadPool::Order::kInOrder) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::vector<std::atomic<int>> busy(static_cast<size_t>(pool.size()));
  std::atomic<int> bad_chunks{0}, bad_slots{0}, overlapping{0};
  std::mutex mu;
  Chunks chunks;
  std::map<int, std::set<std::thread::id>> ids_by_slot;
  pool.ParallelForChunks(n, grain, chunks_per_thread, [&](int64_t b, int64_t e, int thread) {
    if (b % grain != 0 || b >= e || e > n || (e != n && e % grain != 0)) ++bad_chunks;
    if (thread < 0 || thread >= pool.size()) {
      ++bad_slots;
      return;
    }
    if (busy[static_cast<size_t>(thread)].fetch_add(1) != 0) ++overlapping;
    for (int64_t i = b; i < e; ++i) ++seen[static_cast<size_t>(i)];
    {
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(b, e);
      ids_by_slot[thread].insert(std::this_thread::get_id());
    }
    busy[static_cast<size_t>(thread)].fetch_sub(1);
  }, order);
  EXPECT_EQ(bad_chunks.load(), 0);
  EXPECT_EQ(bad_slots.load(), 0);
  EXPECT_EQ(overlapping.load(), 0) << "a slot ran two chunks at once";
  for (const auto& [slot, ids] : ids_by_slot) EXPECT_EQ(ids.size(), 1u) << "slot " << slot << " ran on several threads";
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
    if (seen[static_cast<size_t>(i)].load() != 1) break;
  }
  std::sort(chunks.begin(), chunks.end());
  return chunks;
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

// The chunk boundaries depend on n, grain and the pool size only, so a kernel's result
// cannot depend on which thread took which chunk.
TEST(ThreadPool, ChunkBoundariesDoNotDependOnTheSchedule) {
  ThreadPool pool(3);
  for (int64_t n : {1, 7, 100, 1000, 12345}) {
    const Chunks first = ExpectEachIndexOnce(pool, n, 8);
    EXPECT_LE(first.size(), static_cast<size_t>(3 * ThreadPool::kChunksPerThread));
    for (int rep = 0; rep < 20; ++rep) {
      if (rep % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      EXPECT_EQ(ExpectEachIndexOnce(pool, n, 8), first) << "n " << n;
    }
  }
}

// ParallelForChunks: as many chunks as asked (clamped to 1..kMaxChunksPerThread per
// thread), each index still once, the boundaries again fixed.
TEST(ThreadPool, ChunksPerThreadAsAsked) {
  ThreadPool pool(2);
  const int64_t n = 16 * 2 * ThreadPool::kMaxChunksPerThread * 10;  // grains divide evenly at every count below
  for (int cpt : {1, 4, 16, 64, ThreadPool::kMaxChunksPerThread, 100000, 0, -3}) {
    const int expect = 2 * std::clamp(cpt, 1, ThreadPool::kMaxChunksPerThread);
    const Chunks first = ExpectEachIndexOnce(pool, n, 16, cpt);
    EXPECT_EQ(first.size(), static_cast<size_t>(expect)) << "chunks per thread " << cpt;
    for (int rep = 0; rep < 5; ++rep) EXPECT_EQ(ExpectEachIndexOnce(pool, n, 16, cpt), first) << "chunks per thread " << cpt;
  }
  // Fewer grains than chunks asked: one chunk per grain.
  EXPECT_EQ(ExpectEachIndexOnce(pool, 100, 16, 64).size(), 7u);
}

// kSpread: the claims' chunks, written out for small cases (runs of consecutive chunks,
// longer runs first, each run's j-th chunk before any run's (j+1)-th), and a bijection on
// [0, chunks) for every count and number of parts up to 40.
TEST(ThreadPool, SpreadChunkOrder) {
  const auto order = [](int64_t chunks, int64_t parts) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < chunks; ++i) v.push_back(ThreadPool::SpreadChunk(i, chunks, parts));
    return v;
  };
  EXPECT_EQ(order(8, 2), (std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(order(7, 2), (std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3}));
  EXPECT_EQ(order(7, 3), (std::vector<int64_t>{0, 3, 5, 1, 4, 6, 2}));  // runs [0,3) [3,5) [5,7)
  EXPECT_EQ(order(10, 4), (std::vector<int64_t>{0, 3, 6, 8, 1, 4, 7, 9, 2, 5}));
  EXPECT_EQ(order(3, 5), (std::vector<int64_t>{0, 1, 2}));  // more parts than chunks
  EXPECT_EQ(order(5, 1), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  for (int64_t chunks = 1; chunks <= 40; ++chunks) {
    for (int64_t parts = 1; parts <= 40; ++parts) {
      std::vector<int> hits(static_cast<size_t>(chunks));
      for (int64_t i = 0; i < chunks; ++i) {
        const int64_t c = ThreadPool::SpreadChunk(i, chunks, parts);
        ASSERT_TRUE(c >= 0 && c < chunks) << chunks << " chunks, " << parts << " parts, claim " << i << " -> " << c;
        ++hits[static_cast<size_t>(c)];
      }
      for (int64_t c = 0; c < chunks; ++c) EXPECT_EQ(hits[static_cast<size_t>(c)], 1) << chunks << " chunks, " << parts << " parts";
    }
  }
}

// A kSpread job runs each index once, in the same chunks as kInOrder.
TEST(ThreadPool, SpreadJobsKeepTheChunks) {
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 17, 100, 1000, 12345}) {
      for (int cpt : {1, 4, 64}) {
        const Chunks in_order = ExpectEachIndexOnce(pool, n, 16, cpt);
        for (int rep = 0; rep < 3; ++rep)
          EXPECT_EQ(ExpectEachIndexOnce(pool, n, 16, cpt, ThreadPool::Order::kSpread), in_order)
              << threads << " threads, n " << n << ", chunks per thread " << cpt;
      }
    }
  }
}

// A chunk that takes long (its thread lost its core, say) is waited for; the other
// chunks are taken by the other threads meanwhile.
TEST(ThreadPool, CallerWaitsForASlowChunk) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  pool.ParallelFor(8, 1, [&](int64_t b, int64_t e, int) {
    if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the caller's spin
    done += static_cast<int>(e - b);
  });
  EXPECT_EQ(done.load(), 8);
}

// Jobs that arrive while every worker is asleep finish (the caller takes chunks from the
// start instead of waiting for the workers to wake up; which threads end up running them
// is up to the scheduler, so only completion is checked here).
TEST(ThreadPool, JobsWhileTheWorkersSleep) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 3; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers asleep
    std::atomic<int> total{0};
    pool.ParallelFor(64, 1, [&](int64_t b, int64_t e, int) { total += static_cast<int>(e - b); });
    EXPECT_EQ(total.load(), 64);
  }
}

// Every index once and stable slots while more threads than cores are busy spinning.
TEST(ThreadPool, EachIndexOnceUnderContention) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  const int hog_count = std::max(2, AvailableCores());
  for (int i = 0; i < hog_count; ++i)
    hogs.emplace_back([&] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  {
    ThreadPool pool(3);
    for (int rep = 0; rep < 300; ++rep) ExpectEachIndexOnce(pool, 50 + rep % 300, 1 + rep % 7);
    // Per-thread scratch indexed by slot, as the MoE keeps it: each slot's sum is private.
    std::vector<int64_t> per_slot(static_cast<size_t>(pool.size()), 0);
    for (int rep = 0; rep < 200; ++rep)
      pool.ParallelFor(1000, 10, [&](int64_t b, int64_t e, int t) {
        for (int64_t i = b; i < e; ++i) per_slot[static_cast<size_t>(t)] += i;
      });
    int64_t sum = 0;
    for (int64_t v : per_slot) sum += v;
    EXPECT_EQ(sum, 200 * (999 * 1000 / 2));
  }
  stop = true;
  for (auto& t : hogs) t.join();
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

TEST(ThreadPool, TwoPoolsFromTwoThreads) {
  ThreadPool a(2), b(2);
  std::thread other([&] {
    for (int rep = 0; rep < 300; ++rep) ExpectEachIndexOnce(b, 100 + rep, 3);
  });
  for (int rep = 0; rep < 300; ++rep) ExpectEachIndexOnce(a, 100 + rep, 3);
  other.join();
}

}  // namespace
}  // namespace m2
