#include "actors/streaming/expert_cache.hpp"

#include <cmath>

#include "io/errors.hpp"

namespace ferry {

ExpertCache::ExpertCache(CacheConfig cfg) : cfg_(cfg) {
  if (cfg_.capacity_experts == 0 && cfg_.capacity_bytes == 0)
    throw ConfigError("expert cache: set capacity_experts or capacity_bytes (both are 0)");
  if (cfg_.half_life <= 0) cfg_.half_life = cfg_.capacity_experts ? double(cfg_.capacity_experts) : 64.0;
  if (cfg_.policy == CachePolicy::frequency) heat_ = std::make_unique<ExpertHeat>(cfg_.heat);
}

// A score s at access time t decays as s * 2^-((now - t)/h). All entries decay at the same rate, so
// their order is that of log2(s) + t/h, which does not change with `now`: one static key per entry.
// LRU is the same ordering with the score ignored.
double ExpertCache::order_key(const Entry& e, const expert_key& k) const {
  if (cfg_.policy == CachePolicy::lru) return static_cast<double>(e.seq);
  if (heat_) return heat_->key(k);
  return std::log2(e.score) + static_cast<double>(e.seq) / cfg_.half_life;
}

void ExpertCache::touch(Entry& e, const expert_key& k) {
  ++clock_;
  order_.erase({e.key, k});
  e.score = e.score * std::exp2(-static_cast<double>(clock_ - e.seq) / cfg_.half_life) + 1.0;
  e.seq = clock_;
  e.key = order_key(e, k);
  order_.insert({e.key, k});
}

bool ExpertCache::access(const expert_key& k, uint32_t rows) {
  if (heat_) heat_->add(k, rows);
  auto it = entries_.find(k);
  if (it == entries_.end()) {
    ++counters_.misses;
    return false;
  }
  ++counters_.hits;
  touch(it->second, k);
  return true;
}

bool ExpertCache::admits(uint32_t rows, uint32_t block_rows) const {
  if (cfg_.policy != CachePolicy::block_aware || block_rows <= 1) return true;
  return rows >= cfg_.min_rows;
}

bool ExpertCache::fits(uint64_t extra_bytes, size_t extra_entries) const {
  if (cfg_.capacity_experts && entries_.size() + extra_entries > cfg_.capacity_experts) return false;
  if (cfg_.capacity_bytes && bytes_ + extra_bytes > cfg_.capacity_bytes) return false;
  return true;
}

bool ExpertCache::evict_one(std::vector<expert_key>* evicted) {
  for (auto it = order_.begin(); it != order_.end(); ++it) {
    auto e = entries_.find(it->second);
    if (e->second.pins > 0) continue;  // in use by a running layer
    bytes_ -= e->second.bytes;
    if (evicted) evicted->push_back(it->second);
    entries_.erase(e);
    order_.erase(it);
    ++counters_.evictions;
    return true;
  }
  return false;
}

// Frequency policy, cache full: k gets in only when it is hotter than the coldest unpinned resident.
bool ExpertCache::colder_than_victim(const expert_key& k, uint64_t bytes) const {
  if (!heat_ || fits(bytes, 1)) return false;
  for (const auto& [key, victim] : order_)
    if (entries_.at(victim).pins == 0) return heat_->key(k) <= key;
  return false;  // everything pinned: the room check below refuses
}

bool ExpertCache::insert(const expert_key& k, uint64_t bytes, uint32_t rows, uint32_t block_rows,
                         std::vector<expert_key>* evicted) {
  if (contains(k)) return true;
  bool too_big = (cfg_.capacity_bytes && bytes > cfg_.capacity_bytes);
  if (!admits(rows, block_rows) || too_big || colder_than_victim(k, bytes)) {
    ++counters_.refusals;
    return false;
  }
  // Evict only once we know room can be made, so a refusal leaves the cache untouched.
  size_t evictable = 0;
  uint64_t evictable_bytes = 0;
  for (auto& [key, e] : entries_)
    if (e.pins == 0) ++evictable, evictable_bytes += e.bytes;
  bool can = (!cfg_.capacity_experts || entries_.size() - evictable + 1 <= cfg_.capacity_experts) &&
             (!cfg_.capacity_bytes || bytes_ - evictable_bytes + bytes <= cfg_.capacity_bytes);
  if (!can) {
    ++counters_.refusals;
    return false;
  }
  while (!fits(bytes, 1)) evict_one(evicted);
  Entry e;
  e.bytes = bytes;
  e.seq = clock_;
  auto [it, _] = entries_.emplace(k, e);
  bytes_ += bytes;
  touch(it->second, k);  // score 0 -> 1 at the current time
  ++counters_.admissions;
  return true;
}

bool ExpertCache::erase(const expert_key& k) {
  auto it = entries_.find(k);
  if (it == entries_.end() || it->second.pins > 0) return false;
  order_.erase({it->second.key, k});
  bytes_ -= it->second.bytes;
  entries_.erase(it);
  return true;
}

void ExpertCache::pin(const expert_key& k) {
  if (auto it = entries_.find(k); it != entries_.end()) ++it->second.pins;
}
void ExpertCache::unpin(const expert_key& k) {
  if (auto it = entries_.find(k); it != entries_.end() && it->second.pins > 0) --it->second.pins;
}
bool ExpertCache::pinned(const expert_key& k) const {
  auto it = entries_.find(k);
  return it != entries_.end() && it->second.pins > 0;
}

size_t ExpertCache::run_block(const std::vector<BlockUse>& uses, uint32_t block_rows, uint64_t bytes) {
  size_t hits = 0;
  for (const auto& u : uses) {
    if (access(u.key, u.rows))
      ++hits;
    else
      insert(u.key, bytes, u.rows, block_rows);
  }
  return hits;
}

}  // namespace ferry
