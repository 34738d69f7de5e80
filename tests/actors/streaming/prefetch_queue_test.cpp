#include <gtest/gtest.h>

#include "actors/streaming/prefetch_queue.hpp"

using namespace ferry;

TEST(PrefetchQueue, BoundedQueueDropsTheOldestCandidate) {
  PrefetchQueue q(2);
  EXPECT_TRUE(q.push({1, 1}));
  EXPECT_TRUE(q.push({1, 2}));
  EXPECT_FALSE(q.push({1, 3}));
  EXPECT_EQ(q.queued(), 2u);
  EXPECT_EQ(q.counters().dropped, 1u);
  EXPECT_EQ(q.pop(), (expert_key{1, 2}));
  EXPECT_FALSE(q.claim({1, 1})) << "a dropped candidate is no prefetch hit";
}

TEST(PrefetchQueue, DemandForAPrefetchedExpertCountsAHit) {
  PrefetchQueue q(4);
  q.push({2, 5});
  q.push({2, 6});
  q.push({2, 5});  // duplicate ignored
  EXPECT_EQ(q.queued(), 2u);
  EXPECT_EQ(q.pop(), (expert_key{2, 5}));
  EXPECT_TRUE(q.claim({2, 5}));  // issued, then demanded
  EXPECT_TRUE(q.claim({2, 6}));  // still queued: demanded before it was issued
  EXPECT_EQ(q.queued(), 0u);
  EXPECT_FALSE(q.claim({2, 7}));
  EXPECT_EQ(q.counters().hits, 2u);
}

TEST(PrefetchQueue, CandidatesOfAPassedLayerAreWasted) {
  PrefetchQueue q(8);
  q.push({3, 1});
  q.push({3, 2});
  q.push({4, 1});
  q.pop();
  q.expire_layer(3);
  EXPECT_EQ(q.counters().wasted, 2u);
  EXPECT_EQ(q.queued(), 1u);
  EXPECT_FALSE(q.claim({3, 1}));
}
