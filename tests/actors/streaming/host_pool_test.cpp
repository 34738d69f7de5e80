// The host-pool manager alone (the scheduler's side played by the test): hits pin, misses get a cache
// slot when admitted or a scratch slot, an acquire waits for a release when no slot is free, a
// prefetch never waits, a failed fill is dropped, pinned experts are never evicted.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/runtime/runtime.hpp"
#include "actors/streaming/host_pool.hpp"
#include "io/errors.hpp"

using namespace ferry;
using namespace std::chrono_literals;

namespace {

expert_key K(uint32_t e) { return {2, e}; }

struct Pool {
  explicit Pool(TierConfig c) : cfg(c), pool(spawn_host_pool(rt.system(), c)) {}
  host_grant acquire(const expert_key& k, uint32_t rows = 1, uint32_t block_rows = 1) {
    host_grant g;
    self->request(pool, 2s, acquire_atom_v, k, rows, block_rows, true)
        .receive([&](host_grant& x) { g = x; }, [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    return g;
  }
  void release(const expert_key& k, bool ok = true) { self->send(pool, release_atom_v, k, ok); }
  tier_stats stats() {
    tier_stats s;
    self->request(pool, 2s, stats_atom_v)
        .receive([&](tier_stats& x) { s = x; }, [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    return s;
  }
  TierConfig cfg;
  Runtime rt;
  caf::scoped_actor self{rt.system()};
  host_pool_actor pool;
};

TierConfig tier(uint32_t cache, uint32_t scratch, uint32_t min_rows = 2) {
  return {cache, scratch, 4096, CachePolicy::block_aware, min_rows, {}};
}

}  // namespace

TEST(HostPool, HitPinsTheCachedSlotAndEvictionTakesOnlyUnpinnedExperts) {
  Pool p(tier(2, 1));
  const host_grant a = p.acquire(K(0));
  EXPECT_TRUE(a.admitted);
  EXPECT_FALSE(a.hit);
  p.release(K(0));
  const host_grant a2 = p.acquire(K(0));  // a hit, pinned until released
  EXPECT_TRUE(a2.hit);
  EXPECT_EQ(a2.where.slot, a.where.slot);
  p.acquire(K(1));
  p.release(K(1));
  const host_grant c = p.acquire(K(2));  // full: evicts K(1), never the pinned K(0)
  EXPECT_TRUE(c.admitted);
  EXPECT_TRUE(p.acquire(K(0)).hit);
  EXPECT_FALSE(p.acquire(K(1)).hit) << "K(1) was the one evicted";
  EXPECT_EQ(p.stats().evictions, 1u);
}

TEST(HostPool, RefusedMissStreamsThroughAScratchSlot) {
  Pool p(tier(4, 2, 3));
  const host_grant g = p.acquire(K(0), 1, 8);  // 1 of 8 rows < min_rows 3
  EXPECT_FALSE(g.admitted);
  EXPECT_GE(g.where.slot, 4u) << "scratch slots follow the cache slots";
  EXPECT_EQ(p.stats().scratch_free, 1u);
  p.release(K(0));
  EXPECT_EQ(p.stats().scratch_free, 2u);
  EXPECT_EQ(p.stats().refusals, 1u);
}

TEST(HostPool, AcquireWithNoFreeSlotWaitsForARelease) {
  Pool p(tier(0, 1));
  const host_grant first = p.acquire(K(0));
  auto waiting = p.self->request(p.pool, 5s, acquire_atom_v, K(1), uint32_t{1}, uint32_t{1}, true);
  EXPECT_EQ(p.stats().waiting, 1u);
  p.release(K(0));
  host_grant second;
  waiting.receive([&](host_grant& g) { second = g; }, [&](caf::error& e) { FAIL() << caf::to_string(e); });
  EXPECT_EQ(second.where.slot, first.where.slot) << "the released scratch slot went to the waiting acquire";
  EXPECT_EQ(p.stats().waiting, 0u);
}

TEST(HostPool, PrefetchNeverWaitsNorTakesScratch) {
  Pool p(tier(0, 1));
  p.acquire(K(0));  // the only scratch slot is in use
  const host_grant g = p.acquire(K(1), 0, 1);  // rows 0: a prefetch
  EXPECT_FALSE(g.hit);
  EXPECT_FALSE(g.admitted);
  EXPECT_EQ(p.stats().waiting, 0u);
}

TEST(HostPool, FailedFillIsDroppedFromTheCache) {
  Pool p(tier(2, 1));
  EXPECT_TRUE(p.acquire(K(0)).admitted);
  p.release(K(0), false);  // the read failed: the slot holds garbage
  EXPECT_EQ(p.stats().resident, 0u);
  const host_grant g = p.acquire(K(0));
  EXPECT_FALSE(g.hit) << "read again, not served from the bad slot";
}

TEST(HostPool, NoScratchSlotIsAConfigError) {
  Runtime rt;
  EXPECT_THROW(spawn_host_pool(rt.system(), tier(2, 0)), ConfigError);
}
