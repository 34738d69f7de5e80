// The router's top-k (kernels/model/top_k.hpp) against the std::partial_sort it replaced: scores with
// many exact ties, -inf (masked groups), a bias, every k from 1 to 64 and one above (partial_sort path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/model/top_k.hpp"

namespace ferry::test {
namespace {

std::vector<int32_t> reference(const std::vector<float>& v, const std::vector<float>& bias, int64_t k) {
  const int64_t e = static_cast<int64_t>(v.size());
  std::vector<float> c(v.size());
  for (int64_t i = 0; i < e; ++i) c[static_cast<size_t>(i)] = bias.empty() ? v[static_cast<size_t>(i)] : v[static_cast<size_t>(i)] + bias[static_cast<size_t>(i)];
  std::vector<int32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    const float ca = c[static_cast<size_t>(a)], cb = c[static_cast<size_t>(b)];
    return ca > cb || (ca == cb && a < b);
  });
  order.resize(static_cast<size_t>(k));
  return order;
}

TEST(TopK, EqualsPartialSortWithTiesMaskedScoresAndBias) {
  std::mt19937 rng(5);
  for (const int64_t e : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{896}}) {
    for (int round = 0; round < 20; ++round) {
      std::vector<float> v(static_cast<size_t>(e)), bias;
      std::uniform_int_distribution<int> coarse(0, 9);  // few distinct values: many exact ties
      std::uniform_real_distribution<float> fine(0.0f, 1.0f);
      for (auto& x : v) x = round % 2 ? static_cast<float>(coarse(rng)) / 8.0f : fine(rng);
      if (round % 3 == 0)
        for (int64_t i = 0; i < e; i += 3) v[static_cast<size_t>(i)] = -INFINITY;  // masked groups
      if (round % 4 == 1) {
        bias.resize(v.size());
        for (auto& b : bias) b = static_cast<float>(coarse(rng)) / 16.0f;
      }
      for (const int64_t k : {int64_t{1}, int64_t{2}, int64_t{8}, int64_t{16}, int64_t{64}, int64_t{65}}) {
        if (k > e) continue;
        std::vector<int32_t> got(static_cast<size_t>(k), -1);
        top_k_desc(v.data(), bias.empty() ? nullptr : bias.data(), e, k, got.data());
        EXPECT_EQ(got, reference(v, bias, k)) << "e=" << e << " k=" << k << " round " << round;
      }
    }
  }
}

}  // namespace
}  // namespace ferry::test
