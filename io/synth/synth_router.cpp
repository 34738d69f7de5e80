#include "io/synth/synth_router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "io/synth/synth_values.hpp"

namespace ferry {

namespace {

float dot(const float* a, const float* b, int64_t n) {
  // Eight partial sums: -ffp-contract=off and no fast-math keep a single chain from vectorizing.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (float x : acc) s += x;
  return s;
}

// Top-k of c (scores + bias) with DeepSeek's group limit: keep the topk_group groups with the best
// sum of their top-2, then take the top_k experts among them.
void select_topk(const RouterSim& r, const float* c, std::vector<int>& idx, std::vector<float>& masked) {
  const int64_t E = r.n_experts;
  masked.assign(c, c + E);
  if (r.n_group > 1 && r.topk_group < r.n_group) {
    const int64_t g = E / r.n_group;
    std::vector<std::pair<float, int64_t>> gs;
    for (int64_t k = 0; k < r.n_group; ++k) {
      std::vector<float> v(c + k * g, c + (k + 1) * g);
      std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
      gs.push_back({v[0] + v[1], k});
    }
    std::sort(gs.begin(), gs.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    for (int64_t k = r.topk_group; k < r.n_group; ++k)
      for (int64_t e = gs[k].second * g; e < (gs[k].second + 1) * g; ++e) masked[e] = -INFINITY;
  }
  idx.resize(size_t(E));
  std::iota(idx.begin(), idx.end(), 0);
  std::nth_element(idx.begin(), idx.begin() + r.top_k - 1, idx.end(),
                   [&](int a, int b) { return masked[a] > masked[b] || (masked[a] == masked[b] && a < b); });
  idx.resize(size_t(r.top_k));
}

std::vector<double> shares(const std::vector<int64_t>& counts) {
  const double total = double(std::accumulate(counts.begin(), counts.end(), int64_t(0)));
  std::vector<double> s(counts.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = total > 0 ? double(counts[i]) / total : 0;
  return s;
}

RouterTracking compare(const std::vector<double>& target, const std::vector<double>& got) {
  RouterTracking t;
  const size_t n = target.size();
  const double mt = 1.0 / double(n), mg = 1.0 / double(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (target[i] - mt) * (got[i] - mg);
    sxx += (target[i] - mt) * (target[i] - mt);
    syy += (got[i] - mg) * (got[i] - mg);
    t.tv_distance += 0.5 * std::fabs(target[i] - got[i]);
  }
  t.correlation = sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return target[a] > target[b]; });
  const size_t top = std::max<size_t>(1, (n + 9) / 10);
  for (size_t i = 0; i < top; ++i) {
    t.top10_target += target[order[i]];
    t.top10_measured += got[order[i]];
  }
  return t;
}

}  // namespace

std::vector<float> router_scores(const RouterSim& r, int64_t rows, uint64_t seed, const char* stream) {
  SynthRng rng(seed, stream);
  std::vector<float> x(size_t(r.hidden)), s(size_t(rows * r.n_experts));
  for (int64_t m = 0; m < rows; ++m) {
    for (auto& v : x) v = rng.normal();
    for (int64_t e = 0; e < r.n_experts; ++e) {
      const float logit = dot(x.data(), r.gate.data() + e * r.hidden, r.hidden);
      s[size_t(m * r.n_experts + e)] = 1.0f / (1.0f + std::exp(-logit));
    }
  }
  return s;
}

std::vector<int64_t> router_select_counts(const RouterSim& r, const std::vector<float>& scores, const std::vector<float>& bias) {
  const int64_t E = r.n_experts, rows = int64_t(scores.size()) / E;
  std::vector<int64_t> counts(size_t(E), 0);
  std::vector<float> c(static_cast<size_t>(E)), masked;
  std::vector<int> idx;
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t e = 0; e < E; ++e) c[size_t(e)] = scores[size_t(m * E + e)] + bias[size_t(e)];
    select_topk(r, c.data(), idx, masked);
    for (int e : idx) ++counts[size_t(e)];
  }
  return counts;
}

std::vector<std::vector<int>> router_route(const RouterSim& r, const std::vector<float>& bias, int64_t rows,
                                           uint64_t seed, const char* stream) {
  const auto scores = router_scores(r, rows, seed, stream);
  const int64_t E = r.n_experts;
  std::vector<std::vector<int>> out(static_cast<size_t>(rows));
  std::vector<float> c(static_cast<size_t>(E)), masked;
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t e = 0; e < E; ++e) c[size_t(e)] = scores[size_t(m * E + e)] + bias[size_t(e)];
    select_topk(r, c.data(), out[size_t(m)], masked);
  }
  return out;
}

std::vector<double> usage_shares(const std::vector<int64_t>& counts) {
  std::vector<double> s(counts.size());
  double total = 0;
  for (size_t i = 0; i < s.size(); ++i) total += s[i] = double(counts[i]) + 0.5;
  for (auto& x : s) x /= total;
  return s;
}

BiasFit fit_router_bias(const RouterSim& r, const std::vector<double>& target, uint64_t seed) {
  const int64_t E = r.n_experts;
  // Enough rows that each expert is picked ~60 times on average, within a bounded cost (M*E*H).
  const int64_t want = std::max<int64_t>(512, 60 * E / std::max<int64_t>(r.top_k, 1));
  const int64_t cap = std::max<int64_t>(256, int64_t(6e9 / double(E * r.hidden)));
  const int64_t rows = std::min<int64_t>({want, cap, 4096});
  const auto fit_scores = router_scores(r, rows, seed, "router-fit");
  BiasFit out;
  out.bias.assign(size_t(E), 0.0f);
  const double floor = 0.5 / double(rows * r.top_k);
  for (int it = 0; it < 300; ++it) {
    const double eta = 0.08 * (1.0 - 0.8 * it / 300.0);
    const auto got = shares(router_select_counts(r, fit_scores, out.bias));
    for (int64_t e = 0; e < E; ++e)
      out.bias[size_t(e)] += float(eta * (std::log(target[size_t(e)]) - std::log(std::max(got[size_t(e)], floor))));
    // Only differences matter for top-k; keep the mean at 0 so the values stay small.
    const float mean = std::accumulate(out.bias.begin(), out.bias.end(), 0.0f) / float(E);
    for (auto& b : out.bias) b -= mean;
  }
  const auto test_scores = router_scores(r, rows, seed, "router-test");
  out.tracking = compare(target, shares(router_select_counts(r, test_scores, out.bias)));
  return out;
}

}  // namespace ferry
