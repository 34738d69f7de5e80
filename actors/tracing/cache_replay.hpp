// Offline cache analysis: replays a run's own expert requests (MoE layer calls in order) against the
// bounds every online cache policy lives between, at the run's capacities:
//  - the best static set in hindsight: the C experts this run used most, resident from the start
//    (with independent draws per token no online policy can expect more);
//  - the offline optimum (Belady with bypass: evict, or do not admit, the expert needed furthest in
//    the future) of one cache of C = device + host experts;
//  - plain LRU of C experts;
//  - the engine's own two tiers (device cache above the host pool) with a given policy.
// `ferry trace` prints these next to what the scheduler achieved; the cache tests use them on
// synthetic request sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/streaming/expert_cache.hpp"

namespace ferry {

// One MoE layer call: the experts it used (each once) and how many rows of its block route to each.
struct LayerCall {
  uint32_t layer = 0;
  uint32_t block_rows = 1;
  std::vector<BlockUse> uses;
};

struct ReplayHits {
  uint64_t requests = 0, hits = 0;
  uint64_t device_hits = 0, host_hits = 0;  // tiered replays only
  double rate() const { return requests ? double(hits) / double(requests) : 0.0; }
};

uint64_t count_requests(const std::vector<LayerCall>& calls);

ReplayHits replay_best_static(const std::vector<LayerCall>& calls, uint64_t capacity);
// The static set of the `capacity` experts with the highest prior counts (the usage file's top).
ReplayHits replay_prior_static(const std::vector<LayerCall>& calls, uint64_t capacity, const ExpertPrior& prior);
ReplayHits replay_belady(const std::vector<LayerCall>& calls, uint64_t capacity);
ReplayHits replay_lru(const std::vector<LayerCall>& calls, uint64_t capacity);

struct TierReplay {
  uint64_t device = 0, host = 0;  // capacities in experts (device 0 = no device tier)
  CacheConfig policy;             // capacity_experts is set per tier
  bool exclusive = true;          // frequency: the host pool does not keep what the device cache admitted
  // Warm start: the host pool starts with the `host` experts of highest prior (policy.heat.prior).
  bool warm = false;
};

// The engine's tiers: every use asks the device cache; a device miss asks the host pool. A call's
// cached experts are pinned until it ends.
ReplayHits replay_tiers(const std::vector<LayerCall>& calls, const TierReplay& t);

struct CacheBounds {
  uint64_t capacity = 0, requests = 0;
  ReplayHits best_static, belady, lru, prior_static;
  bool has_prior = false;
};
CacheBounds cache_bounds(const std::vector<LayerCall>& calls, uint64_t capacity, const ExpertPrior* prior);

}  // namespace ferry
