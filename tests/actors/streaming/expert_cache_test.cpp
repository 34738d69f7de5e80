// Cache admission and eviction: the LRU failure on wide blocks and the block-aware fix, pinning,
// recency+frequency eviction, byte capacity.
#include <gtest/gtest.h>

#include "actors/streaming/expert_cache.hpp"
#include "io/errors.hpp"

using namespace ferry;

namespace {

// Block b of a verification block of 4 rows: 4 shared experts (all rows route to them) and 4 experts
// per row that no other row and no other block uses. 20 distinct experts per block, cache holds 16.
std::vector<BlockUse> wide_block(uint32_t b) {
  std::vector<BlockUse> uses;
  for (uint32_t e = 0; e < 4; ++e) uses.push_back({{1, e}, 4});
  for (uint32_t row = 0; row < 4; ++row)
    for (uint32_t j = 0; j < 4; ++j) uses.push_back({{1, 100 + b * 16 + row * 4 + j}, 1});
  return uses;
}

size_t hits_after_first_block(ExpertCache& c, uint32_t blocks) {
  size_t hits = 0;
  for (uint32_t b = 0; b < blocks; ++b) {
    size_t h = c.run_block(wide_block(b), 4, 1);
    if (b > 0) hits += h;
  }
  return hits;
}

}  // namespace

TEST(ExpertCache, PlainLruThrashesToZeroHitsOnBlocksWiderThanTheCache) {
  ExpertCache lru({.capacity_experts = 16, .policy = CachePolicy::lru});
  EXPECT_EQ(hits_after_first_block(lru, 20), 0u);
  EXPECT_EQ(lru.counters().hits, 0u);
  EXPECT_GT(lru.counters().evictions, 0u);
}

TEST(ExpertCache, BlockAwareAdmissionKeepsTheSharedExpertsResident) {
  ExpertCache c({.capacity_experts = 16, .policy = CachePolicy::block_aware, .min_rows = 2});
  EXPECT_EQ(hits_after_first_block(c, 20), 19u * 4u);  // the 4 shared experts hit in every later block
  EXPECT_GT(c.counters().refusals, 0u);
  EXPECT_EQ(c.counters().admissions, 4u);
}

TEST(ExpertCache, PlainStepAlwaysAdmits) {
  ExpertCache c({.capacity_experts = 4, .min_rows = 3});
  EXPECT_TRUE(c.insert({0, 1}, 1, 1, 1));
  EXPECT_FALSE(c.insert({0, 2}, 1, 1, 4));  // one row of four: refused
  EXPECT_TRUE(c.insert({0, 3}, 1, 3, 4));
  EXPECT_TRUE(c.contains({0, 1}) && c.contains({0, 3}) && !c.contains({0, 2}));
}

TEST(ExpertCache, PinnedExpertIsNeverEvicted) {
  ExpertCache c({.capacity_experts = 2, .policy = CachePolicy::lru});
  c.insert({0, 1}, 1, 1, 1);
  c.insert({0, 2}, 1, 1, 1);
  c.pin({0, 1});  // least recent, but in use
  std::vector<expert_key> evicted;
  EXPECT_TRUE(c.insert({0, 3}, 1, 1, 1, &evicted));
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], (expert_key{0, 2}));
  c.pin({0, 3});
  EXPECT_FALSE(c.insert({0, 4}, 1, 1, 1)) << "every resident expert is pinned: nothing may be evicted";
  EXPECT_TRUE(c.contains({0, 1}) && c.contains({0, 3}));
  c.unpin({0, 1});
  EXPECT_TRUE(c.insert({0, 4}, 1, 1, 1));
  EXPECT_FALSE(c.contains({0, 1}));
}

TEST(ExpertCache, FrequentlyUsedExpertSurvivesAScanThatLruWouldLetEvictIt) {
  auto run = [](CachePolicy p) {
    ExpertCache c({.capacity_experts = 8, .policy = p});
    c.insert({0, 0}, 1, 1, 1);
    for (int i = 0; i < 10; ++i) c.access({0, 0});
    for (uint32_t e = 1; e <= 8; ++e)
      if (!c.access({0, e})) c.insert({0, e}, 1, 1, 1);  // a scan of one-off experts, plain steps
    return c.contains({0, 0});
  };
  EXPECT_FALSE(run(CachePolicy::lru));
  EXPECT_TRUE(run(CachePolicy::block_aware));
}

TEST(ExpertCache, ByteCapacityEvictsByBytes) {
  ExpertCache c({.capacity_bytes = 100, .policy = CachePolicy::lru});
  EXPECT_TRUE(c.insert({0, 1}, 40, 1, 1));
  EXPECT_TRUE(c.insert({0, 2}, 40, 1, 1));
  EXPECT_TRUE(c.insert({0, 3}, 40, 1, 1));
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.bytes(), 80u);
  EXPECT_FALSE(c.insert({0, 4}, 101, 1, 1)) << "larger than the whole cache";
}

TEST(ExpertCache, RejectsAConfigWithoutCapacity) { EXPECT_THROW(ExpertCache({}), ConfigError); }
