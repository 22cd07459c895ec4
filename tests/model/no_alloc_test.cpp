// A warm forward pass allocates no memory: decode steps (trunk and MTP module) after a
// warm-up, with two threads, count every operator new while they run. (Growing the KV
// pool by a block is the exception by design; the steps here stay inside blocks the
// warm-up already took.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "base/thread_pool.h"
#include "model/model.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace m2 {
namespace {

TEST(NoAllocation, WarmDecodeStepsAllocateNothing) {
  auto model = Model::Load("testdata/golden/tiny-mtp", {.progress = false, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = **model;
  ASSERT_GT(m.num_mtp_modules(), 0);
  KvBlockPool pool(m.cache_layout());
  SequenceCache cache(&pool);
  SequenceCache* caches[] = {&cache};
  std::vector<float> logits, hidden, mtp_logits, mtp_hidden;
  logits.reserve(1 << 16);
  hidden.reserve(1 << 12);
  mtp_logits.reserve(1 << 16);
  mtp_hidden.reserve(1 << 12);
  const int64_t Hd = m.config().hidden_size;

  ForwardBatch b;  // the caller's batches are reused too
  MtpBatch mb;
  auto step = [&](int32_t tok, bool mtp) {
    b.tokens.clear(), b.seq.clear(), b.want_logits.clear(), b.want_hidden.clear();
    b.Add(tok, 0, true, /*hidden=*/true);
    logits.clear();
    hidden.clear();
    const Status st = m.Forward(b, caches, logits, hidden);
    ASSERT_TRUE(st.ok()) << st.message();
    if (!mtp) return;
    mb.tokens.clear(), mb.seq.clear(), mb.pos.clear(), mb.want_logits.clear();
    mb.Add(tok, 0, cache.filled(m.mtp_cache_layer(0)), true);
    mtp_logits.clear();
    mtp_hidden.clear();
    const Status ms = m.ForwardMtp(0, mb, {hidden.data(), static_cast<size_t>(Hd)}, caches, mtp_logits, mtp_hidden);
    ASSERT_TRUE(ms.ok()) << ms.message();
  };
  // Warm-up: a prefill, then decode steps a little past where the counted ones end.
  {
    ForwardBatch prefill;
    for (int i = 0; i < 6; ++i) prefill.Add(10 + i, 0, i == 5);
    ASSERT_TRUE(m.Forward(prefill, caches, logits).ok());
  }
  for (int i = 0; i < 6; ++i) step(20 + i, true);
  ASSERT_TRUE(cache.Truncate(8).ok());
  m.TruncateMtp(cache, 8);
  ASSERT_LT(cache.length() + 3, cache.block_tokens() * static_cast<int64_t>(cache.block_table().size()));

  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 3; ++i) step(30 + i, true);
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0) << "allocations during 3 warm decode steps (trunk + MTP module 0)";
}

TEST(NoAllocation, WarmHybridStepsAllocateNothing) {
  // A Lightning hybrid: decode steps (the recurrence) and short prefill chunks (the
  // blocked form) of two sequences batched. The warm-up runs the same shapes to longer
  // positions on other caches (the softmax layers' score scratch grows with the context,
  // by design); the counted steps run on caches that took their first block before.
  auto model = Model::Load("testdata/golden/tiny-hybrid-hf", {.progress = false, .threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = **model;
  KvBlockPool pool(m.cache_layout(64));
  SequenceCache a(&pool), c(&pool), x(&pool), y(&pool);
  std::vector<float> logits;
  logits.reserve(1 << 16);
  ForwardBatch b;
  auto step = [&](SequenceCache& dec, SequenceCache& chunk, int32_t tok) {
    SequenceCache* caches[] = {&dec, &chunk};
    b.tokens.clear(), b.seq.clear(), b.want_logits.clear(), b.want_hidden.clear();
    b.Add(tok, 0, true);                                    // decode
    for (int i = 0; i < 6; ++i) b.Add(tok + i, 1, i == 5);  // a chunk
    logits.clear();
    const Status st = m.Forward(b, caches, logits);
    ASSERT_TRUE(st.ok()) << st.message();
  };
  for (int i = 0; i < 5; ++i) step(a, c, 10 + i);  // positions up to 30
  step(x, y, 40);
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 3; ++i) step(x, y, 20 + i);  // positions up to 24
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0) << "allocations during 3 warm hybrid steps";
}

}  // namespace
}  // namespace m2
