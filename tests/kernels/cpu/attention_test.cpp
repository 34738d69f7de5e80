// RoPE, attention (dense, GQA, strided, DSA selection), the lightning indexer's top-k and AttnRes.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernels/backend.hpp"
#include "tests/kernels/cpu/test_util.hpp"

namespace ferry {
namespace {

using test::random_floats;

TEST(Rope, InterleavedAndHalfSplitMatchReference) {
  auto be = make_cpu_backend(2);
  const int64_t T = 3, Hn = 2, hs = 80, ts = 200, off = 8, dim = 64;
  std::vector<float> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / dim));
  const int32_t pos[T] = {0, 17, 40000};
  for (bool il : {true, false}) {
    auto x0 = random_floats(T * ts, 1);
    auto x = x0;
    be->rope(x.data(), T, Hn, ts, hs, off, pos, RopeParams{inv.data(), dim, 0.7f, il});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hn; ++h) {
        const int64_t base = t * ts + h * hs + off;
        for (int64_t i = 0; i < dim / 2; ++i) {
          const int64_t ia = base + (il ? 2 * i : i), ib = base + (il ? 2 * i + 1 : i + dim / 2);
          const double ang = double(pos[t]) * inv[i], c = 0.7 * std::cos(ang), s = 0.7 * std::sin(ang);
          // two products and a sum of O(1) values; cos/sin rounded to float first: 1e-6 absolute.
          ASSERT_NEAR(x[ia], x0[ia] * c - x0[ib] * s, 1e-6) << "il=" << il << " t=" << t << " i=" << i;
          ASSERT_NEAR(x[ib], x0[ib] * c + x0[ia] * s, 1e-6);
        }
        for (int64_t i = 0; i < off; ++i) ASSERT_EQ(x[t * ts + h * hs + i], x0[t * ts + h * hs + i]);
      }
  }
}

// Attention inputs with non-trivial strides: q rows wider than Hq*Dk, k and v interleaved in one buffer.
AttentionArgs make_args(int64_t T, int64_t L, int64_t Hq, int64_t Hk, int64_t Dk, int64_t Dv, int64_t q_pos0,
                        const std::vector<float>& q, const std::vector<float>& kv, std::vector<float>& out) {
  AttentionArgs a;
  a.q = q.data();
  a.q_head_stride = Dk + 3;
  a.q_tok_stride = Hq * a.q_head_stride + 5;
  a.k = kv.data();
  a.k_head_stride = Dk + Dv;
  a.k_tok_stride = Hk * (Dk + Dv);
  a.v = kv.data() + Dk;
  a.v_head_stride = a.k_head_stride;
  a.v_tok_stride = a.k_tok_stride;
  a.out = out.data();
  a.T = T, a.L = L, a.Hq = Hq, a.Hk = Hk, a.Dk = Dk, a.Dv = Dv, a.q_pos0 = q_pos0;
  a.scale = 1.0f / std::sqrt(float(Dk));
  return a;
}

std::vector<double> attention_reference(const AttentionArgs& a, const std::vector<std::vector<int>>& keys) {
  std::vector<double> out(a.T * a.Hq * a.Dv, 0.0);
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t h = 0; h < a.Hq; ++h) {
      const int64_t kh = h / (a.Hq / a.Hk);
      std::vector<double> s;
      for (int key : keys[t]) {
        double d = 0;
        for (int64_t i = 0; i < a.Dk; ++i)
          d += double(a.q[t * a.q_tok_stride + h * a.q_head_stride + i]) * a.k[key * a.k_tok_stride + kh * a.k_head_stride + i];
        s.push_back(d * a.scale);
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < keys[t].size(); ++j)
        for (int64_t i = 0; i < a.Dv; ++i)
          out[(t * a.Hq + h) * a.Dv + i] += s[j] / sum * a.v[keys[t][j] * a.v_tok_stride + kh * a.v_head_stride + i];
    }
  return out;
}

std::vector<std::vector<int>> causal_keys(int64_t T, int64_t L, int64_t q_pos0) {
  std::vector<std::vector<int>> k(T);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s <= std::min(L - 1, q_pos0 + t); ++s) k[t].push_back(int(s));
  return k;
}

constexpr int64_t T = 16, L = 21, Hq = 4, Hk = 2, Dk = 40, Dv = 24, P0 = 5;

// Softmax-weighted sums of values in [-1, 1] with float scores: 2e-6 absolute (~30 ulp of 1) covers the
// float dot, exp and the sum over <= 21 keys.
TEST(Attention, DenseGqaStridedMatchesReference) {
  auto be = make_cpu_backend(2);
  auto q = random_floats(T * (Hq * (Dk + 3) + 5), 2, -2, 2), kv = random_floats(L * Hk * (Dk + Dv), 3);
  auto out = test::poisoned(T * Hq * Dv);
  auto a = make_args(T, L, Hq, Hk, Dk, Dv, P0, q, kv, out);
  be->attention(a);
  EXPECT_LT(test::max_abs_err(out, attention_reference(a, causal_keys(T, L, P0))), 2e-6);
}

TEST(Attention, OneQueryEqualsSameQueryInSixteenBitwise) {
  auto be = make_cpu_backend(2);
  auto q = random_floats(T * (Hq * (Dk + 3) + 5), 4, -2, 2), kv = random_floats(L * Hk * (Dk + Dv), 5);
  auto all = test::poisoned(T * Hq * Dv);
  be->attention(make_args(T, L, Hq, Hk, Dk, Dv, P0, q, kv, all));
  for (int64_t t = 0; t < T; ++t) {
    auto one = test::poisoned(Hq * Dv);
    auto a = make_args(1, P0 + t + 1, Hq, Hk, Dk, Dv, P0 + t, q, kv, one);  // L = exactly the visible keys
    a.q = q.data() + t * a.q_tok_stride;
    be->attention(a);
    ASSERT_EQ(test::first_bit_diff(one.data(), all.data() + t * Hq * Dv, Hq * Dv), -1) << "query " << t;
  }
}

TEST(Attention, SelectionOfAllVisibleEqualsDenseBitwise) {
  auto be = make_cpu_backend(2);
  auto q = random_floats(T * (Hq * (Dk + 3) + 5), 6, -2, 2), kv = random_floats(L * Hk * (Dk + Dv), 7);
  auto dense = test::poisoned(T * Hq * Dv), sparse = test::poisoned(T * Hq * Dv);
  be->attention(make_args(T, L, Hq, Hk, Dk, Dv, P0, q, kv, dense));
  // The indexer with topk >= L selects every visible key (ascending, -1 padded).
  const int64_t Hi = 2, Di = 16, topk = 32;
  auto iq = random_floats(T * Hi * Di, 8), ik = random_floats(L * Di, 9), iw = random_floats(T * Hi, 10);
  std::vector<int32_t> sel(T * topk, 12345);
  be->indexer_topk(iq.data(), ik.data(), iw.data(), T, L, Hi, Di, P0, topk, sel.data());
  auto a = make_args(T, L, Hq, Hk, Dk, Dv, P0, q, kv, sparse);
  a.sel = sel.data();
  a.sel_k = topk;
  be->attention(a);
  EXPECT_TRUE(test::bitwise_equal(dense, sparse));
}

TEST(Attention, SparseSelectionMatchesReference) {
  auto be = make_cpu_backend(2);
  auto q = random_floats(T * (Hq * (Dk + 3) + 5), 11, -2, 2), kv = random_floats(L * Hk * (Dk + Dv), 12);
  const int64_t k = 4;
  std::vector<int32_t> sel(T * k, -1);
  std::vector<std::vector<int>> keys(T);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0, n = 0; s <= P0 + t && n < k; s += 3, ++n) sel[t * k + n] = int32_t(s), keys[t].push_back(int(s));
  auto out = test::poisoned(T * Hq * Dv);
  auto a = make_args(T, L, Hq, Hk, Dk, Dv, P0, q, kv, out);
  a.sel = sel.data();
  a.sel_k = k;
  be->attention(a);
  EXPECT_LT(test::max_abs_err(out, attention_reference(a, keys)), 2e-6);
  sel[0] = int32_t(P0 + 1);  // a future key for query 0
  EXPECT_THROW(be->attention(a), std::exception);
}

TEST(IndexerTopk, ScoresTiesPaddingAndOrder) {
  auto be = make_cpu_backend(2);
  const int64_t Ti = 6, Li = 12, Hi = 3, Di = 8, p0 = 2, topk = 5;
  auto q = random_floats(Ti * Hi * Di, 13), k = random_floats(Li * Di, 14), w = random_floats(Ti * Hi, 15);
  for (int64_t d = 0; d < Di; ++d) k[7 * Di + d] = k[4 * Di + d];  // keys 4 and 7 tie on every query
  std::vector<int32_t> sel(Ti * topk, 999);
  be->indexer_topk(q.data(), k.data(), w.data(), Ti, Li, Hi, Di, p0, topk, sel.data());
  for (int64_t t = 0; t < Ti; ++t) {
    const int64_t vis = p0 + t + 1;
    std::vector<double> sc(vis);
    for (int64_t s = 0; s < vis; ++s)
      for (int64_t h = 0; h < Hi; ++h) {
        double d = 0;
        for (int64_t i = 0; i < Di; ++i) d += double(q[(t * Hi + h) * Di + i]) * k[s * Di + i];
        sc[s] += w[t * Hi + h] * std::max(d, 0.0);
      }
    std::vector<int> idx(vis);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return sc[x] > sc[y]; });  // ties: lower first
    idx.resize(std::min<int64_t>(topk, vis));
    std::sort(idx.begin(), idx.end());
    for (int64_t i = 0; i < topk; ++i)
      ASSERT_EQ(sel[t * topk + i], i < int64_t(idx.size()) ? idx[i] : -1) << "query " << t << " slot " << i;
  }
}

// AttnRes: scores are O(1) sums done in double, then a float softmax and a float weighted sum of
// values in [-1, 1]: 1e-6 absolute.
TEST(AttnRes, MatchesReferenceAndIsRowInvariant) {
  auto be = make_cpu_backend(2);
  const int64_t nv = 3, Tn = 5, D = 96;
  std::vector<std::vector<float>> vs;
  std::vector<const float*> ptrs;
  for (int64_t s = 0; s < nv; ++s) vs.push_back(random_floats(Tn * D, 16 + uint32_t(s), -2, 2));
  for (auto& v : vs) ptrs.push_back(v.data());
  auto w = random_floats(D, 20, -0.3f, 0.3f);
  auto out = test::poisoned(Tn * D);
  be->attn_res(ptrs.data(), nv, w.data(), Tn, D, 1e-5f, out.data());
  std::vector<double> ref(Tn * D);
  for (int64_t t = 0; t < Tn; ++t) {
    std::vector<double> sc(nv);
    for (int64_t s = 0; s < nv; ++s) {
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += double(vs[s][t * D + d]) * vs[s][t * D + d];
      const double inv = 1 / std::sqrt(ss / D + 1e-5);
      for (int64_t d = 0; d < D; ++d) sc[s] += vs[s][t * D + d] * inv * w[d];
    }
    const double mx = *std::max_element(sc.begin(), sc.end());
    double sum = 0;
    for (double& x : sc) sum += (x = std::exp(x - mx));
    for (int64_t s = 0; s < nv; ++s)
      for (int64_t d = 0; d < D; ++d) ref[t * D + d] += sc[s] / sum * vs[s][t * D + d];
  }
  EXPECT_LT(test::max_abs_err(out, ref), 1e-6);
  std::vector<const float*> row3;
  for (auto& v : vs) row3.push_back(v.data() + 3 * D);
  auto one = test::poisoned(D);
  be->attn_res(row3.data(), nv, w.data(), 1, D, 1e-5f, one.data());
  EXPECT_EQ(test::first_bit_diff(one.data(), out.data() + 3 * D, D), -1);
}

}  // namespace
}  // namespace ferry
