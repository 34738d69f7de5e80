// Admission and eviction policy of an expert cache (the host pool and the device cache use one each).
// Pure bookkeeping: which experts are resident, no memory. The owner maps keys to slots.
//
// Why block-aware admission: a verification block of R rows touches up to R*top_k experts, more than
// a cache holds; admitting all of them (plain LRU) evicts everything the next block would have hit,
// and in a cyclic pattern the hit rate goes to zero. Admitting only experts that at least `min_rows`
// rows of the block use keeps the widely shared ones. A plain step (block_rows == 1) always admits.
// Eviction is LRFU-like: every access adds 1 to a score that halves every `half_life` accesses; the
// lowest score goes first. Pinned experts (in use by a running layer) are never evicted.
// The frequency policy (cache_policy.hpp) knows every expert's decayed frequency, seeded with usage
// counts: an access adds its rows, eviction takes the coldest resident and admission refuses an expert
// no hotter than that victim, so rows of a block weigh in by count instead of by a min_rows cut.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/streaming/cache_policy.hpp"
#include "messages/messages.hpp"

namespace ferry {

enum class CachePolicy { lru, block_aware, frequency };

struct CacheConfig {
  size_t capacity_experts = 0;  // 0 = no count limit
  uint64_t capacity_bytes = 0;  // 0 = no byte limit (one of the two must be set)
  CachePolicy policy = CachePolicy::block_aware;
  uint32_t min_rows = 2;        // block-aware: rows of a block that must use an expert to admit it
  double half_life = 0;         // accesses; 0 = the capacity in experts (or 64 with a byte limit)
  HeatConfig heat;              // frequency: decay (in row-uses) and the usage prior
};

struct CacheCounters {
  uint64_t hits = 0, misses = 0, admissions = 0, refusals = 0, evictions = 0;
};

// One expert as a block uses it: the key and how many rows of the block route to it.
struct BlockUse {
  expert_key key;
  uint32_t rows = 1;
};

class ExpertCache {
 public:
  explicit ExpertCache(CacheConfig cfg);  // throws ConfigError when no capacity is given

  // Records an access by `rows` rows; true on a hit (misses are counted too).
  bool access(const expert_key& k, uint32_t rows = 1);
  bool contains(const expert_key& k) const { return entries_.count(k) != 0; }

  bool admits(uint32_t rows, uint32_t block_rows) const;
  // Inserts a missing expert when admission allows and room can be made without touching pinned
  // entries; evicted keys are appended to `evicted`. Returns whether it was inserted.
  bool insert(const expert_key& k, uint64_t bytes, uint32_t rows, uint32_t block_rows,
              std::vector<expert_key>* evicted = nullptr);

  // Drops a resident, unpinned entry (its bytes turned out bad); false when absent or pinned.
  bool erase(const expert_key& k);

  void pin(const expert_key& k);    // no-op for a non-resident key
  void unpin(const expert_key& k);
  bool pinned(const expert_key& k) const;

  // One block in order: access each use; a miss is inserted per the policy (bytes each). Returns hits.
  size_t run_block(const std::vector<BlockUse>& uses, uint32_t block_rows, uint64_t bytes);

  const CacheCounters& counters() const { return counters_; }
  size_t size() const { return entries_.size(); }
  uint64_t bytes() const { return bytes_; }
  const CacheConfig& config() const { return cfg_; }

 private:
  struct Entry {
    uint64_t bytes = 0;
    double key = 0;  // eviction order (lower goes first), see order_key()
    uint64_t seq = 0;
    double score = 0;  // decayed access count as of `seq`
    uint32_t pins = 0;
  };
  double order_key(const Entry& e, const expert_key& k) const;
  bool colder_than_victim(const expert_key& k, uint64_t bytes) const;
  void touch(Entry& e, const expert_key& k);
  bool fits(uint64_t extra_bytes, size_t extra_entries) const;
  bool evict_one(std::vector<expert_key>* evicted);

  CacheConfig cfg_;
  uint64_t clock_ = 0;
  uint64_t bytes_ = 0;
  std::unordered_map<expert_key, Entry> entries_;
  std::set<std::pair<double, expert_key>> order_;
  CacheCounters counters_;
  std::unique_ptr<ExpertHeat> heat_;  // frequency policy only
};

}  // namespace ferry
