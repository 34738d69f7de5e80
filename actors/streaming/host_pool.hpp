// The host-pool manager: the pinned-arena slots that hold expert bytes in host memory. Slots
// [0, cache_slots) are the cache (ExpertCache decides admission and eviction: block-aware, LRFU, never
// an expert in use); slots [cache_slots, cache_slots + scratch_slots) are scratch slots through which
// experts that were not admitted stream (read, computed, released). An acquire that finds no free slot
// waits (its response is delayed) until a release frees one, which bounds the bytes in flight.
// Router guesses (guess_atom) read into scratch slots, at most guess_slots at once. A guess released
// before any demand claimed it stays parked: its bytes are valid, a demand acquire of the key is a hit
// on that scratch slot, and a demand that finds no free scratch slot takes the oldest parked one.
// On the CPU back-end the host pool is the compute tier: compute reads expert bytes from these slots.
#pragma once

#include <cstdint>

#include "actors/streaming/slot_cache.hpp"
#include "messages/messages.hpp"

namespace ferry {

// Throws ferry::ConfigError for scratch_slots == 0. Traces ADMISSION / EVICTION (tier HOST).
host_pool_actor spawn_host_pool(caf::actor_system& sys, TierConfig cfg);

}  // namespace ferry
