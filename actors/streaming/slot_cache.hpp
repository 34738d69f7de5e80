// What the two cache tiers share. TierConfig configures one (the host pool, the device-cache manager):
// slots [0, cache_slots) are its cache, [cache_slots, cache_slots + scratch_slots) scratch slots for
// experts admission refused. SlotCache is the cache part: an ExpertCache whose resident experts each
// own one of `slots` numbered memory slots [0, slots). Admission takes a free slot (evicting per the
// policy), eviction and drop give it back. With slots == 0 there is no cache: nothing is resident and
// nothing is admitted (lookups still count as misses).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "actors/streaming/expert_cache.hpp"

namespace ferry {

struct TierConfig {
  uint32_t cache_slots = 0;    // experts the cache holds (0 = no cache: everything streams)
  uint32_t scratch_slots = 8;  // must be >= 1
  uint64_t expert_bytes = 0;   // bytes one expert takes (the slot size)
  CachePolicy policy = CachePolicy::block_aware;
  uint32_t min_rows = 2;
  HeatConfig heat;             // frequency policy: decay and usage prior
  tracer_actor tracer;         // optional: HIT / MISS / ADMISSION / EVICTION events
  // Host pool: scratch slots router guesses may hold at once, reading or parked (0 = none). A guess
  // takes a slot only while more than scratch_slots - guess_slots stay free for demands.
  uint32_t guess_slots = 0;
};

class SlotCache {
 public:
  SlotCache() = default;
  SlotCache(uint32_t slots, CachePolicy policy, uint32_t min_rows, HeatConfig heat = {});

  bool enabled() const { return cache_ != nullptr; }
  std::optional<uint32_t> slot_of(const expert_key& k) const;
  bool access(const expert_key& k, uint32_t rows = 1);  // counts a hit (true) or a miss (by `rows` rows)
  // Admits a missing expert (pinned) into a free slot, evicting unpinned ones as the policy needs; their
  // keys are appended to `evicted`. nullopt: refused (by admission, for want of room, or no cache).
  std::optional<uint32_t> admit(const expert_key& k, uint64_t bytes, uint32_t rows, uint32_t block_rows,
                                std::vector<expert_key>& evicted);
  void pin(const expert_key& k);
  void unpin(const expert_key& k);
  // Drops an unpinned resident whose bytes turned out bad, freeing its slot; false when absent or pinned.
  bool drop(const expert_key& k);

  uint32_t resident() const { return static_cast<uint32_t>(slot_.size()); }
  // Lookups, admissions, evictions and occupancy; the owner adds capacity and scratch.
  tier_stats stats() const;

 private:
  std::unique_ptr<ExpertCache> cache_;  // null: no cache
  std::unordered_map<expert_key, uint32_t> slot_;
  std::vector<uint32_t> free_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace ferry
