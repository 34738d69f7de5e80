// Placement of expert copies over directories (drives). See place_experts in io/store/expert_store.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"

namespace ferry {

namespace {

// Expert indexes ordered hottest first (count descending, then layer, expert); key order without usage.
std::vector<size_t> usage_order(const std::vector<ExpertKey>& experts, const UsageCounts* usage) {
  std::vector<size_t> idx(experts.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  auto count = [&](size_t i) -> int64_t {
    if (!usage) return 0;
    auto it = usage->find(key_id(experts[i]));
    return it == usage->end() ? 0 : it->second;
  };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const int64_t ca = count(a), cb = count(b);
    if (ca != cb) return ca > cb;
    if (experts[a].layer != experts[b].layer) return experts[a].layer < experts[b].layer;
    return experts[a].expert < experts[b].expert;
  });
  return idx;
}

bool fits(const PlacementDir& d, int64_t used, int64_t file_bytes) { return d.budget < 0 || used + file_bytes <= d.budget; }

}  // namespace

std::vector<std::vector<uint16_t>> place_experts(const std::vector<ExpertKey>& experts, int64_t file_bytes,
                                                 const std::vector<PlacementDir>& dirs, const UsageCounts* usage) {
  std::vector<size_t> primaries;
  for (size_t d = 0; d < dirs.size(); ++d)
    if (dirs[d].primary) primaries.push_back(d);
  if (primaries.empty()) throw ConfigError("placement: no expert directory holds the primary copies (give --expert-dir)");
  if (dirs.size() > 65535) throw LimitError("placement: more than 65535 directories");

  std::vector<std::vector<uint16_t>> out(experts.size());
  std::vector<int64_t> used(dirs.size(), 0);
  const auto order = usage_order(experts, usage);
  // Primaries: deal hottest-first round-robin, so each drive serves a similar share of the traffic.
  size_t next = 0;
  for (size_t i : order) {
    bool placed = false;
    for (size_t tries = 0; tries < primaries.size() && !placed; ++tries) {
      const size_t d = primaries[(next + tries) % primaries.size()];
      if (!fits(dirs[d], used[d], file_bytes)) continue;
      out[i].push_back(uint16_t(d));
      used[d] += file_bytes;
      next = (next + tries + 1) % primaries.size();
      placed = true;
    }
    if (!placed) {
      int64_t cap = 0;
      for (size_t d : primaries) cap += dirs[d].budget;
      throw LimitError(fmt::format("placement: the expert directories' budgets ({} bytes in all) cannot hold one copy of "
                                   "all {} experts of {} bytes ({} bytes)",
                                   cap, experts.size(), file_bytes, int64_t(experts.size()) * file_bytes));
    }
  }
  // Replicas: every budgeted directory takes the hottest experts it lacks until its budget is spent.
  for (size_t d = 0; d < dirs.size(); ++d) {
    if (dirs[d].budget < 0) continue;
    for (size_t i : order) {
      if (used[d] + file_bytes > dirs[d].budget) break;
      if (std::find(out[i].begin(), out[i].end(), uint16_t(d)) != out[i].end()) continue;
      out[i].push_back(uint16_t(d));
      used[d] += file_bytes;
    }
  }
  return out;
}

}  // namespace ferry
