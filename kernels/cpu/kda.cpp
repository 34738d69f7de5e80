// KDA pieces of the CPU back-end (MODEL_SPEC.md §3): the short causal convolution, the decay gate and
// the recurrent gated delta rule. Work is split over channels or heads, and every output is computed in
// a fixed order by one thread, so T tokens in one call give the same bits as T one-token calls.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "io/errors.hpp"
#include "kernels/cpu/cpu_backend.hpp"

namespace ferry::cpu {

void CpuBackend::conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t W, float* state,
                             float* y) {
  if (W < 1) throw LimitError("cpu conv1d_silu: kernel width must be >= 1, got " + std::to_string(W));
  const int64_t H = W - 1;  // history rows
  pool_.parallel_for(
      C, [&](int64_t c0, int64_t c1) {
        const int64_t nc = c1 - c0;
        std::vector<float> hist(static_cast<size_t>(H * nc));  // hist[i][c]: input t-H+i, oldest first
        for (int64_t i = 0; i < H; ++i)
          std::copy_n(state + i * C + c0, nc, hist.begin() + i * nc);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t c = 0; c < nc; ++c) {
            const float* wc = w + (c0 + c) * W;
            const float xin = x[t * C + c0 + c];  // read before y is written: y may alias x
            float acc = 0.0f;
            for (int64_t i = 0; i < H; ++i) acc = acc + wc[i] * hist[i * nc + c];
            acc = acc + wc[H] * xin;
            y[t * C + c0 + c] = silu(acc);
            for (int64_t i = 0; i + 1 < H; ++i) hist[i * nc + c] = hist[(i + 1) * nc + c];
            if (H > 0) hist[(H - 1) * nc + c] = xin;
          }
        }
        for (int64_t i = 0; i < H; ++i) std::copy_n(hist.begin() + i * nc, nc, state + i * C + c0);
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(T, 1)));
}

void CpuBackend::kda_gate(const float* f, const float* a_log, int64_t T, int64_t H, int64_t K,
                          const KdaGateParams& p, float* g) {
  pool_.parallel_for(
      T * H, [&](int64_t b, int64_t e) {
        for (int64_t th = b; th < e; ++th) {
          const float a = std::exp(a_log[th % H]);
          const float* fi = f + th * K;  // f[T, H*K] and g[T, H, K] share the layout
          float* gi = g + th * K;
          for (int64_t d = 0; d < K; ++d) {
            const float x = fi[d];
            if (p.safe_gate) {
              gi[d] = p.lower_bound * sigmoidf(a * x);
            } else {
              const float sp = x > 20.0f ? x : std::log1p(std::exp(x));  // torch softplus, threshold 20
              gi[d] = -a * sp;
            }
          }
        }
      },
      std::max<int64_t>(1, 8192 / std::max<int64_t>(K, 1)));
}

// One token of the gated delta rule on one head: S[K,V] (row d = key dim).
//   S = diag(exp(g)) S;  u = S^T k;  S += k (beta (v - u))^T;  o = S^T q
// Sums over d run in increasing d, in float, vectorised over the V columns.
static void kda_step(const float* q, const float* k, const float* v, const float* g, float beta, int64_t K,
                     int64_t V, float* S, float* u, float* o) {
  for (int64_t j = 0; j < V; ++j) u[j] = 0.0f;
  for (int64_t d = 0; d < K; ++d) {
    const float e = std::exp(g[d]);
    float* row = S + d * V;
    const float kd = k[d];
    for (int64_t j = 0; j < V; ++j) {
      row[j] = row[j] * e;
      u[j] = u[j] + kd * row[j];
    }
  }
  for (int64_t j = 0; j < V; ++j) {
    u[j] = (v[j] - u[j]) * beta;
    o[j] = 0.0f;
  }
  for (int64_t d = 0; d < K; ++d) {
    float* row = S + d * V;
    const float kd = k[d], qd = q[d];
    for (int64_t j = 0; j < V; ++j) {
      row[j] = row[j] + kd * u[j];
      o[j] = o[j] + qd * row[j];
    }
  }
}

void CpuBackend::kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                               int64_t T, int64_t H, int64_t K, int64_t V, float* state, float* o) {
  pool_.parallel_for(H, [&](int64_t h0, int64_t h1) {
    std::vector<float> u(static_cast<size_t>(V));
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t th = t * H + h;
        kda_step(q + th * K, k + th * K, v + th * V, g + th * K, beta[th], K, V, state + h * K * V, u.data(),
                 o + th * V);
      }
  });
}

}  // namespace ferry::cpu
