#include "kernels/model/top_k.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

namespace ferry {

namespace {
constexpr int64_t kInsertMaxK = 64;  // insertion into a sorted list up to this k; partial_sort above
}  // namespace

void top_k_desc(const float* v, const float* bias, int64_t e, int64_t k, int32_t* out) {
  if (k <= 0) return;
  const auto score = [&](int64_t i) { return bias ? v[i] + bias[i] : v[i]; };
  if (k > kInsertMaxK) {
    std::vector<float> c(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) c[static_cast<size_t>(i)] = score(i);
    std::vector<int32_t> order(static_cast<size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float ca = c[static_cast<size_t>(a)], cb = c[static_cast<size_t>(b)];
      return ca > cb || (ca == cb && a < b);
    });
    std::copy_n(order.begin(), k, out);
    return;
  }
  // A list sorted best first; index i enters after every equal earlier one (strict >), and a full list
  // takes it only if it beats the last (an equal value with a larger index loses the tie).
  float bv[kInsertMaxK];
  int32_t bi[kInsertMaxK];
  int64_t cnt = 0;
  for (int64_t i = 0; i < e; ++i) {
    const float c = score(i);
    if (cnt == k && !(c > bv[k - 1])) continue;
    int64_t p = cnt < k ? cnt : k - 1;
    while (p > 0 && c > bv[p - 1]) {
      bv[p] = bv[p - 1];
      bi[p] = bi[p - 1];
      --p;
    }
    bv[p] = c;
    bi[p] = static_cast<int32_t>(i);
    if (cnt < k) ++cnt;
  }
  std::copy_n(bi, k, out);
}

}  // namespace ferry
