// The router's selection on the device (kernels/cuda/route_bits.cuh, route.cu), its warp algorithm run serially on
// the host: for K3's rule (896 experts, top 16, no groups), DeepSeek-V3's (256 experts in 8 groups, 4 kept, top
// 8) and rules with few experts, with scores full of exact ties, the picks and the weights' bits are route_rows's.
// The GPU test (Ops.RouterSelectionOnTheDevice*) runs the kernel itself; this pins what it computes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/model/top_k.hpp"

#if FERRY_WITH_CUDA
#include "kernels/cuda/route_bits.cuh"
#endif

namespace {

#if FERRY_WITH_CUDA
namespace route = ferry::cuda::route;
using ferry::RouteRule;

// route_select_kernel for one row, its 32 lanes one after the other.
void warp_select(const float* s, const float* bias, const RouteRule& rule, int32_t* ids, float* wts) {
  const int e = static_cast<int>(rule.e), k = static_cast<int>(rule.k);
  const bool grouped = rule.grouped();
  const int ng = grouped ? static_cast<int>(rule.n_group) : 1, per = e / ng;
  std::vector<float> c(static_cast<size_t>(e));
  for (int j = 0; j < e; ++j) c[static_cast<size_t>(j)] = s[j] + bias[j];
  if (ng > 1) {
    float gs[32];
    for (int lane = 0; lane < 32; ++lane) {
      gs[lane] = -INFINITY;
      if (lane >= ng) continue;
      float m1 = -INFINITY, m2 = -INFINITY;
      for (int j = lane * per; j < (lane + 1) * per; ++j) route::top2(c[static_cast<size_t>(j)], m1, m2);
      gs[lane] = m1 + m2;
    }
    unsigned keep = 0;
    for (int lane = 0; lane < ng; ++lane) {
      int rank = 0;
      for (int h = 0; h < ng; ++h) rank += gs[h] > gs[lane] || (gs[h] == gs[lane] && h < lane);
      if (rank < rule.topk_group) keep |= 1u << lane;
    }
    for (int j = 0; j < e; ++j)
      if (!((keep >> (j / per)) & 1u)) c[static_cast<size_t>(j)] = -INFINITY;
  }
  float bv[32];
  int32_t bi[32];
  const auto rescan = [&](int lane) {
    bv[lane] = 0.0f;
    bi[lane] = route::kNone;
    for (int j = lane; j < e; j += 32) {
      const float v = c[static_cast<size_t>(j)];
      if (std::isnan(v)) continue;
      if (bi[lane] == route::kNone || v > bv[lane]) bv[lane] = v, bi[lane] = j;
    }
  };
  for (int lane = 0; lane < 32; ++lane) rescan(lane);
  for (int r = 0; r < k; ++r) {
    // The butterfly: after each step lane l holds the better of itself and lane l ^ d.
    float v[32];
    int32_t i[32];
    for (int lane = 0; lane < 32; ++lane) v[lane] = bv[lane], i[lane] = bi[lane];
    for (int d = 16; d >= 1; d >>= 1) {
      float nv[32];
      int32_t ni[32];
      for (int lane = 0; lane < 32; ++lane) {
        nv[lane] = v[lane], ni[lane] = i[lane];
        if (route::before(v[lane ^ d], i[lane ^ d], v[lane], i[lane])) nv[lane] = v[lane ^ d], ni[lane] = i[lane ^ d];
      }
      for (int lane = 0; lane < 32; ++lane) v[lane] = nv[lane], i[lane] = ni[lane];
    }
    for (int lane = 1; lane < 32; ++lane) EXPECT_EQ(i[lane], i[0]) << "every lane ends with the same pick";
    ids[r] = i[0];
    c[static_cast<size_t>(i[0])] = NAN;
    rescan(i[0] & 31);
  }
  double sum = 0;
  for (int r = 0; r < k; ++r) sum += static_cast<double>(s[ids[r]]);
  for (int r = 0; r < k; ++r) wts[r] = route::weight(s[ids[r]], sum, rule.renormalize && k > 1, rule.routed_scale);
}

RouteRule rule_of(int64_t e, int64_t k, int64_t ng, int64_t tg, bool renorm, double scale) {
  RouteRule r;
  r.e = e, r.k = k, r.n_group = ng, r.topk_group = tg, r.renormalize = renorm, r.routed_scale = scale;
  return r;
}

TEST(RouteBits, TheWarpsPicksAndWeightsAreRouteRowsToTheBit) {
  std::mt19937 rng(896);
  const RouteRule rules[] = {rule_of(896, 16, 1, 1, true, 2.827), rule_of(256, 8, 8, 4, true, 2.5),
                             rule_of(64, 6, 1, 1, false, 1.0),    rule_of(40, 40, 1, 1, true, 1.0),
                             rule_of(16, 1, 1, 1, true, 1.5),     rule_of(48, 4, 4, 2, true, 1.0),
                             rule_of(96, 8, 32, 3, false, 0.7)};
  int rows = 0;
  for (const RouteRule& rule : rules)
    for (int kind = 0; kind < 3; ++kind)
      for (int t = 0; t < 20; ++t) {
        std::vector<float> s(static_cast<size_t>(rule.e)), bias(static_cast<size_t>(rule.e));
        for (float& v : s) {
          const float u = static_cast<float>(rng() % 1000) / 1000.0f;
          v = kind == 1 ? std::round(u * 4) / 4 : kind == 2 ? 0.5f : 1.0f / (1.0f + std::exp(-8 * (u - 0.5f)));
        }
        for (float& b : bias) b = kind == 0 ? static_cast<float>(rng() % 100) / 1000.0f - 0.05f : 0.0f;
        std::vector<int32_t> want_ids(static_cast<size_t>(rule.k)), got_ids(want_ids.size());
        std::vector<float> want_w(want_ids.size()), got_w(want_ids.size());
        ferry::route_rows(s.data(), bias.data(), rule, 0, 1, want_ids.data(), want_w.data());
        warp_select(s.data(), bias.data(), rule, got_ids.data(), got_w.data());
        ASSERT_EQ(got_ids, want_ids) << "e " << rule.e << " k " << rule.k << " groups " << rule.n_group << " kind " << kind;
        ASSERT_EQ(0, std::memcmp(got_w.data(), want_w.data(), want_w.size() * sizeof(float)))
            << "weights' bits, e " << rule.e << " k " << rule.k << " kind " << kind;
        ++rows;
      }
  EXPECT_EQ(rows, 7 * 3 * 20);
}
#else
TEST(RouteBits, NeedsACudaBuild) { GTEST_SKIP() << "no CUDA in this build"; }
#endif

}  // namespace
