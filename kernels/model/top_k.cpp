#include "kernels/model/top_k.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>
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

void route_rows(const float* s, const float* bias, const RouteRule& rule, int64_t b, int64_t end, int32_t* ids,
                float* wts) {
  const int64_t e = rule.e, k = rule.k, ng = rule.n_group, per = e / std::max<int64_t>(ng, 1);
  const bool grouped = rule.grouped();
  std::vector<float> choice(static_cast<size_t>(grouped ? e : 0));
  for (int64_t t = b; t < end; ++t) {
    const float* st = s + t * e;
    int32_t* out = ids + t * k;
    if (grouped) {
      for (int64_t j = 0; j < e; ++j) choice[static_cast<size_t>(j)] = st[j] + bias[j];
      // Group score = sum of the group's two best choice scores; keep the topk_group best groups.
      std::vector<std::pair<float, int64_t>> gs;
      for (int64_t g = 0; g < ng; ++g) {
        std::vector<float> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
        gs.push_back({v[0] + v[1], g});
      }
      std::stable_sort(gs.begin(), gs.end(), [](auto& a, auto& c) { return a.first > c.first; });
      std::vector<bool> keep(static_cast<size_t>(ng), false);
      for (int64_t g = 0; g < rule.topk_group; ++g) keep[static_cast<size_t>(gs[static_cast<size_t>(g)].second)] = true;
      for (int64_t j = 0; j < e; ++j)
        if (!keep[static_cast<size_t>(j / per)]) choice[static_cast<size_t>(j)] = -INFINITY;
      top_k_desc(choice.data(), nullptr, e, k, out);
    } else {
      top_k_desc(st, bias, e, k, out);
    }
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += st[out[j]];
    for (int64_t j = 0; j < k; ++j) {
      float wt = st[out[j]];
      if (rule.renormalize && k > 1) wt = static_cast<float>(wt / (sum + 1e-20));
      wts[t * k + j] = static_cast<float>(wt * rule.routed_scale);
    }
  }
}

}  // namespace ferry
