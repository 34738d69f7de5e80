// Frequency with decay: how hot each expert is, for the `frequency` cache policy (ExpertCache).
//
// Why: routing draws each token's experts from a skewed, slowly changing distribution. A cache that
// knows each expert's frequency, not only the residents' (as LRU and LRFU do), can refuse to admit an
// expert colder than everything it holds, and so converges on the most-used set instead of churning.
// The frequency is learned online (every access adds its rows) and seeded with usage counts (the
// store's usage.json: the K3 counts at prepare time, then what earlier runs saw), so the first tokens
// already find the hot set.
//
// A count c recorded at clock t is worth c * 2^-((now - t) / half_life) now. Every expert decays at the
// same rate, so the order of two experts is that of log2(c) + t / half_life, which does not change with
// `now`: each expert has one static order key, updated only when it is accessed.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "io/store/expert_store.hpp"
#include "messages/messages.hpp"

namespace ferry {

// Prior pseudo-counts per expert (in row-uses, like the live counts).
using ExpertPrior = std::unordered_map<expert_key, double>;

struct HeatConfig {
  double half_life = 0;  // row-uses after which a count weighs half; 0 = no decay
  std::shared_ptr<const ExpertPrior> prior;  // optional: counts as of clock 0
};

class ExpertHeat {
 public:
  explicit ExpertHeat(HeatConfig cfg);

  // One access of k by `rows` rows: adds rows to its count and advances the clock by rows.
  void add(const expert_key& k, double rows);
  // The static order key (higher = hotter); -infinity for an expert never seen and without a prior.
  double key(const expert_key& k) const;
  // The decayed count now (for reports and persistence).
  double count(const expert_key& k) const;
  double clock() const { return clock_; }

 private:
  struct Count {
    double c = 0, t = 0;
  };
  double rate() const { return cfg_.half_life > 0 ? 1.0 / cfg_.half_life : 0.0; }
  Count current(const expert_key& k) const;

  HeatConfig cfg_;
  double clock_ = 0;
  std::unordered_map<expert_key, Count> counts_;
};

// Row-uses per MoE layer the store's usage counts weigh by default (`--usage-prior`).
inline constexpr double kDefaultPriorMass = 4000;

// The prior a store's usage counts give: each layer's counts as shares of `mass_per_layer` row-uses
// (how much live evidence they are worth). Keys outside n_layers x n_experts are ignored.
ExpertPrior prior_from_usage(const UsageCounts& counts, uint32_t n_layers, uint32_t n_experts, double mass_per_layer);

// The `n` experts with the highest prior counts, hottest first (ties by key): the warm start's set.
std::vector<expert_key> hottest(const ExpertPrior& prior, size_t n);

// The counts to save after a run: the old ones (halved for every `half_life` row-uses the layer saw in
// this run, so the file follows what the model is used for) plus the run's rows per [layer][expert].
UsageCounts merge_usage(const UsageCounts& old, const std::vector<std::vector<uint64_t>>& run, double half_life);

}  // namespace ferry
