// The host-pool manager: the pinned-arena slots that hold expert bytes in host memory. Slots
// [0, cache_slots) are the cache (ExpertCache decides admission and eviction: block-aware, LRFU, never
// an expert in use); slots [cache_slots, cache_slots + scratch_slots) are scratch slots through which
// experts that were not admitted stream (read, computed, released). An acquire that finds no free slot
// waits (its response is delayed) until a release frees one, which bounds the bytes in flight.
// On the CPU back-end the host pool is the compute tier: compute reads expert bytes from these slots.
#pragma once

#include <cstdint>

#include "actors/streaming/expert_cache.hpp"
#include "messages/messages.hpp"

namespace ferry {

struct HostPoolConfig {
  uint32_t cache_slots = 0;    // experts the cache holds (0 = no cache: everything streams)
  uint32_t scratch_slots = 8;  // must be >= 1
  uint64_t expert_bytes = 0;   // bytes one expert takes (the slot size)
  CachePolicy policy = CachePolicy::block_aware;
  uint32_t min_rows = 2;
  HeatConfig heat;             // frequency policy: decay and usage prior
  tracer_actor tracer;         // optional: ADMISSION / EVICTION events
};

// Throws ferry::ConfigError for scratch_slots == 0.
host_pool_actor spawn_host_pool(caf::actor_system& sys, HostPoolConfig cfg);

}  // namespace ferry
