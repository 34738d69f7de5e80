// SlotCache alone: the cache of one tier with numbered memory slots: admission takes a free slot,
// eviction and drop give it back for reuse, pinned experts are never evicted, lookups are counted.
#include <gtest/gtest.h>

#include "actors/streaming/slot_cache.hpp"

using namespace ferry;

namespace {
expert_key K(uint32_t e) { return {1, e}; }
}  // namespace

TEST(SlotCache, AdmissionTakesFreeSlotsAndEvictionHandsTheSlotToTheNextExpert) {
  SlotCache c(2, CachePolicy::lru, 2);
  std::vector<expert_key> evicted;
  const auto a = c.admit(K(0), 100, 1, 1, evicted);
  const auto b = c.admit(K(1), 100, 1, 1, evicted);
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  c.unpin(K(0));
  c.unpin(K(1));
  c.access(K(1));  // K(0) is now the least recent
  const auto d = c.admit(K(2), 100, 1, 1, evicted);
  ASSERT_TRUE(d);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], K(0));
  EXPECT_EQ(*d, *a) << "the evicted expert's slot is reused";
  EXPECT_FALSE(c.slot_of(K(0)));
  EXPECT_EQ(c.resident(), 2u);
}

TEST(SlotCache, PinnedExpertsAreNeverEvicted) {
  SlotCache c(1, CachePolicy::lru, 2);
  std::vector<expert_key> evicted;
  ASSERT_TRUE(c.admit(K(0), 100, 1, 1, evicted));  // admitted pinned
  EXPECT_FALSE(c.admit(K(1), 100, 1, 1, evicted)) << "no room without evicting a pinned expert";
  EXPECT_TRUE(evicted.empty());
  c.unpin(K(0));
  EXPECT_TRUE(c.admit(K(1), 100, 1, 1, evicted));
  EXPECT_EQ(evicted.size(), 1u);
}

TEST(SlotCache, BlockAwareAdmissionRefusesExpertsTooFewRowsOfTheBlockUse) {
  SlotCache c(4, CachePolicy::block_aware, 3);
  std::vector<expert_key> evicted;
  EXPECT_FALSE(c.admit(K(0), 100, 2, 8, evicted)) << "2 of 8 rows < min_rows 3";
  EXPECT_TRUE(c.admit(K(1), 100, 3, 8, evicted));
  EXPECT_TRUE(c.admit(K(2), 100, 1, 1, evicted)) << "a plain step always admits";
  EXPECT_EQ(c.stats().refusals, 1u);
  EXPECT_EQ(c.stats().admissions, 2u);
}

TEST(SlotCache, DropFreesTheSlotOfAnUnpinnedExpertOnly) {
  SlotCache c(1, CachePolicy::lru, 2);
  std::vector<expert_key> evicted;
  const auto a = c.admit(K(0), 100, 1, 1, evicted);
  EXPECT_FALSE(c.drop(K(0))) << "pinned";
  c.unpin(K(0));
  EXPECT_TRUE(c.drop(K(0)));
  EXPECT_FALSE(c.slot_of(K(0)));
  EXPECT_EQ(c.admit(K(1), 100, 1, 1, evicted), a);
  EXPECT_TRUE(evicted.empty()) << "a dropped expert is not an eviction";
}

TEST(SlotCache, WithoutSlotsNothingIsAdmittedAndLookupsAreMisses) {
  SlotCache c(0, CachePolicy::block_aware, 2);
  std::vector<expert_key> evicted;
  EXPECT_FALSE(c.enabled());
  EXPECT_FALSE(c.access(K(0)));
  EXPECT_FALSE(c.admit(K(0), 100, 1, 1, evicted));
  EXPECT_EQ(c.stats().misses, 1u);
  EXPECT_EQ(c.stats().hits, 0u);
}
