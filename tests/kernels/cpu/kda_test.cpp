// KDA kernels: conv1d_silu, the gate, the recurrent rule (against a double reference and incremental vs
// batched) and the chunked form against the recurrent one.
#include <gtest/gtest.h>

#include "kernels/backend.hpp"
#include "tests/kernels/cpu/test_util.hpp"

namespace ferry {
namespace {

using test::random_floats;

TEST(Conv1dSilu, MatchesReferenceAndStreamsBitwise) {
  auto be = make_cpu_backend(2);
  const int64_t T = 9, C = 300, W = 4;
  auto x = random_floats(T * C, 1), w = random_floats(C * W, 2), st0 = random_floats((W - 1) * C, 3);
  auto st = st0;
  auto y = test::poisoned(T * C);
  be->conv1d_silu(x.data(), T, C, w.data(), W, st.data(), y.data());
  // Reference: history = state rows then x rows; y_t[c] = silu(sum_i w[c,i] * in[t+i][c]).
  std::vector<double> ref(T * C);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t i = 0; i < W; ++i) {
        const int64_t src = t + i - (W - 1);  // < 0: from the state
        acc += w[c * W + i] * (src < 0 ? st0[(src + W - 1) * C + c] : x[src * C + c]);
      }
      ref[t * C + c] = acc / (1 + std::exp(-acc));
    }
  // 4 float products and sums of O(1) values, then silu: 1e-6 absolute is ~10 ulp.
  EXPECT_LT(test::max_abs_err(y, ref), 1e-6);
  for (int64_t i = 0; i < W - 1; ++i)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(st[i * C + c], x[(T - W + 1 + i) * C + c]) << "state row " << i;
  // Token by token (and in place, y aliasing x) gives the same bits and the same final state.
  auto st2 = st0;
  auto y2 = x;
  for (int64_t t = 0; t < T; ++t) be->conv1d_silu(y2.data() + t * C, 1, C, w.data(), W, st2.data(), y2.data() + t * C);
  EXPECT_TRUE(test::bitwise_equal(y, y2));
  EXPECT_TRUE(test::bitwise_equal(st, st2));
}

TEST(Conv1dSilu, ShortCallsKeepHistory) {  // T < W-1: the state must shift, not be overwritten
  auto be = make_cpu_backend(1);
  const int64_t C = 3, W = 4;
  auto x = random_floats(5 * C, 4), w = random_floats(C * W, 5), st = random_floats((W - 1) * C, 6);
  auto st_b = st;
  auto ya = test::poisoned(5 * C), yb = test::poisoned(5 * C);
  be->conv1d_silu(x.data(), 5, C, w.data(), W, st.data(), ya.data());
  be->conv1d_silu(x.data(), 2, C, w.data(), W, st_b.data(), yb.data());
  be->conv1d_silu(x.data() + 2 * C, 3, C, w.data(), W, st_b.data(), yb.data() + 2 * C);
  EXPECT_TRUE(test::bitwise_equal(ya, yb));
  EXPECT_TRUE(test::bitwise_equal(st, st_b));
}

TEST(KdaGate, SafeAndKimiLinearForms) {
  auto be = make_cpu_backend(2);
  const int64_t T = 3, H = 4, K = 16;
  auto f = random_floats(T * H * K, 7, -30, 30), alog = random_floats(H, 8);
  for (bool safe : {true, false}) {
    auto g = test::poisoned(f.size());
    be->kda_gate(f.data(), alog.data(), T, H, K, KdaGateParams{safe, -5.0f}, g.data());
    std::vector<double> ref(f.size());
    for (int64_t i = 0; i < T * H * K; ++i) {
      const double a = std::exp(double(alog[(i / K) % H])), x = f[i];
      ref[i] = safe ? -5.0 / (1 + std::exp(-a * x)) : -a * (x > 20 ? x : std::log1p(std::exp(x)));
    }
    // exp, then sigmoid/softplus, then a product: a few ulp of values up to ~80 in size.
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(g[i], ref[i], 1e-6 * std::max(1.0, std::fabs(ref[i])));
  }
}

// Random KDA inputs as the model produces them: unit q, k (q also scaled by K^-0.5), beta in (0,1),
// g a decay in [-5, 0) with some dims close to 0 (long memory) and some near -5.
struct KdaInputs {
  int64_t T, H, K, V;
  std::vector<float> q, k, v, g, beta, s0;
  KdaInputs(int64_t T_, int64_t H_, int64_t K_, int64_t V_, uint32_t seed) : T(T_), H(H_), K(K_), V(V_) {
    q = random_floats(T * H * K, seed);
    k = random_floats(T * H * K, seed + 1);
    v = random_floats(T * H * V, seed + 2);
    g = random_floats(T * H * K, seed + 3, -5.0f, -0.001f);
    for (size_t i = 0; i < g.size(); i += 3) g[i] *= 0.002f;
    beta = random_floats(T * H, seed + 4, 0.05f, 0.95f);
    s0 = random_floats(H * K * V, seed + 5, -0.5f, 0.5f);
    for (int64_t r = 0; r < T * H; ++r) {
      double sq = 0, sk = 0;
      for (int64_t d = 0; d < K; ++d) sq += q[r * K + d] * q[r * K + d], sk += k[r * K + d] * k[r * K + d];
      for (int64_t d = 0; d < K; ++d) {
        q[r * K + d] = static_cast<float>(q[r * K + d] / std::sqrt(sq) / std::sqrt(double(K)));
        k[r * K + d] = static_cast<float>(k[r * K + d] / std::sqrt(sk));
      }
    }
  }
};

std::vector<double> kda_reference(const KdaInputs& in, std::vector<double>& S) {
  const int64_t H = in.H, K = in.K, V = in.V;
  std::vector<double> o(in.T * H * V), u(V);
  for (int64_t t = 0; t < in.T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t th = t * H + h;
      double* s = S.data() + h * K * V;
      for (int64_t d = 0; d < K; ++d)
        for (int64_t j = 0; j < V; ++j) s[d * V + j] *= std::exp(double(in.g[th * K + d]));
      for (int64_t j = 0; j < V; ++j) {
        u[j] = 0;
        for (int64_t d = 0; d < K; ++d) u[j] += in.k[th * K + d] * s[d * V + j];
        u[j] = in.beta[th] * (in.v[th * V + j] - u[j]);
      }
      for (int64_t d = 0; d < K; ++d)
        for (int64_t j = 0; j < V; ++j) s[d * V + j] += in.k[th * K + d] * u[j];
      for (int64_t j = 0; j < V; ++j)
        for (int64_t d = 0; d < K; ++d) o[th * V + j] += in.q[th * K + d] * s[d * V + j];
    }
  return o;
}

TEST(KdaRecurrent, MatchesDoubleReference) {
  auto be = make_cpu_backend(2);
  KdaInputs in(40, 3, 64, 48, 10);
  auto S = in.s0;
  auto o = test::poisoned(in.T * in.H * in.V);
  be->kda_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.T, in.H, in.K, in.V,
                    S.data(), o.data());
  std::vector<double> Sref = test::to_double(in.s0);
  auto oref = kda_reference(in, Sref);
  // Float rounding in each step (sums of 64 terms) feeds the next through the state; the delta rule is
  // contractive (beta < 1, |k| = 1, decays <= 1), so the error stays at a few 1e-7 of the output scale.
  EXPECT_LT(test::max_abs_err(o, oref), 2e-6 * test::max_abs(oref));
  EXPECT_LT(test::max_abs_err(S, Sref), 2e-6 * test::max_abs(Sref));
}

TEST(KdaRecurrent, TokenByTokenEqualsBatchedBitwise) {
  auto be = make_cpu_backend(2);
  KdaInputs in(12, 4, 32, 32, 20);
  auto Sa = in.s0, Sb = in.s0;
  auto oa = test::poisoned(in.T * in.H * in.V), ob = test::poisoned(oa.size());
  be->kda_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.T, in.H, in.K, in.V,
                    Sa.data(), oa.data());
  const int64_t sk = in.H * in.K, sv = in.H * in.V;
  for (int64_t t = 0; t < in.T; ++t)
    be->kda_recurrent(in.q.data() + t * sk, in.k.data() + t * sk, in.v.data() + t * sv, in.g.data() + t * sk,
                      in.beta.data() + t * in.H, 1, in.H, in.K, in.V, Sb.data(), ob.data() + t * sv);
  EXPECT_TRUE(test::bitwise_equal(oa, ob));
  EXPECT_TRUE(test::bitwise_equal(Sa, Sb));
}

class KdaChunkedLengths : public ::testing::TestWithParam<int64_t> {};

// The chunked form reorders the same arithmetic (and forms the decays as exp(G_i - G_j) of double
// cumulative sums), so it equals the recurrent form up to float rounding: 1e-5 of the output scale.
TEST_P(KdaChunkedLengths, MatchesRecurrent) {
  auto be = make_cpu_backend(2);
  KdaInputs in(GetParam(), 2, 64, 32, 30);
  auto Sr = in.s0, Sc = in.s0;
  auto orr = test::poisoned(in.T * in.H * in.V), oc = test::poisoned(orr.size());
  be->kda_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.T, in.H, in.K, in.V,
                    Sr.data(), orr.data());
  be->kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.T, in.H, in.K, in.V, 64,
                  Sc.data(), oc.data());
  const auto od = test::to_double(orr), sd = test::to_double(Sr);
  EXPECT_LT(test::max_abs_err(oc, od), 1e-5 * test::max_abs(od));
  EXPECT_LT(test::max_abs_err(Sc, sd), 1e-5 * test::max_abs(sd));
}

INSTANTIATE_TEST_SUITE_P(Cpu, KdaChunkedLengths, ::testing::Values(1, 7, 64, 65, 200));

TEST(KdaChunked, StrongDecayOverLongChunkStaysFinite) {  // g = -5 everywhere: G reaches -320 per chunk
  auto be = make_cpu_backend(1);
  KdaInputs in(64, 1, 16, 16, 40);
  std::fill(in.g.begin(), in.g.end(), -5.0f);
  auto Sr = in.s0, Sc = in.s0;
  auto orr = test::poisoned(in.T * in.V), oc = test::poisoned(orr.size());
  be->kda_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.T, 1, 16, 16, Sr.data(),
                    orr.data());
  be->kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.T, 1, 16, 16, 64, Sc.data(),
                  oc.data());
  const auto od = test::to_double(orr);
  EXPECT_LT(test::max_abs_err(oc, od), 1e-5 * test::max_abs(od));
}

// Backend::kda_decode is kda_gate_beta, kda_recurrent, the rmsnorm of each (token, head) row of V outputs and the
// sigmoid gate, in that order (the bits of the four; K != V so a mixed-up width shows), and its output rows are
// the gate times a unit-rms row: rms(o / (o_norm * sigmoid(gate))) = 1 per row.
TEST(KdaDecode, IsItsFourOpsInOrder) {
  auto be = make_cpu_backend(2);
  const int64_t T = 3, H = 2, K = 16, V = 24;
  KdaInputs in(T, H, K, V, 90);
  const auto f0 = random_floats(T * H * K, 91, -25, 25), b0 = random_floats(T * H, 92, -6, 6);
  const auto gate = random_floats(T * H * V, 93, -4, 4), bias = random_floats(H * K, 94, -1, 1);
  const auto alog = random_floats(H, 95, -2, 1), norm = random_floats(V, 96, 0.5f, 1.5f);
  const KdaGateParams gp{.safe_gate = true, .lower_bound = -5.0f};
  const float eps = 1e-12f;  // far below the rows' mean squares: the norm leaves a unit rms
  // The four ops.
  auto f1 = f0, b1 = b0, s1 = in.s0, g1 = test::poisoned(T * H * K), o1 = test::poisoned(T * H * V);
  be->kda_gate_beta(f1.data(), bias.data(), alog.data(), T, H, K, gp, g1.data(), b1.data());
  be->kda_recurrent(in.q.data(), in.k.data(), in.v.data(), g1.data(), b1.data(), T, H, K, V, s1.data(), o1.data());
  be->rmsnorm(o1.data(), norm.data(), T * H, V, eps, o1.data());
  be->sigmoid_mul(o1.data(), gate.data(), T * H * V, o1.data());
  // kda_decode.
  auto f2 = f0, b2 = b0, s2 = in.s0, g2 = test::poisoned(T * H * K), o2 = test::poisoned(T * H * V);
  const KdaDecode a{.q = in.q.data(), .k = in.k.data(), .v = in.v.data(), .f = f2.data(), .dt_bias = bias.data(),
                    .a_log = alog.data(), .gp = gp, .beta = b2.data(), .g = g2.data(), .T = T, .H = H, .K = K, .V = V,
                    .state = s2.data(), .o_norm = norm.data(), .eps = eps, .gate = gate.data(), .o = o2.data()};
  be->kda_decode(a);
  EXPECT_TRUE(test::bitwise_equal(o1, o2));
  EXPECT_TRUE(test::bitwise_equal(s1, s2));
  EXPECT_TRUE(test::bitwise_equal(f1, f2));
  EXPECT_TRUE(test::bitwise_equal(b1, b2));
  for (int64_t r = 0; r < T * H; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double u = o2[r * V + j] / (norm[j] / (1.0 + std::exp(-double(gate[r * V + j]))));
      ss += u * u;
    }
    EXPECT_NEAR(std::sqrt(ss / V), 1.0, 1e-3) << "row " << r;
  }
}

}  // namespace
}  // namespace ferry
