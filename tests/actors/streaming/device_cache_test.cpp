// The device-cache manager alone (its bookkeeping runs on the CPU; the slots' memory is the model
// thread's DeviceTier): one plan classifies every expert of a call, pins the call's cached experts
// until done(step), hands scratch slots out round-robin to refused misses, never evicts a pinned one.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/runtime/runtime.hpp"
#include "actors/streaming/device_cache.hpp"
#include "io/errors.hpp"

using namespace ferry;
using namespace std::chrono_literals;

namespace {

struct Manager {
  explicit Manager(TierConfig c) : dc(spawn_device_cache(rt.system(), c)) {}
  device_plan plan(uint64_t step, std::vector<uint32_t> experts, std::vector<uint32_t> rows, uint32_t block_rows) {
    device_plan p;
    self->request(dc, 2s, plan_atom_v, device_request{step, 3, block_rows, std::move(experts), std::move(rows)})
        .receive([&](device_plan& x) { p = x; }, [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    return p;
  }
  void done(uint64_t step) { self->send(dc, done_atom_v, step); }
  tier_stats stats() {
    tier_stats s;
    self->request(dc, 2s, stats_atom_v)
        .receive([&](tier_stats& x) { s = x; }, [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    return s;
  }
  Runtime rt;
  caf::scoped_actor self{rt.system()};
  device_cache_actor dc;
};

}  // namespace

TEST(DeviceCache, PlanClassifiesHitsAdmittedAndRefusedMisses) {
  Manager m({2, 2, 4096, CachePolicy::block_aware, 2, {}});
  auto p = m.plan(1, {0}, {1}, 1);  // a plain step admits
  ASSERT_EQ(p.places.size(), 1u);
  EXPECT_TRUE(p.places[0].admitted);
  m.done(1);
  p = m.plan(2, {0, 5}, {3, 1}, 4);  // expert 0 hit; expert 5 used by 1 of 4 rows: refused
  ASSERT_EQ(p.places.size(), 2u);
  EXPECT_TRUE(p.places[0].hit);
  EXPECT_FALSE(p.places[1].hit);
  EXPECT_FALSE(p.places[1].admitted);
  EXPECT_GE(p.places[1].slot, 2u) << "a refused miss streams through a scratch slot";
  m.done(2);
  const tier_stats s = m.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.refusals, 1u);
}

TEST(DeviceCache, CachedExpertsOfACallStayPinnedUntilDone) {
  Manager m({1, 2, 4096, CachePolicy::lru, 2, {}});
  auto p = m.plan(1, {0, 1}, {1, 1}, 1);  // one cache slot: 0 admitted (pinned), 1 cannot evict it
  EXPECT_TRUE(p.places[0].admitted);
  EXPECT_FALSE(p.places[1].admitted);
  m.done(1);
  p = m.plan(2, {1}, {1}, 1);  // 0 is unpinned now: 1 takes its slot
  EXPECT_TRUE(p.places[0].admitted);
  EXPECT_EQ(m.stats().evictions, 1u);
}

TEST(DeviceCache, AFailedCallThatNeverSaidDoneDoesNotPinForever) {
  Manager m({1, 1, 4096, CachePolicy::lru, 2, {}});
  m.plan(1, {0}, {1}, 1);  // no done(1): the call failed
  const auto p = m.plan(2, {1}, {1}, 1);
  EXPECT_TRUE(p.places[0].admitted) << "the next plan unpinned the failed call's experts";
}

TEST(DeviceCache, ScratchSlotsAreHandedOutRoundRobin) {
  Manager m({0, 2, 4096, CachePolicy::block_aware, 2, {}});
  const auto p = m.plan(1, {0, 1, 2}, {1, 1, 1}, 1);
  ASSERT_EQ(p.places.size(), 3u);
  EXPECT_EQ(p.places[0].slot, 0u);
  EXPECT_EQ(p.places[1].slot, 1u);
  EXPECT_EQ(p.places[2].slot, 0u);
}

TEST(DeviceCache, NoScratchSlotIsAConfigError) {
  Runtime rt;
  EXPECT_THROW(spawn_device_cache(rt.system(), {2, 0, 4096, CachePolicy::lru, 2, {}}), ConfigError);
}
