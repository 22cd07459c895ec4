#include <gtest/gtest.h>

#include "model/kv_cache.h"

namespace m2 {
namespace {

CacheLayout Layout() {
  CacheLayout l;
  l.block_tokens = 2;
  l.layers = {{LayerCacheKind::kKeyValue, 1, 2, 0}, {LayerCacheKind::kKeyValue, 1, 2, 0}};
  return l;
}

// A plane per (K or V, head): within a block a head's rows are contiguous, and blocks taken
// in order continue each other, so a sequence's rows of a head are one run of memory;
// heads and K / V are planes apart; every (layer, pos, head) row is its own, and growing
// the pool (16 blocks at first, doubled as needed) moves every plane with its contents.
TEST(KvCacheTest, APlanePerHead) {
  CacheLayout l;
  l.block_tokens = 4;
  l.layers = {{LayerCacheKind::kKeyValue, 3, 8, 0}, {LayerCacheKind::kKeyValue, 3, 8, 0}};
  KvBlockPool pool(l);
  SequenceCache c(&pool);
  ASSERT_TRUE(c.Extend(7).ok());
  EXPECT_EQ(pool.block_stride(0), 4 * 8);
  EXPECT_EQ(c.K(0, 1, 0) - c.K(0, 0, 0), 8);  // next position, same head
  EXPECT_EQ(c.K(0, 4, 1) - c.K(0, 3, 1), 8);  // into the next block: the same run
  EXPECT_EQ(c.K(0, 0, 1) - c.K(0, 0, 0), pool.head_stride(0));  // next head: the next plane
  EXPECT_EQ(c.K(1, 2, 2) - c.KBlock(1, 0, 2), 2 * 8);
  EXPECT_EQ(c.V(1, 5, 1) - c.VBlock(1, 1, 1), 1 * 8);
  EXPECT_EQ(static_cast<char*>(c.VRaw(0, 0, 0)) - static_cast<char*>(c.KRaw(0, 0, 0)),
            static_cast<char*>(pool.VBase(0)) - static_cast<char*>(pool.KBase(0)));
  const auto fill = [&](int64_t len) {
    float v = 0;
    for (int64_t layer = 0; layer < 2; ++layer)
      for (int64_t p = 0; p < len; ++p)
        for (int64_t g = 0; g < 3; ++g)
          for (int64_t d = 0; d < 8; ++d) c.K(layer, p, g)[d] = v++, c.V(layer, p, g)[d] = v++;
  };
  const auto check = [&](int64_t len) {
    float v = 0;
    for (int64_t layer = 0; layer < 2; ++layer)
      for (int64_t p = 0; p < len; ++p)
        for (int64_t g = 0; g < 3; ++g)
          for (int64_t d = 0; d < 8; ++d) {
            ASSERT_EQ(c.K(layer, p, g)[d], v++) << layer << " " << p << " " << g;
            ASSERT_EQ(c.V(layer, p, g)[d], v++) << layer << " " << p << " " << g;
          }
  };
  fill(7);
  check(7);
  const int64_t planes = pool.head_stride(0);
  ASSERT_TRUE(c.Extend(20 * 4).ok());  // 20 blocks: the pool grows to 32
  EXPECT_GT(pool.head_stride(0), planes);
  check(7);  // moved with the planes
  fill(20 * 4);
  check(20 * 4);
  SequenceCache f = c.Fork();  // a copied block keeps every head's rows
  ASSERT_TRUE(f.Unshare(0, 20 * 4).ok());
  for (int64_t g = 0; g < 3; ++g) EXPECT_EQ(f.V(1, 77, g)[5], c.V(1, 77, g)[5]);
  EXPECT_NE(f.K(1, 77, 2), c.K(1, 77, 2));
}

TEST(KvCacheTest, ExtendWritesAndReads) {
  KvBlockPool pool(Layout());
  SequenceCache c(&pool);
  ASSERT_TRUE(c.Extend(3).ok());
  EXPECT_EQ(c.block_table().size(), 2u);
  for (int p = 0; p < 3; ++p) {
    c.K(1, p)[0] = static_cast<float>(p);
    c.V(1, p)[1] = static_cast<float>(10 + p);
  }
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(c.K(1, p)[0], p);
    EXPECT_EQ(c.V(1, p)[1], 10 + p);
    EXPECT_EQ(c.K(0, p)[0], 0.0f);  // layers do not overlap
  }
}

TEST(KvCacheTest, ForkIsCopyOnWrite) {
  KvBlockPool pool(Layout());
  SequenceCache a(&pool);
  ASSERT_TRUE(a.Extend(3).ok());
  a.K(0, 2)[0] = 5.0f;
  SequenceCache b = a.Fork();
  EXPECT_EQ(pool.blocks_in_use(), 2);
  EXPECT_EQ(pool.RefCount(a.block_table()[0]), 2);
  ASSERT_TRUE(b.Extend(4).ok());  // writes into the shared half-full block: copied
  EXPECT_EQ(pool.blocks_in_use(), 3);
  EXPECT_NE(a.block_table()[1], b.block_table()[1]);
  EXPECT_EQ(a.block_table()[0], b.block_table()[0]);
  EXPECT_EQ(b.K(0, 2)[0], 5.0f);  // the copy kept the data
  b.K(0, 3)[0] = 7.0f;
  b.K(0, 2)[0] = 6.0f;
  EXPECT_EQ(a.K(0, 2)[0], 5.0f);  // the original is untouched
}

TEST(KvCacheTest, TruncateReleasesBlocks) {
  KvBlockPool pool(Layout());
  {
    SequenceCache a(&pool);
    ASSERT_TRUE(a.Extend(5).ok());
    EXPECT_EQ(pool.blocks_in_use(), 3);
    ASSERT_TRUE(a.Truncate(2).ok());
    EXPECT_EQ(a.length(), 2);
    EXPECT_EQ(pool.blocks_in_use(), 1);
    EXPECT_FALSE(a.Truncate(3).ok());
    ASSERT_TRUE(a.Truncate(0).ok());
    EXPECT_EQ(pool.blocks_in_use(), 0);
    ASSERT_TRUE(a.Extend(1).ok());
  }
  EXPECT_EQ(pool.blocks_in_use(), 0);  // the destructor gave everything back
}

TEST(KvCacheTest, PoolLimitIsAnError) {
  KvBlockPool pool(Layout(), /*max_blocks=*/1);
  SequenceCache a(&pool);
  ASSERT_TRUE(a.Extend(2).ok());
  Status st = a.Extend(3);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("full"), std::string::npos);
}

TEST(KvCacheTest, RecurrentStateLayersHaveFixedStateAndForkCopiesIt) {
  CacheLayout l;
  l.block_tokens = 4;
  l.layers = {{LayerCacheKind::kRecurrentState, 0, 0, 6}, {LayerCacheKind::kKeyValue, 2, 4, 0}};
  KvBlockPool pool(l);
  EXPECT_EQ(pool.block_floats(), 2 * 4 * 2 * 4);  // only the KV layer takes block space
  SequenceCache a(&pool);
  a.State(0)[5] = 3.0f;
  ASSERT_TRUE(a.Extend(2).ok());
  SequenceCache b = a.Fork();
  b.State(0)[5] = 4.0f;
  EXPECT_EQ(a.State(0)[5], 3.0f);
  EXPECT_FALSE(a.Truncate(1).ok());  // a recurrent state cannot be rolled back
}

// Per-layer fill levels (MTP module layers lag behind the trunk's): Truncate lowers them,
// Fork copies them, moves carry them.
TEST(KvCacheTest, FilledIsPerLayerAndFollowsTruncateForkAndMove) {
  KvBlockPool pool(Layout());
  SequenceCache a(&pool);
  ASSERT_TRUE(a.Extend(5).ok());
  EXPECT_EQ(a.filled(0), 0);
  a.set_filled(0, 5);
  a.set_filled(1, 3);
  SequenceCache b = a.Fork();
  EXPECT_EQ(b.filled(0), 5);
  EXPECT_EQ(b.filled(1), 3);
  ASSERT_TRUE(a.Truncate(4).ok());
  EXPECT_EQ(a.filled(0), 4);
  EXPECT_EQ(a.filled(1), 3);
  ASSERT_TRUE(a.Truncate(2).ok());
  EXPECT_EQ(a.filled(1), 2);
  EXPECT_EQ(b.filled(0), 5);  // the fork is its own
  SequenceCache c = std::move(b);
  EXPECT_EQ(c.filled(1), 3);
  EXPECT_EQ(b.filled(1), 0);  // NOLINT(bugprone-use-after-move): a moved-from cache is empty
  ASSERT_TRUE(a.Extend(6).ok());
  EXPECT_EQ(a.filled(0), 2);  // Extend makes positions writable, not filled
}

// Writing below length() (an MTP layer catching up) needs the blocks unshared first.
TEST(KvCacheTest, UnshareCopiesOnlySharedBlocksInRange) {
  KvBlockPool pool(Layout());  // 2 positions per block
  SequenceCache a(&pool);
  ASSERT_TRUE(a.Extend(6).ok());  // blocks 0, 1, 2
  a.K(1, 3)[0] = 7.0f;
  SequenceCache b = a.Fork();
  EXPECT_EQ(pool.blocks_in_use(), 3);
  ASSERT_TRUE(b.Unshare(3, 5).ok());  // positions 3, 4: blocks 1 and 2
  EXPECT_EQ(pool.blocks_in_use(), 5);
  EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
  EXPECT_NE(b.block_table()[1], a.block_table()[1]);
  EXPECT_NE(b.block_table()[2], a.block_table()[2]);
  EXPECT_EQ(b.K(1, 3)[0], 7.0f);  // copied, not cleared
  b.K(1, 3)[0] = 8.0f;
  EXPECT_EQ(a.K(1, 3)[0], 7.0f);
  ASSERT_TRUE(b.Unshare(2, 6).ok());  // already its own: nothing to copy
  EXPECT_EQ(pool.blocks_in_use(), 5);
  ASSERT_TRUE(b.Unshare(4, 4).ok());  // empty range
}

}  // namespace
}  // namespace m2

namespace m2 {
namespace {

// The prefix cache: registered blocks survive their sequence, are found by hash and
// tokens, are copied before a write, and are evicted least recently used only when no
// fresh block is left.
TEST(KvCacheTest, PrefixCacheKeepsRegisteredBlocksAndEvictsLeastRecentlyUsed) {
  KvBlockPool pool(Layout(), /*max_blocks=*/4);  // 2 positions per block
  const std::vector<int32_t> t0 = {1, 2}, t1 = {3, 4}, t2 = {5, 6};
  uint64_t h0 = 0, h1 = 0;
  int32_t b0 = -1;
  {
    SequenceCache a(&pool);
    ASSERT_TRUE(a.Extend(5).ok());  // 3 blocks, the last one partial
    a.K(0, 0)[0] = 42.0f;
    b0 = a.block_table()[0];
    h0 = pool.Register(a.block_table()[0], 0, t0);
    h1 = pool.Register(a.block_table()[1], h0, t1);
    EXPECT_TRUE(pool.IsRegistered(b0));
    EXPECT_EQ(h0, PrefixHash(0, t0));
    EXPECT_NE(h1, PrefixHash(0, t1));  // chained: the same tokens after another prefix differ
  }
  EXPECT_EQ(pool.blocks_in_use(), 0);
  EXPECT_EQ(pool.blocks_cached(), 2);
  EXPECT_EQ(pool.available_blocks(), 4);
  // Wrong tokens under the right hash are not a hit.
  EXPECT_EQ(pool.LookupPrefix(h0, t1), -1);
  const int32_t got = pool.LookupPrefix(h0, t0);
  ASSERT_EQ(got, b0);
  EXPECT_EQ(pool.RefCount(got), 1);
  EXPECT_EQ(pool.blocks_cached(), 1);
  SequenceCache b(&pool);
  b.AdoptPrefix(std::span<const int32_t>(&got, 1), 1, 2);
  EXPECT_EQ(b.K(0, 0)[0], 42.0f);
  EXPECT_EQ(b.filled(0), 1);
  // Writing position 1 of the registered block copies it; the cached one stays intact.
  EXPECT_EQ(b.BlocksToExtend(2), 1);
  ASSERT_TRUE(b.Extend(2).ok());
  EXPECT_NE(b.block_table()[0], b0);
  b.K(0, 0)[0] = 7.0f;
  EXPECT_EQ(pool.K(b0, 0)[0], 42.0f);
  EXPECT_EQ(pool.blocks_cached(), 2);  // b0 went back to the cache
  // Fresh blocks first, then the least recently used cached one (h1's block, older).
  SequenceCache c(&pool);
  ASSERT_TRUE(c.Extend(4).ok());  // 2 blocks: 1 fresh + 1 evicted
  EXPECT_EQ(pool.blocks_cached(), 1);
  EXPECT_EQ(pool.LookupPrefix(h1, t1), -1);  // evicted
  EXPECT_NE(pool.LookupPrefix(h0, t0), -1);  // still cached (taken back)
  EXPECT_EQ(pool.blocks_in_use(), 4);
  EXPECT_EQ(pool.available_blocks(), 0);
  EXPECT_FALSE(c.Extend(6).ok());
  (void)t2;
}

TEST(KvCacheTest, StateCheckpointsAreKeptLeastRecentlyUsedAndDroppedWithTheirBlock) {
  // Two recurrent layers (3 + 2 floats) around a KV layer; blocks of 2 positions.
  CacheLayout l;
  l.block_tokens = 2;
  l.layers = {{LayerCacheKind::kRecurrentState, 0, 0, 3}, {LayerCacheKind::kKeyValue, 1, 2, 0},
              {LayerCacheKind::kRecurrentState, 0, 0, 2}};
  KvBlockPool pool(l, /*max_blocks=*/3);
  EXPECT_EQ(pool.checkpoint_floats(), 5);
  EXPECT_FALSE(pool.prefix_cache_supported());  // no room for a checkpoint yet
  pool.PutCheckpoint(1, {1, 2, 3, 4, 5});       // ignored
  EXPECT_EQ(pool.checkpoints(), 0);
  pool.set_max_checkpoints(2);
  EXPECT_TRUE(pool.prefix_cache_supported());

  SequenceCache a(&pool);
  ASSERT_TRUE(a.Extend(2).ok());
  for (int i = 0; i < 3; ++i) a.State(0)[i] = static_cast<float>(10 + i);
  for (int i = 0; i < 2; ++i) a.State(2)[i] = static_cast<float>(20 + i);
  std::vector<float> flat;
  a.CopyStatesTo(&flat);
  EXPECT_EQ(flat, (std::vector<float>{10, 11, 12, 20, 21}));
  const std::vector<int32_t> t0 = {7, 8};
  const uint64_t h0 = pool.Register(a.block_table()[0], 0, t0);
  pool.PutCheckpoint(h0, flat);
  pool.PutCheckpoint(111, {0, 0, 0, 0, 0});
  ASSERT_NE(pool.FindCheckpoint(h0), nullptr);  // h0 is now the most recently used
  pool.PutCheckpoint(222, {1, 1, 1, 1, 1});     // evicts 111
  EXPECT_EQ(pool.checkpoints(), 2);
  EXPECT_EQ(pool.checkpoints_evicted(), 1);
  EXPECT_FALSE(pool.HasCheckpoint(111));
  EXPECT_TRUE(pool.HasCheckpoint(h0));

  // A sequence adopting the block loads the states it follows.
  const int32_t got = pool.LookupPrefix(h0, t0);
  ASSERT_GE(got, 0);
  SequenceCache b(&pool);
  b.AdoptPrefix(std::span<const int32_t>(&got, 1), 2, 3);
  b.LoadStates(*pool.FindCheckpoint(h0));
  EXPECT_EQ(b.State(0)[2], 12.0f);
  EXPECT_EQ(b.State(2)[1], 21.0f);

  // When the block is evicted its checkpoint goes with it.
  a = SequenceCache(&pool);
  b = SequenceCache(&pool);
  EXPECT_EQ(pool.blocks_cached(), 1);
  SequenceCache c(&pool);
  ASSERT_TRUE(c.Extend(6).ok());  // all three blocks: the cached one is evicted
  EXPECT_FALSE(pool.HasCheckpoint(h0));
  EXPECT_TRUE(pool.HasCheckpoint(222));
  pool.set_max_checkpoints(0);
  EXPECT_EQ(pool.checkpoints(), 0);
}

TEST(KvCacheTest, Bf16PoolStoresHalfTheBytes) {
  CacheLayout l = Layout();
  l.kv_dtype = KvDtype::kBf16;
  KvBlockPool pool(l);
  EXPECT_EQ(pool.block_bytes(), pool.block_floats() * 2);
  SequenceCache c(&pool);
  ASSERT_TRUE(c.Extend(3).ok());
  const float v[2] = {1.5f, -3.25f};
  StoreKv(v, 2, KvDtype::kBf16, c.KRaw(1, 2));
  float back[2];
  LoadKv(c.KRaw(1, 2), 2, KvDtype::kBf16, back);
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[1], -3.25f);
  EXPECT_EQ(static_cast<char*>(c.KRaw(0, 1)) - static_cast<char*>(c.KRaw(0, 0)), 2 * 2);
}

// A q8 pool (kernels/attention.h): a row of head_dim 32 is 32 int8 values and one fp32
// scale, 36 bytes, and positions, heads and layers are that many bytes apart.
TEST(KvCacheTest, Q8PoolRowsHoldTheirScales) {
  CacheLayout l;
  l.block_tokens = 4;
  l.layers = {{LayerCacheKind::kKeyValue, 2, 32, 0}, {LayerCacheKind::kKeyValue, 2, 32, 0}};
  l.kv_dtype = KvDtype::kQ8;
  KvBlockPool pool(l);
  EXPECT_EQ(pool.block_bytes(), 2 * 2 * 2 * 4 * 36);  // layers x (K, V) x heads x positions x row
  SequenceCache c(&pool);
  ASSERT_TRUE(c.Extend(6).ok());
  EXPECT_EQ(static_cast<char*>(c.KRaw(0, 1)) - static_cast<char*>(c.KRaw(0, 0)), 36);
  std::vector<float> a(32), b(32), back(32);
  for (int i = 0; i < 32; ++i) a[i] = 0.25f * static_cast<float>(i - 16), b[i] = -a[i] * 3.0f;
  StoreKv(a.data(), 32, KvDtype::kQ8, c.KRaw(1, 5, 1));
  StoreKv(b.data(), 32, KvDtype::kQ8, c.VRaw(1, 5, 1));
  StoreKv(b.data(), 32, KvDtype::kQ8, c.KRaw(1, 4, 1));  // the row before: must not touch row 5
  LoadKv(c.KRaw(1, 5, 1), 32, KvDtype::kQ8, back.data());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(back[i], a[i], 4.0f / 254.0f) << i;
  LoadKv(c.VRaw(1, 5, 1), 32, KvDtype::kQ8, back.data());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(back[i], b[i], 12.0f / 254.0f) << i;
}

}  // namespace
}  // namespace m2
