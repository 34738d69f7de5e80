#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"

namespace ferry {
namespace {

std::vector<ExpertKey> grid(int layers, int experts, int first_layer = 1) {
  std::vector<ExpertKey> v;
  for (int l = first_layer; l < first_layer + layers; ++l)
    for (int e = 0; e < experts; ++e) v.push_back({l, e});
  return v;
}

bool holds(const std::vector<uint16_t>& dirs, uint16_t d) { return std::find(dirs.begin(), dirs.end(), d) != dirs.end(); }

TEST(Placement, SingleBaseDirectoryHoldsEveryExpertOnce) {
  const auto ex = grid(3, 8);
  const auto p = place_experts(ex, 4096, {{"/a", true, -1}}, nullptr);
  ASSERT_EQ(p.size(), ex.size());
  for (const auto& d : p) EXPECT_EQ(d, std::vector<uint16_t>{0});
}

TEST(Placement, PrimariesSplitExpertsSoTheUnionHoldsEachExactlyOnce) {
  const auto ex = grid(2, 10);
  const auto p = place_experts(ex, 4096, {{"/a", true, -1}, {"/b", true, -1}, {"/c", true, -1}}, nullptr);
  std::vector<int> per(3, 0);
  for (const auto& d : p) {
    ASSERT_EQ(d.size(), 1u);
    ++per[d[0]];
  }
  EXPECT_EQ(per, (std::vector<int>{7, 7, 6}));
}

TEST(Placement, ReplicaDirectoryTakesTheMostUsedExpertsUpToItsBudget) {
  const auto ex = grid(2, 6);
  UsageCounts u;
  u[key_id({2, 5})] = 100;
  u[key_id({1, 3})] = 90;
  u[key_id({2, 0})] = 90;  // ties: lower layer first -> (1,3) before (2,0)
  u[key_id({1, 0})] = 5;
  const int64_t fb = 8192;
  // budget for 3 files, plus a little that must not buy a 4th
  const auto p = place_experts(ex, fb, {{"/base", true, -1}, {"/fast", false, 3 * fb + 100}}, &u);
  std::set<std::pair<int, int>> replicated;
  for (size_t i = 0; i < ex.size(); ++i) {
    EXPECT_EQ(p[i][0], 0) << "primary copy first";
    if (holds(p[i], 1)) replicated.insert({ex[i].layer, ex[i].expert});
  }
  EXPECT_EQ(replicated, (std::set<std::pair<int, int>>{{2, 5}, {1, 3}, {2, 0}}));
}

TEST(Placement, BudgetedPrimaryFillsLeftoverSpaceWithReplicasOfOthersExperts) {
  const auto ex = grid(1, 8);
  UsageCounts u;
  for (int e = 0; e < 8; ++e) u[key_id({1, e})] = 100 - e;  // expert 0 hottest
  const int64_t fb = 4096;
  const auto p = place_experts(ex, fb, {{"/a", true, 6 * fb}, {"/b", true, 6 * fb}}, &u);
  int64_t a = 0, b = 0;
  for (const auto& d : p) {
    a += holds(d, 0);
    b += holds(d, 1);
  }
  EXPECT_EQ(a, 6);
  EXPECT_EQ(b, 6);
  // hot experts dealt round-robin: 0 -> a, 1 -> b; replicas then give both drives experts 0 and 1
  EXPECT_TRUE(holds(p[0], 0) && holds(p[0], 1));
  EXPECT_TRUE(holds(p[1], 0) && holds(p[1], 1));
  EXPECT_EQ(p[7].size(), 1u) << "the coldest expert is not replicated";
}

TEST(Placement, PrimaryBudgetsTooSmallForOneFullCopyIsALimitError) {
  const auto ex = grid(1, 10);
  EXPECT_THROW(place_experts(ex, 4096, {{"/a", true, 4 * 4096}, {"/b", true, 5 * 4096}}, nullptr), LimitError);
}

TEST(Placement, NoPrimaryDirectoryIsAConfigError) {
  EXPECT_THROW(place_experts(grid(1, 2), 4096, {{"/r", false, 4096}}, nullptr), ConfigError);
}

}  // namespace
}  // namespace ferry
