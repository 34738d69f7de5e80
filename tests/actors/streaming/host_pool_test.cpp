// The host-pool manager alone (the scheduler's side played by the test): hits pin, misses get a cache
// slot when admitted or a scratch slot, an acquire waits for a release when no slot is free, a
// prefetch never waits, a failed fill is dropped, pinned experts are never evicted; router guesses hold
// at most their guess slots, park when released unclaimed, and give way to demands.
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
  host_grant guess(const expert_key& k) {
    host_grant g;
    self->request(pool, 2s, guess_atom_v, k)
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

TierConfig tier(uint32_t cache, uint32_t scratch, uint32_t min_rows = 2, uint32_t guess_slots = 0) {
  return {cache, scratch, 4096, CachePolicy::block_aware, min_rows, {}, {}, guess_slots};
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

TEST(HostPool, LandedGuessParksAndTheDemandForItIsAHitOnItsScratchSlot) {
  Pool p(tier(2, 4, 2, 2));
  const host_grant g = p.guess(K(7));
  ASSERT_FALSE(g.refused);
  EXPECT_FALSE(g.admitted) << "a guess never takes a cache slot";
  EXPECT_GE(g.where.slot, 2u);
  p.release(K(7));  // landed, nobody claimed it yet: parked
  EXPECT_EQ(p.stats().scratch_free, 3u) << "a parked guess keeps its slot";
  EXPECT_TRUE(p.guess(K(7)).refused) << "its bytes are already here";
  const host_grant d = p.acquire(K(7));
  EXPECT_TRUE(d.hit);
  EXPECT_EQ(d.where.slot, g.where.slot);
  EXPECT_EQ(p.stats().resident, 0u) << "the claim does not admit it into the cache";
  p.release(K(7));  // the demand is done: the slot is free again
  EXPECT_EQ(p.stats().scratch_free, 4u);
  EXPECT_FALSE(p.acquire(K(7)).hit) << "claimed once, the bytes are gone";
}

TEST(HostPool, GuessesHoldAtMostTheirSlotsAndNeverTheDemandsShare) {
  Pool p(tier(0, 4, 2, 2));  // 4 scratch slots, 2 of them for guesses
  EXPECT_FALSE(p.guess(K(0)).refused);
  EXPECT_FALSE(p.guess(K(1)).refused);
  EXPECT_TRUE(p.guess(K(2)).refused) << "both guess slots are reading";
  p.release(K(0));                      // parked: the oldest parked guess makes room for a new one
  EXPECT_FALSE(p.guess(K(2)).refused);
  EXPECT_FALSE(p.acquire(K(0)).hit) << "K(0)'s parked bytes went to K(2)";
  p.release(K(0));
  p.acquire(K(10));
  p.acquire(K(11));  // demands hold 2 of the 4 slots, guesses K(1) and K(2) the rest
  EXPECT_TRUE(p.guess(K(3)).refused) << "both guess slots are reading";
  p.release(K(10));
  p.release(K(11));
  p.release(K(1));   // parked
  p.release(K(2));   // parked
  EXPECT_EQ(p.stats().scratch_free, 2u);
  EXPECT_FALSE(p.guess(K(3)).refused) << "replaces the oldest parked guess";
  EXPECT_EQ(p.stats().scratch_free, 2u) << "in its slot: guesses still hold 2";
  EXPECT_TRUE(p.acquire(K(2)).hit) << "K(2) is still parked";
  EXPECT_FALSE(p.acquire(K(1)).hit) << "K(1) gave its slot to K(3)";
}

TEST(HostPool, GuessNeverTakesTheDemandsShareOfScratch) {
  Pool p(tier(0, 4, 2, 2));  // demands keep 4 - 2 slots
  p.acquire(K(10));
  p.acquire(K(11));
  EXPECT_TRUE(p.guess(K(0)).refused) << "2 free: the demands' share";
  p.release(K(11));
  EXPECT_FALSE(p.guess(K(0)).refused) << "3 free > 2";
  EXPECT_EQ(p.stats().scratch_free, 2u);
  p.release(K(10));
  EXPECT_FALSE(p.guess(K(1)).refused) << "3 free again";
  p.acquire(K(12));
  p.release(K(0), false);  // a guess slot is free again, but only 2 slots are: the demands' share
  EXPECT_TRUE(p.guess(K(2)).refused);
}

TEST(HostPool, DemandWithNoFreeScratchTakesTheOldestParkedGuess) {
  Pool p(tier(0, 3, 2, 2));
  p.guess(K(0));
  p.release(K(0));  // parked
  p.guess(K(1));
  p.release(K(1));  // parked
  p.acquire(K(5));  // the one free slot
  auto waiting = p.self->request(p.pool, 2s, acquire_atom_v, K(6), uint32_t{1}, uint32_t{1}, true);
  host_grant g;
  waiting.receive([&](host_grant& x) { g = x; }, [&](caf::error& e) { FAIL() << caf::to_string(e); });
  EXPECT_FALSE(g.hit);
  EXPECT_EQ(p.stats().waiting, 0u) << "a demand never waits on a parked guess";
  EXPECT_FALSE(p.acquire(K(0)).hit) << "K(0), the oldest parked guess, gave its slot";
}

TEST(HostPool, GuessOfACachedExpertIsRefusedAndAFailedGuessFreesItsSlot) {
  Pool p(tier(2, 4, 2, 2));
  EXPECT_TRUE(p.acquire(K(0)).admitted);
  p.release(K(0));
  EXPECT_TRUE(p.guess(K(0)).refused);
  EXPECT_FALSE(p.guess(K(1)).refused);
  p.release(K(1), false);  // the read failed
  EXPECT_EQ(p.stats().scratch_free, 4u);
  EXPECT_FALSE(p.acquire(K(1)).hit) << "failed bytes are never served";
}
