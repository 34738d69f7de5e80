#include "actors/streaming/host_pool.hpp"

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <caf/all.hpp>

#include "actors/tracing/trace_emitter.hpp"
#include "io/errors.hpp"
#include "messages/trace.pb.h"

namespace ferry {
namespace {

struct Waiting {
  expert_key key;
  uint32_t rows = 1, block_rows = 1;
  bool keep = true;
  caf::typed_response_promise<host_grant> promise;
};

struct pool_state {
  TierConfig cfg;
  TraceEmitter trace;                                // tier HOST
  SlotCache cache;                                   // slots [0, cache_slots)
  std::vector<uint32_t> free_scratch;
  std::unordered_map<expert_key, uint32_t> scratch;  // key -> scratch slot in use (or parked)
  std::unordered_set<expert_key> guesses;            // scratch keys a router guess holds, unclaimed
  std::deque<expert_key> parked;                     // guesses landed and released unclaimed, oldest first
  std::deque<Waiting> waiting;
  std::unordered_set<expert_key> drop_on_release;   // cached here, now held by the device cache
  static inline const char* name = "host_pool";
};

using pool = host_pool_actor::stateful_pointer<pool_state>;

// Tries to admit a missing key into the cache: evicts unpinned entries as needed. Returns the slot.
std::optional<uint32_t> admit(pool self, const expert_key& k, uint32_t rows, uint32_t block_rows) {
  auto& st = self->state;
  if (!st.cache.enabled()) return std::nullopt;
  std::vector<expert_key> evicted;
  const auto slot = st.cache.admit(k, st.cfg.expert_bytes, rows, block_rows, evicted);
  for (auto& v : evicted) st.trace(trace::EVICTION, 0, v);
  st.trace(trace::ADMISSION, 0, k, {.rows = rows, .detail = slot ? "" : "refused"});
  return slot;
}

// The oldest parked guess gives up its slot (its bytes were a guess nobody claimed); returns the slot.
uint32_t unpark_oldest(pool_state& st) {
  const expert_key old = st.parked.front();
  st.parked.pop_front();
  st.guesses.erase(old);
  const uint32_t slot = st.scratch.at(old);
  st.scratch.erase(old);
  return slot;
}

// A free scratch slot, taking the oldest parked guess's when none is free. nullopt: every scratch slot
// is in use.
std::optional<uint32_t> take_scratch(pool_state& st) {
  if (st.free_scratch.empty() && !st.parked.empty()) return unpark_oldest(st);
  if (st.free_scratch.empty()) return std::nullopt;
  const uint32_t slot = st.free_scratch.back();
  st.free_scratch.pop_back();
  return slot;
}

// A parked guess claimed by a demand: the slot is the demand's now (freed at its release).
std::optional<host_grant> claim_parked(pool_state& st, const expert_key& k) {
  auto it = std::find(st.parked.begin(), st.parked.end(), k);
  if (it == st.parked.end()) return std::nullopt;
  st.parked.erase(it);
  st.guesses.erase(k);
  return host_grant{true, false, {st.scratch.at(k), 0}};
}

// The answer to an acquire, or nothing when the caller must wait for a free scratch slot.
// keep = false: the device cache admitted k, so a copy here would only duplicate it (the tiers then
// hold distinct experts, device + host of them in all): a miss streams through scratch and a cached
// copy is dropped once released.
std::optional<host_grant> try_acquire(pool self, const expert_key& k, uint32_t rows, uint32_t block_rows, bool keep) {
  auto& st = self->state;
  const bool prefetch = rows == 0;
  if (const auto slot = st.cache.slot_of(k)) {
    if (!prefetch) st.cache.access(k, rows);
    st.cache.pin(k);
    if (!keep) st.drop_on_release.insert(k);
    return host_grant{true, true, {*slot, 0}};
  }
  if (!prefetch) st.cache.access(k, rows);  // counts the miss (a parked guess is not cached)
  if (!prefetch)
    if (auto g = claim_parked(st, k)) return g;
  const auto cached = keep ? admit(self, k, prefetch ? 1 : rows, prefetch ? 1 : block_rows) : std::nullopt;
  if (cached) return host_grant{false, true, {*cached, 0}};
  if (prefetch) return host_grant{false, false, {}, true};  // no room: a prefetch never takes scratch or waits
  const auto slot = take_scratch(st);
  if (!slot) return std::nullopt;
  st.scratch.emplace(k, *slot);
  return host_grant{false, false, {*slot, 0}};
}

// A router guess: a scratch slot while guesses hold fewer than guess_slots and more than the demands'
// share stays free. Never admitted (the cache's contents do not depend on guesses), never waits.
host_grant try_guess(pool self, const expert_key& k) {
  auto& st = self->state;
  const host_grant refused{false, false, {}, true};
  if (st.cache.slot_of(k) || st.scratch.count(k)) return refused;  // cached, streaming or parked already
  const size_t reserve = st.cfg.scratch_slots - std::min(st.cfg.guess_slots, st.cfg.scratch_slots);
  uint32_t slot = 0;
  if (st.guesses.size() < st.cfg.guess_slots) {
    if (st.free_scratch.size() <= reserve) return refused;  // the demands' share
    slot = st.free_scratch.back();
    st.free_scratch.pop_back();
  } else {
    if (st.parked.empty()) return refused;  // every guess slot is reading
    slot = unpark_oldest(st);               // the oldest parked guess gives its slot to the new one
  }
  st.scratch.emplace(k, slot);
  st.guesses.insert(k);
  return host_grant{false, false, {slot, 0}};
}

void serve_waiting(pool self) {
  auto& st = self->state;
  while (!st.waiting.empty()) {
    Waiting& w = st.waiting.front();
    auto g = try_acquire(self, w.key, w.rows, w.block_rows, w.keep);
    if (!g) return;
    w.promise.deliver(*g);
    st.waiting.pop_front();
  }
}

void release(pool self, const expert_key& k, bool ok) {
  auto& st = self->state;
  if (auto it = st.scratch.find(k); it != st.scratch.end()) {
    if (ok && st.guesses.count(k)) {
      st.parked.push_back(k);  // a landed guess nobody claimed: keep its bytes for a demand
    } else {
      st.guesses.erase(k);
      st.free_scratch.push_back(it->second);
      st.scratch.erase(it);
    }
  } else if (st.cache.slot_of(k)) {
    st.cache.unpin(k);
    const bool moved = st.drop_on_release.erase(k) > 0;
    if (!ok || moved) st.cache.drop(k);  // failed fill: the slot holds garbage; moved: the device holds it
  }
  serve_waiting(self);
}

tier_stats stats_of(const pool_state& st) {
  tier_stats s = st.cache.stats();
  s.capacity = st.cfg.cache_slots;
  s.scratch = st.cfg.scratch_slots;
  s.scratch_free = static_cast<uint32_t>(st.free_scratch.size());
  s.waiting = static_cast<uint32_t>(st.waiting.size());
  return s;
}

host_pool_actor::behavior_type pool_fun(pool self, TierConfig cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.trace = TraceEmitter(st.cfg.tracer, trace::HOST, st.cfg.expert_bytes);
  st.cache = SlotCache(st.cfg.cache_slots, st.cfg.policy, st.cfg.min_rows, st.cfg.heat);
  for (uint32_t i = st.cfg.scratch_slots; i-- > 0;) st.free_scratch.push_back(st.cfg.cache_slots + i);
  return {
      [=](acquire_atom, const expert_key& k, uint32_t rows, uint32_t block_rows,
          bool keep) -> caf::typed_response_promise<host_grant> {
        auto rp = self->make_response_promise<host_grant>();
        if (auto g = try_acquire(self, k, rows, block_rows, keep))
          rp.deliver(*g);
        else
          self->state.waiting.push_back({k, rows, block_rows, keep, rp});
        return rp;
      },
      [=](guess_atom, const expert_key& k) { return try_guess(self, k); },
      [=](release_atom, const expert_key& k, bool ok) { release(self, k, ok); },
      [=](stats_atom) { return stats_of(self->state); },
  };
}

}  // namespace

host_pool_actor spawn_host_pool(caf::actor_system& sys, TierConfig cfg) {
  if (cfg.scratch_slots == 0) throw ConfigError("host pool: scratch_slots must be >= 1");
  return sys.spawn(pool_fun, std::move(cfg));
}

}  // namespace ferry
