#include "actors/streaming/prefetch_queue.hpp"

#include <algorithm>

#include "io/errors.hpp"

namespace ferry {

PrefetchQueue::PrefetchQueue(size_t capacity) : capacity_(capacity) {
  if (capacity_ == 0) throw ConfigError("prefetch queue: capacity must be > 0");
}

bool PrefetchQueue::push(const expert_key& k) {
  if (tracked_.count(k)) return true;
  bool kept_all = true;
  if (queue_.size() == capacity_) {
    tracked_.erase(queue_.front());
    queue_.pop_front();
    ++counters_.dropped;
    kept_all = false;
  }
  queue_.push_back(k);
  tracked_[k] = false;
  ++counters_.pushed;
  return kept_all;
}

std::optional<expert_key> PrefetchQueue::pop() {
  if (queue_.empty()) return std::nullopt;
  expert_key k = queue_.front();
  queue_.pop_front();
  tracked_[k] = true;
  ++counters_.issued;
  return k;
}

bool PrefetchQueue::claim(const expert_key& k) {
  auto it = tracked_.find(k);
  if (it == tracked_.end()) return false;
  if (!it->second) queue_.erase(std::find(queue_.begin(), queue_.end(), k));
  tracked_.erase(it);
  ++counters_.hits;
  return true;
}

void PrefetchQueue::expire_layer(uint32_t layer) {
  std::erase_if(queue_, [&](const expert_key& k) { return k.layer == layer; });
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    if (it->first.layer == layer) {
      ++counters_.wasted;
      it = tracked_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace ferry
