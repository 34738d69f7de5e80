#include "actors/streaming/slot_cache.hpp"

namespace ferry {

SlotCache::SlotCache(uint32_t slots, CachePolicy policy, uint32_t min_rows, HeatConfig heat) {
  if (slots == 0) return;
  CacheConfig cc;
  cc.capacity_experts = slots;
  cc.policy = policy;
  cc.min_rows = min_rows;
  cc.heat = std::move(heat);
  cache_ = std::make_unique<ExpertCache>(cc);
  for (uint32_t i = slots; i-- > 0;) free_.push_back(i);  // slot 0 is handed out first
}

std::optional<uint32_t> SlotCache::slot_of(const expert_key& k) const {
  auto it = slot_.find(k);
  if (it == slot_.end()) return std::nullopt;
  return it->second;
}

bool SlotCache::access(const expert_key& k, uint32_t rows) {
  if (cache_) cache_->access(k, rows);
  const bool hit = slot_.count(k) != 0;
  ++(hit ? hits_ : misses_);
  return hit;
}

tier_stats SlotCache::stats() const {
  tier_stats s;
  s.hits = hits_;
  s.misses = misses_;
  if (cache_) {
    s.admissions = cache_->counters().admissions;
    s.refusals = cache_->counters().refusals;
    s.evictions = cache_->counters().evictions;
    s.resident_bytes = cache_->bytes();
  }
  s.resident = resident();
  return s;
}

std::optional<uint32_t> SlotCache::admit(const expert_key& k, uint64_t bytes, uint32_t rows, uint32_t block_rows,
                                         std::vector<expert_key>& evicted) {
  if (!cache_) return std::nullopt;
  const size_t before = evicted.size();
  if (!cache_->insert(k, bytes, rows, block_rows, &evicted)) return std::nullopt;
  for (size_t i = before; i < evicted.size(); ++i) {
    auto it = slot_.find(evicted[i]);
    free_.push_back(it->second);
    slot_.erase(it);
  }
  const uint32_t slot = free_.back();
  free_.pop_back();
  slot_.emplace(k, slot);
  cache_->pin(k);
  return slot;
}

void SlotCache::pin(const expert_key& k) {
  if (cache_) cache_->pin(k);
}

void SlotCache::unpin(const expert_key& k) {
  if (cache_) cache_->unpin(k);
}

bool SlotCache::drop(const expert_key& k) {
  auto it = slot_.find(k);
  if (it == slot_.end() || !cache_->erase(k)) return false;
  free_.push_back(it->second);
  slot_.erase(it);
  return true;
}

}  // namespace ferry
