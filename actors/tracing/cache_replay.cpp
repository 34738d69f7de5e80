#include "actors/tracing/cache_replay.hpp"

#include <algorithm>
#include <limits>
#include <list>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace ferry {
namespace {

// The hits a fixed resident set gets: every use of a member.
ReplayHits replay_set(const std::vector<LayerCall>& calls, const std::unordered_set<expert_key>& set) {
  ReplayHits r;
  for (const auto& c : calls)
    for (const auto& u : c.uses) {
      ++r.requests;
      r.hits += set.count(u.key);
    }
  return r;
}

// The `capacity` keys with the highest score (ties broken by key, so the result is deterministic).
std::unordered_set<expert_key> top_keys(const std::unordered_map<expert_key, double>& score, uint64_t capacity) {
  std::vector<std::pair<double, expert_key>> v;
  v.reserve(score.size());
  for (const auto& [k, s] : score) v.push_back({s, k});
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  if (v.size() > capacity) v.resize(capacity);
  std::unordered_set<expert_key> out;
  for (const auto& [s, k] : v) out.insert(k);
  return out;
}

}  // namespace

uint64_t count_requests(const std::vector<LayerCall>& calls) {
  uint64_t n = 0;
  for (const auto& c : calls) n += c.uses.size();
  return n;
}

ReplayHits replay_best_static(const std::vector<LayerCall>& calls, uint64_t capacity) {
  std::unordered_map<expert_key, double> used;
  for (const auto& c : calls)
    for (const auto& u : c.uses) used[u.key] += 1;
  return replay_set(calls, top_keys(used, capacity));
}

ReplayHits replay_prior_static(const std::vector<LayerCall>& calls, uint64_t capacity, const ExpertPrior& prior) {
  std::unordered_map<expert_key, double> score(prior.begin(), prior.end());
  return replay_set(calls, top_keys(score, capacity));
}

// Belady with bypass. Next uses are call indexes; the experts of the call being served are in use and
// never evicted by it.
ReplayHits replay_belady(const std::vector<LayerCall>& calls, uint64_t capacity) {
  constexpr uint64_t never = std::numeric_limits<uint64_t>::max();
  std::unordered_map<expert_key, std::vector<uint64_t>> at;  // call indexes using each key
  for (uint64_t i = 0; i < calls.size(); ++i)
    for (const auto& u : calls[i].uses) at[u.key].push_back(i);
  std::unordered_map<expert_key, size_t> seen;  // uses of each key served so far
  auto next_use = [&](const expert_key& k) {
    const auto& v = at[k];
    const size_t n = ++seen[k];
    return n < v.size() ? v[n] : never;
  };
  std::unordered_map<expert_key, uint64_t> resident;  // key -> next use
  std::set<std::pair<uint64_t, expert_key>> by_next;
  ReplayHits r;
  for (uint64_t i = 0; i < calls.size(); ++i)
    for (const auto& u : calls[i].uses) {
      ++r.requests;
      const uint64_t nu = next_use(u.key);
      if (auto it = resident.find(u.key); it != resident.end()) {
        ++r.hits;
        by_next.erase({it->second, u.key});
        it->second = nu;
        by_next.insert({nu, u.key});
        continue;
      }
      if (capacity == 0 || nu == never) continue;
      if (resident.size() >= capacity) {
        auto far = std::prev(by_next.end());  // needed furthest ahead (never = past the end)
        if (far->first <= nu || far->first == i) continue;  // bypass: the newcomer is needed later
        resident.erase(far->second);
        by_next.erase(far);
      }
      resident[u.key] = nu;
      by_next.insert({nu, u.key});
    }
  return r;
}

ReplayHits replay_lru(const std::vector<LayerCall>& calls, uint64_t capacity) {
  std::list<expert_key> order;  // most recent first
  std::unordered_map<expert_key, std::list<expert_key>::iterator> where;
  ReplayHits r;
  for (const auto& c : calls)
    for (const auto& u : c.uses) {
      ++r.requests;
      if (auto it = where.find(u.key); it != where.end()) {
        ++r.hits;
        order.splice(order.begin(), order, it->second);
        continue;
      }
      if (capacity == 0) continue;
      if (where.size() >= capacity) {
        where.erase(order.back());
        order.pop_back();
      }
      order.push_front(u.key);
      where[u.key] = order.begin();
    }
  return r;
}

ReplayHits replay_tiers(const std::vector<LayerCall>& calls, const TierReplay& t) {
  auto make = [&](uint64_t cap) {
    CacheConfig c = t.policy;
    c.capacity_experts = cap;
    c.capacity_bytes = 0;
    return cap ? std::make_unique<ExpertCache>(c) : nullptr;
  };
  auto dev = make(t.device), host = make(t.host);
  const bool exclusive = t.exclusive && t.policy.policy == CachePolicy::frequency;
  if (t.warm && host && t.policy.heat.prior)
    for (const auto& k : hottest(*t.policy.heat.prior, t.host)) host->insert(k, 1, 1, 1);
  ReplayHits r;
  std::vector<std::pair<ExpertCache*, expert_key>> pinned;
  for (const auto& c : calls) {
    for (const auto& u : c.uses) {
      ++r.requests;
      if (dev && dev->access(u.key, u.rows)) {
        ++r.device_hits;
        dev->pin(u.key);
        pinned.push_back({dev.get(), u.key});
        continue;
      }
      const bool dev_keeps = dev && dev->insert(u.key, 1, u.rows, c.block_rows);
      if (dev_keeps) {
        dev->pin(u.key);
        pinned.push_back({dev.get(), u.key});
      }
      if (!host) continue;
      if (host->access(u.key, u.rows)) {
        ++r.host_hits;
        if (dev_keeps && exclusive) {  // the device holds it now: the host slot is better spent
          host->erase(u.key);
          continue;
        }
      } else if ((dev_keeps && exclusive) || !host->insert(u.key, 1, u.rows, c.block_rows)) {
        continue;
      }
      host->pin(u.key);
      pinned.push_back({host.get(), u.key});
    }
    for (auto& [cache, k] : pinned) cache->unpin(k);
    pinned.clear();
  }
  r.hits = r.device_hits + r.host_hits;
  return r;
}

CacheBounds cache_bounds(const std::vector<LayerCall>& calls, uint64_t capacity, const ExpertPrior* prior) {
  CacheBounds b;
  b.capacity = capacity;
  b.requests = count_requests(calls);
  b.best_static = replay_best_static(calls, capacity);
  b.belady = replay_belady(calls, capacity);
  b.lru = replay_lru(calls, capacity);
  if (prior) {
    b.has_prior = true;
    b.prior_static = replay_prior_static(calls, capacity, *prior);
  }
  return b;
}

}  // namespace ferry
