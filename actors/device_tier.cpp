#include "actors/device_tier.hpp"

namespace ferry {
namespace {
uint64_t key_of(const expert_key& k) { return (uint64_t(k.layer) << 32) | k.expert; }
}  // namespace

DeviceComputeTier::DeviceComputeTier(ExpertGeometry g, Backend& be, uint64_t cache_experts, uint32_t min_rows)
    : g_(g), be_(be), bytes_(g.payload_bytes()), capacity_(size_t(cache_experts)), min_rows_(min_rows) {
  base_ = static_cast<std::byte*>(be_.alloc(bytes_ * (capacity_ + 1)));
}

DeviceComputeTier::~DeviceComputeTier() { be_.release(base_); }

bool DeviceComputeTier::resident(const expert_key& k, ExpertWeights& w) {
  auto it = map_.find(key_of(k));
  if (it == map_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
  w = g_.view(slot(it->second.slot));
  ++hits_;
  return true;
}

ExpertWeights DeviceComputeTier::weights(const expert_key& k, const std::byte* host) {
  size_t s = capacity_;  // scratch
  if (admit_next_ && capacity_ > 0) {
    if (map_.size() < capacity_) {
      s = map_.size();
    } else {  // evict the least recently used expert (none is in use: one expert computes at a time)
      const expert_key victim = lru_.back();
      lru_.pop_back();
      auto v = map_.find(key_of(victim));
      s = v->second.slot;
      map_.erase(v);
    }
    lru_.push_front(k);
    map_[key_of(k)] = Entry{s, lru_.begin()};
  }
  be_.upload(slot(s), host, bytes_);
  ++uploads_;
  return g_.view(slot(s));
}

}  // namespace ferry
