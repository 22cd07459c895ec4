// The forward pass gives bit-identical logits on any number of threads: rows split over
// threads are computed by the same instructions, the MoE's expert-parallel and row-split
// paths produce the same expert outputs, and each token sums its experts in
// expert-index order. 1100 tokens also cross the MoE's 1024-token chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "model/layers.h"
#include "model/model.h"

namespace m2 {
namespace {

std::vector<float> PrefillLogits(Model& m, int threads, int64_t tokens) {
  ThreadPool threads_pool(threads);
  m.SetPool(&threads_pool);
  KvBlockPool pool(m.cache_layout());
  SequenceCache cache(&pool);
  SequenceCache* caches[] = {&cache};
  ForwardBatch b;
  for (int64_t i = 0; i < tokens; ++i) b.Add(static_cast<int32_t>((i * 7919) % 5000 + 3), 0, i % 97 == 0 || i + 1 == tokens);
  std::vector<float> logits;
  const Status st = m.Forward(b, caches, logits);
  EXPECT_TRUE(st.ok()) << st.message();
  m.SetPool(nullptr);
  return logits;
}

TEST(Threads, LogitsDoNotDependOnTheThreadCount) {
  auto model = Model::Load("models/m2-tiny", {.progress = false});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const int64_t n = kMoeChunkTokens + 76;
  const std::vector<float> one = PrefillLogits(**model, 1, n);
  ASSERT_FALSE(one.empty());
  // 2 and 3 threads: 16 experts with tokens -> whole experts per thread; 5: rows split.
  // A sanitizer build (~5x slower) runs one of each kind.
  const bool sanitized = std::getenv("M2_SANITIZED") != nullptr;
  for (int threads : sanitized ? std::vector<int>{2, 5} : std::vector<int>{2, 3, 5}) {
    const std::vector<float> many = PrefillLogits(**model, threads, n);
    ASSERT_EQ(many.size(), one.size());
    EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)), 0) << threads << " threads";
  }
}

// The same while other threads compete for the cores: chunks go to whichever thread is
// free, and the logits must not change.
TEST(Threads, LogitsDoNotDependOnWhoTakesTheChunks) {
  auto model = Model::Load("models/m2-tiny", {.progress = false, .threads = 1});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const std::vector<float> one = PrefillLogits(**model, 1, 300);
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < std::max(2, AvailableCores()); ++i)
    hogs.emplace_back([&] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  for (int rep = 0; rep < 3; ++rep) {
    const std::vector<float> many = PrefillLogits(**model, 3, 300);
    ASSERT_EQ(many.size(), one.size());
    EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)), 0) << "repetition " << rep;
  }
  stop = true;
  for (auto& t : hogs) t.join();
}

// Two models in one process, each on a pool of its own, running at the same time.
TEST(Threads, TwoModelsOnTwoPoolsAtOnce) {
  ThreadPool pa(2), pb(2);
  auto a = Model::Load("models/m2-tiny", {.progress = false, .pool = &pa});
  auto b = Model::Load("models/m2-tiny", {.progress = false, .pool = &pb});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(&(*a)->pool(), &pa);
  EXPECT_EQ(&(*b)->pool(), &pb);
  const auto run = [](Model& m, std::vector<float>& out) {
    KvBlockPool kv(m.cache_layout());
    SequenceCache cache(&kv);
    SequenceCache* caches[] = {&cache};
    ForwardBatch batch;
    for (int i = 0; i < 200; ++i) batch.Add(static_cast<int32_t>((i * 31) % 5000 + 3), 0, i + 1 == 200);
    EXPECT_TRUE(m.Forward(batch, caches, out).ok());
  };
  std::vector<float> la, lb;
  std::thread other([&] { run(**b, lb); });
  run(**a, la);
  other.join();
  ASSERT_FALSE(la.empty());
  EXPECT_EQ(la, lb);
}

}  // namespace
}  // namespace m2
