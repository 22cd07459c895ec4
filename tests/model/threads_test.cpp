// The forward pass gives bit-identical logits on any number of threads: rows split over
// threads are computed by the same instructions, the MoE's expert-parallel and row-split
// paths produce the same expert outputs, and each token sums its experts in
// expert-index order. 1100 tokens also cross the MoE's 1024-token chunk.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "model/layers.h"
#include "model/model.h"

namespace m2 {
namespace {

std::vector<float> PrefillLogits(Model& m, int threads, int64_t tokens) {
  ThreadPool::SetGlobalThreads(threads);
  KvBlockPool pool(m.cache_layout());
  SequenceCache cache(&pool);
  SequenceCache* caches[] = {&cache};
  ForwardBatch b;
  for (int64_t i = 0; i < tokens; ++i) b.Add(static_cast<int32_t>((i * 7919) % 5000 + 3), 0, i % 97 == 0 || i + 1 == tokens);
  std::vector<float> logits;
  const Status st = m.Forward(b, caches, logits);
  EXPECT_TRUE(st.ok()) << st.message();
  return logits;
}

TEST(Threads, LogitsDoNotDependOnTheThreadCount) {
  auto model = Model::Load("models/m2-tiny", {.progress = false});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const int64_t n = kMoeChunkTokens + 76;
  const std::vector<float> one = PrefillLogits(**model, 1, n);
  ASSERT_FALSE(one.empty());
  // 2 and 3 threads: 16 experts with tokens -> whole experts per thread; 5: rows split.
  for (int threads : {2, 3, 5}) {
    const std::vector<float> many = PrefillLogits(**model, threads, n);
    ASSERT_EQ(many.size(), one.size());
    EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)), 0) << threads << " threads";
  }
  ThreadPool::SetGlobalThreads(0);
}

}  // namespace
}  // namespace m2
