// The chunked form of the gated delta rule (prefill), MODEL_SPEC.md §3. Within a chunk of n tokens
// with G_i = sum_{t<=i} g_t (per key dim, inclusive), the recurrence unrolls to
//   S_i = e^{G_i} S0 + sum_{j<=i} e^{G_i-G_j} k_j u_j^T,
//   u_i = beta_i (v_i - S0^T (e^{G_i} k_i)) - beta_i sum_{j<i} A_ij u_j,  A_ij = sum_d k_i k_j e^{G_i-G_j}
//   o_i = S0^T (e^{G_i} q_i) + sum_{j<=i} B_ij u_j,                      B_ij = sum_d q_i k_j e^{G_i-G_j}
//   S_n = e^{G_n} S0 + sum_j (k_j e^{G_n-G_j}) u_j^T
// (u_j is the rank-one update the recurrent form adds at step j). u is found by forward substitution.
// g can be -5 per token, so G reaches -320 in a 64-token chunk: e^{G} and e^{-G} are never formed
// separately; every exponential taken is of G_i - G_j with j <= i (or of G_i itself), all <= 0 for a
// decay gate, so all factors are in [0, 1]. G is summed in double so G_i - G_j loses nothing.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"

namespace ferry::cpu {

namespace {

struct ChunkScratch {
  std::vector<double> G;      // [n, K]
  std::vector<float> kg, qg;  // [n, K]: k, q times e^{G_i}
  std::vector<float> A, B;    // [n, n]
  std::vector<float> u;       // [n, V]
  std::vector<float> e;       // [K]
  void resize(int64_t n, int64_t K, int64_t V) {
    G.resize(static_cast<size_t>(n * K));
    kg.resize(G.size());
    qg.resize(G.size());
    A.resize(static_cast<size_t>(n * n));
    B.resize(A.size());
    u.resize(static_cast<size_t>(n * V));
    e.resize(static_cast<size_t>(K));
  }
};

// Strided views of one head's tokens [t0, t0+n).
struct HeadChunk {
  const float *q, *k, *v, *g, *beta;
  int64_t H, K, V, n;
  const float* qi(int64_t i) const { return q + i * H * K; }
  const float* ki(int64_t i) const { return k + i * H * K; }
  const float* vi(int64_t i) const { return v + i * H * V; }
  const float* gi(int64_t i) const { return g + i * H * K; }
  float bi(int64_t i) const { return beta[i * H]; }
};

// G, kg, qg, A (strictly lower) and B (lower incl. diagonal).
void chunk_factors(const HeadChunk& c, ChunkScratch& s) {
  const int64_t K = c.K, n = c.n;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < K; ++d) {
      const double prev = i ? s.G[(i - 1) * K + d] : 0.0;
      s.G[i * K + d] = prev + c.gi(i)[d];
      const float eg = std::exp(static_cast<float>(s.G[i * K + d]));
      s.kg[i * K + d] = c.ki(i)[d] * eg;
      s.qg[i * K + d] = c.qi(i)[d] * eg;
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double a = 0, b = 0;
      for (int64_t d = 0; d < K; ++d) {
        const double e = std::exp(static_cast<float>(s.G[i * K + d] - s.G[j * K + d]));
        const double kj = static_cast<double>(c.ki(j)[d]) * e;
        a += c.ki(i)[d] * kj;
        b += c.qi(i)[d] * kj;
      }
      s.A[i * n + j] = j < i ? static_cast<float>(a) : 0.0f;
      s.B[i * n + j] = static_cast<float>(b);
    }
}

void chunk_head(const HeadChunk& c, float* S, float* o, int64_t o_stride, ChunkScratch& s) {
  const int64_t K = c.K, V = c.V, n = c.n;
  chunk_factors(c, s);
  for (int64_t i = 0; i < n; ++i) {
    float* ui = s.u.data() + i * V;
    float* oi = o + i * o_stride;
    for (int64_t j = 0; j < V; ++j) ui[j] = 0.0f, oi[j] = 0.0f;
    for (int64_t d = 0; d < K; ++d) {  // S0^T (e^G k_i) and S0^T (e^G q_i)
      const float* row = S + d * V;
      const float kd = s.kg[i * K + d], qd = s.qg[i * K + d];
      for (int64_t j = 0; j < V; ++j) ui[j] = ui[j] + kd * row[j], oi[j] = oi[j] + qd * row[j];
    }
    const float b = c.bi(i);
    for (int64_t j = 0; j < V; ++j) ui[j] = (c.vi(i)[j] - ui[j]) * b;
    for (int64_t m = 0; m < i; ++m) {  // forward substitution
      const float a = s.A[i * n + m] * b;
      const float* um = s.u.data() + m * V;
      for (int64_t j = 0; j < V; ++j) ui[j] = ui[j] - a * um[j];
    }
    for (int64_t m = 0; m <= i; ++m) {
      const float bm = s.B[i * n + m];
      const float* um = s.u.data() + m * V;
      for (int64_t j = 0; j < V; ++j) oi[j] = oi[j] + bm * um[j];
    }
  }
  // S_n = e^{G_n} S0 + sum_j (k_j e^{G_n - G_j}) u_j^T
  const double* Gn = s.G.data() + (n - 1) * K;
  for (int64_t d = 0; d < K; ++d) {
    float* row = S + d * V;
    const float en = std::exp(static_cast<float>(Gn[d]));
    for (int64_t j = 0; j < V; ++j) row[j] = row[j] * en;
    for (int64_t m = 0; m < n; ++m) {
      const float w = c.ki(m)[d] * std::exp(static_cast<float>(Gn[d] - s.G[m * K + d]));
      const float* um = s.u.data() + m * V;
      for (int64_t j = 0; j < V; ++j) row[j] = row[j] + w * um[j];
    }
  }
}

}  // namespace

void CpuBackend::kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                             int64_t T, int64_t H, int64_t K, int64_t V, int64_t chunk, float* state, float* o) {
  if (chunk <= 0) chunk = 64;
  pool_.parallel_for(H, [&](int64_t h0, int64_t h1) {
    ChunkScratch s;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t n = std::min(chunk, T - t0);
        s.resize(n, K, V);
        const int64_t tk = t0 * H * K + h * K, tv = t0 * H * V + h * V;
        const HeadChunk c{q + tk, k + tk, v + tv, g + tk, beta + t0 * H + h, H, K, V, n};
        chunk_head(c, state + h * K * V, o + tv, H * V, s);
      }
  });
}

}  // namespace ferry::cpu
