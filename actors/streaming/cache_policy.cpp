#include "actors/streaming/cache_policy.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ferry {

ExpertHeat::ExpertHeat(HeatConfig cfg) : cfg_(std::move(cfg)) {}

ExpertHeat::Count ExpertHeat::current(const expert_key& k) const {
  if (auto it = counts_.find(k); it != counts_.end()) return it->second;
  if (cfg_.prior)
    if (auto p = cfg_.prior->find(k); p != cfg_.prior->end()) return {p->second, 0.0};
  return {};
}

void ExpertHeat::add(const expert_key& k, double rows) {
  clock_ += rows;
  Count c = current(k);
  c.c = c.c * std::exp2(-(clock_ - c.t) * rate()) + rows;
  c.t = clock_;
  counts_[k] = c;
}

double ExpertHeat::key(const expert_key& k) const {
  const Count c = current(k);
  if (c.c <= 0) return -std::numeric_limits<double>::infinity();
  return std::log2(c.c) + c.t * rate();
}

double ExpertHeat::count(const expert_key& k) const {
  const Count c = current(k);
  return c.c * std::exp2(-(clock_ - c.t) * rate());
}

ExpertPrior prior_from_usage(const UsageCounts& counts, uint32_t n_layers, uint32_t n_experts, double mass_per_layer) {
  std::vector<double> total(n_layers, 0.0);
  for (const auto& [id, n] : counts) {
    const uint32_t l = uint32_t(id >> 32), e = uint32_t(id & 0xffffffffu);
    if (l < n_layers && e < n_experts) total[l] += double(n);
  }
  ExpertPrior p;
  for (const auto& [id, n] : counts) {
    const uint32_t l = uint32_t(id >> 32), e = uint32_t(id & 0xffffffffu);
    if (l < n_layers && e < n_experts && n > 0 && total[l] > 0) p[{l, e}] = double(n) / total[l] * mass_per_layer;
  }
  return p;
}

UsageCounts merge_usage(const UsageCounts& old, const std::vector<std::vector<uint64_t>>& run, double half_life) {
  std::vector<double> seen(run.size(), 0.0);
  for (size_t l = 0; l < run.size(); ++l)
    for (uint64_t n : run[l]) seen[l] += double(n);
  UsageCounts out;
  for (const auto& [id, n] : old) {
    const size_t l = size_t(id >> 32);
    const double keep = l < run.size() && half_life > 0 ? std::exp2(-seen[l] / half_life) : 1.0;
    if (const auto v = std::llround(double(n) * keep); v > 0) out[id] = v;
  }
  for (size_t l = 0; l < run.size(); ++l)
    for (size_t e = 0; e < run[l].size(); ++e)
      if (run[l][e] > 0) out[key_id({int32_t(l), int32_t(e)})] += int64_t(run[l][e]);
  return out;
}

std::vector<expert_key> hottest(const ExpertPrior& prior, size_t n) {
  std::vector<std::pair<double, expert_key>> v;
  for (const auto& [k, c] : prior) v.push_back({c, k});
  const size_t m = std::min(n, v.size());
  std::partial_sort(v.begin(), v.begin() + long(m), v.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<expert_key> out;
  for (size_t i = 0; i < m; ++i) out.push_back(v[i].second);
  return out;
}

}  // namespace ferry
