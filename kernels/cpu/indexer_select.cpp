#include "kernels/cpu/indexer_select.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace ferry::cpu {

namespace {

// torch.topk(largest) on the CPU for k*64 > n: nth_element over (value, index) pairs of the whole row
// (masked keys as -inf), comparing values only, then the first k. Masked picks are dropped.
void select_like_torch_cpu(const float* score, int64_t visible, int64_t L, int64_t topk, int32_t* out) {
  std::vector<std::pair<double, int64_t>> row;
  for (int64_t s = 0; s < L; ++s) row.push_back({s < visible ? static_cast<double>(score[s]) : -INFINITY, s});
  const int64_t k = std::min(topk, L);
  std::nth_element(row.begin(), row.begin() + (k - 1), row.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<int32_t> chosen;
  for (int64_t i = 0; i < k; ++i)
    if (row[i].second < visible) chosen.push_back(static_cast<int32_t>(row[i].second));
  std::sort(chosen.begin(), chosen.end());
  for (int64_t i = 0; i < topk; ++i) out[i] = i < static_cast<int64_t>(chosen.size()) ? chosen[i] : -1;
}

}  // namespace

void indexer_select(const float* score, int64_t visible, int64_t L, int64_t topk, IndexerTies ties, int32_t* idx,
                    int32_t* out) {
  if (ties == IndexerTies::torch_cpu) {
    select_like_torch_cpu(score, visible, L, topk, out);
    return;
  }
  for (int64_t s = 0; s < visible; ++s) idx[s] = static_cast<int32_t>(s);
  const int64_t n = std::min(topk, visible);
  // Strict total order (score descending, then position ascending): the selection is unique.
  auto better = [&](int32_t x, int32_t y) { return score[x] > score[y] || (score[x] == score[y] && x < y); };
  if (n < visible) std::nth_element(idx, idx + n, idx + visible, better);
  std::sort(idx, idx + n);
  for (int64_t i = 0; i < topk; ++i) out[i] = i < n ? idx[i] : -1;
}

}  // namespace ferry::cpu
