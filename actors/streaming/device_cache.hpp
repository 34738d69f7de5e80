// The device-cache manager (DESIGN.md "Actors"): owns the bookkeeping of the GPU expert slots above the
// host pool. Slots [0, cache_slots) are the cache (ExpertCache: block-aware admission, LRFU eviction,
// never an expert in use); slots [cache_slots, cache_slots + scratch_slots) are scratch slots that
// experts refused by admission stream through. One plan per MoE layer call classifies every expert at
// once (one round trip per layer, not per expert): hit, admitted miss, or refused miss, and pins the
// call's cached experts until done(step). Scratch slots are handed out round-robin; reusing one inside
// a call is safe because the device tier orders each upload after the previous user's compute (events).
// Device hits, misses, admissions and evictions go to the tracer (tier DEVICE).
#pragma once

#include <cstdint>

#include "actors/streaming/slot_cache.hpp"
#include "messages/messages.hpp"

namespace ferry {

// Throws ferry::ConfigError for scratch_slots == 0.
device_cache_actor spawn_device_cache(caf::actor_system& sys, TierConfig cfg);

}  // namespace ferry
