// An ExpertCache whose resident experts each own one of `slots` numbered memory slots [0, slots): the
// pairing both the host pool (pinned host slots) and the device-cache manager (GPU slots) keep.
// Admission takes a free slot (evicting per the policy), eviction and drop give it back. With
// slots == 0 there is no cache: nothing is resident and nothing is admitted.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "actors/streaming/expert_cache.hpp"

namespace ferry {

class SlotCache {
 public:
  SlotCache() = default;
  SlotCache(uint32_t slots, CachePolicy policy, uint32_t min_rows, HeatConfig heat = {});

  bool enabled() const { return cache_ != nullptr; }
  std::optional<uint32_t> slot_of(const expert_key& k) const;
  void access(const expert_key& k, uint32_t rows = 1);  // counts a hit or a miss (by `rows` rows)
  // Admits a missing expert (pinned) into a free slot, evicting unpinned ones as the policy needs; their
  // keys are appended to `evicted`. nullopt: refused (by admission, for want of room, or no cache).
  std::optional<uint32_t> admit(const expert_key& k, uint64_t bytes, uint32_t rows, uint32_t block_rows,
                                std::vector<expert_key>& evicted);
  void pin(const expert_key& k);
  void unpin(const expert_key& k);
  // Drops an unpinned resident whose bytes turned out bad, freeing its slot; false when absent or pinned.
  bool drop(const expert_key& k);

  CacheCounters counters() const { return cache_ ? cache_->counters() : CacheCounters{}; }
  uint32_t resident() const { return static_cast<uint32_t>(slot_.size()); }
  uint64_t bytes() const { return cache_ ? cache_->bytes() : 0; }

 private:
  std::unique_ptr<ExpertCache> cache_;  // null: no cache
  std::unordered_map<expert_key, uint32_t> slot_;
  std::vector<uint32_t> free_;
};

}  // namespace ferry
