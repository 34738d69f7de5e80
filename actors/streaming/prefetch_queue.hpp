// A bounded queue of next-layer prefetch candidates. While layer l computes, the scheduler pushes the
// experts layer l+1 will likely need; the reader side pops them when it has spare queue depth. When
// full, the oldest candidate is dropped (a stale guess is the least useful). A later demand request
// for a prefetched expert counts as a prefetch hit; candidates of a layer that has passed are wasted.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>

#include "messages/messages.hpp"

namespace ferry {

struct PrefetchCounters {
  uint64_t pushed = 0, dropped = 0, issued = 0, hits = 0, wasted = 0;
};

class PrefetchQueue {
 public:
  explicit PrefetchQueue(size_t capacity);  // throws ConfigError for capacity 0

  // Adds a candidate (duplicates of a queued or issued key are ignored). Returns false when the oldest
  // candidate had to be dropped to make room.
  bool push(const expert_key& k);
  // The next candidate to read; it stays tracked as issued until claimed or expired.
  std::optional<expert_key> pop();
  // A demand request: true (a prefetch hit) when k was issued or still queued; stops tracking it.
  bool claim(const expert_key& k);
  // Layer `layer` has run: its unclaimed candidates are wasted and forgotten.
  void expire_layer(uint32_t layer);

  size_t queued() const { return queue_.size(); }
  size_t capacity() const { return capacity_; }
  const PrefetchCounters& counters() const { return counters_; }

 private:
  size_t capacity_;
  std::deque<expert_key> queue_;
  std::unordered_map<expert_key, bool> tracked_;  // key -> issued
  PrefetchCounters counters_;
};

}  // namespace ferry
