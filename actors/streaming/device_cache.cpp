#include "actors/streaming/device_cache.hpp"

#include <memory>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>

#include "actors/tracing/trace_emitter.hpp"
#include "io/errors.hpp"
#include "messages/trace.pb.h"

namespace ferry {
namespace {

struct device_cache_state {
  TierConfig cfg;
  TraceEmitter trace;                                 // tier DEVICE
  SlotCache cache;                                    // slots [0, cache_slots)
  uint32_t next_scratch = 0;
  uint64_t pinned_step = 0;
  std::vector<expert_key> pinned;                     // the planned call's cached experts
  static inline const char* name = "device_cache";
};

using dcache = device_cache_actor::stateful_pointer<device_cache_state>;

void unpin_all(device_cache_state& st) {
  for (const auto& k : st.pinned) st.cache.unpin(k);
  st.pinned.clear();
}

// A miss: a cache slot when admission allows (evicting unpinned experts), else the next scratch slot.
device_place place_miss(dcache self, uint64_t step, const expert_key& k, uint32_t rows, uint32_t block_rows) {
  auto& st = self->state;
  std::vector<expert_key> evicted;
  if (const auto slot = st.cache.admit(k, st.cfg.expert_bytes, rows, block_rows, evicted)) {
    for (const auto& v : evicted) st.trace(trace::EVICTION, step, v);
    st.pinned.push_back(k);
    st.trace(trace::ADMISSION, step, k, {.rows = rows});
    return device_place{*slot, false, true};
  }
  if (st.cache.enabled()) st.trace(trace::ADMISSION, step, k, {.rows = rows, .detail = "refused"});
  const uint32_t slot = st.cfg.cache_slots + st.next_scratch;
  st.next_scratch = (st.next_scratch + 1) % st.cfg.scratch_slots;
  return device_place{slot, false, false};
}

device_plan plan(dcache self, const device_request& r) {
  auto& st = self->state;
  unpin_all(st);  // a call that never said done (it failed) must not pin forever
  st.pinned_step = r.step;
  device_plan p;
  p.places.reserve(r.experts.size());
  for (size_t i = 0; i < r.experts.size(); ++i) {
    const expert_key k{r.layer, r.experts[i]};
    const uint32_t rows = i < r.rows.size() ? r.rows[i] : 1;
    st.cache.access(k, rows);  // counts the hit or the miss
    if (const auto slot = st.cache.slot_of(k)) {
      st.cache.pin(k);
      st.pinned.push_back(k);
      st.trace(trace::HIT, r.step, k, {.rows = rows});
      p.places.push_back(device_place{*slot, true, true});
      continue;
    }
    st.trace(trace::MISS, r.step, k, {.rows = rows});
    p.places.push_back(place_miss(self, r.step, k, rows, r.block_rows));
  }
  return p;
}

tier_stats stats_of(const device_cache_state& st) {
  tier_stats s = st.cache.stats();
  s.capacity = st.cfg.cache_slots;
  s.scratch = st.cfg.scratch_slots;
  return s;
}

device_cache_actor::behavior_type dcache_fun(dcache self, TierConfig cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.trace = TraceEmitter(st.cfg.tracer, trace::DEVICE, st.cfg.expert_bytes);
  st.cache = SlotCache(st.cfg.cache_slots, st.cfg.policy, st.cfg.min_rows, st.cfg.heat);
  return {
      [=](plan_atom, const device_request& r) { return plan(self, r); },
      [=](done_atom, uint64_t step) {
        auto& s = self->state;
        if (step == s.pinned_step) unpin_all(s);
      },
      [=](drop_atom, const expert_key& k) {
        if (self->state.cache.drop(k)) self->state.trace(trace::EVICTION, 0, k, {.detail = "bad bytes"});
      },
      [=](peek_atom, uint32_t layer, const std::vector<uint32_t>& experts) {
        std::vector<uint32_t> absent;
        for (uint32_t e : experts)
          if (!self->state.cache.slot_of({layer, e})) absent.push_back(e);
        return absent;
      },
      [=](stats_atom) { return stats_of(self->state); },
  };
}

}  // namespace

device_cache_actor spawn_device_cache(caf::actor_system& sys, TierConfig cfg) {
  if (cfg.scratch_slots == 0) throw ConfigError("device cache: scratch_slots must be >= 1");
  return sys.spawn(dcache_fun, std::move(cfg));
}

}  // namespace ferry
