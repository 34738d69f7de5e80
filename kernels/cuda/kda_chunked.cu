// The chunked form of the gated delta rule on the GPU (prefill), the same equations and the same
// precision choices as kernels/cpu/kda_chunked.cpp (see its comment for the derivation): G summed in
// double, every exponential of G_i - G_j (j <= i) or of G_i, A and B accumulated in double.
//
// One thread block per (head, tile of 32 value columns) walks the chunks in order with its state tile
// S[K][32] in shared memory. Per chunk of n tokens it forms, in shared memory, G [n][K] (double),
// k e^G and q e^G [n][K], A and B [n][n] (the n^2 pairs spread over the block), then u by forward
// substitution (one thread per column), o, and the new state (one thread per state element). The
// token-parallel parts replace the recurrent kernel's T sequential steps per column. A and B's sums
// over K run per warp (lanes over K, then a butterfly): their order differs from the CPU's, within the
// GPU test's tolerance, and depends only on K, so passes of any length give the same bits.
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kda.cuh"

namespace ferry::cuda {

namespace {

constexpr int kCT = kKdaCols;  // value columns per block
constexpr int kChunkThreads = 256;

struct KdaArgs {
  const float *q, *k, *v, *g, *beta;
  int64_t T, H, K, V, C;
  float* state;
  float* o;
};

__global__ void __launch_bounds__(kChunkThreads) kda_chunked_kernel(KdaArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int64_t K = a.K, C = a.C, H = a.H, V = a.V;
  double* G = reinterpret_cast<double*>(smem_raw);      // [C][K]
  float* S = reinterpret_cast<float*>(G + C * K);       // [K][kCT]
  float* kg = S + K * kCT;                              // [C][K]; later the state-update weights
  float* qg = kg + C * K;                               // [C][K]; later e^{G_n} [K]
  float* A = qg + C * K;                                // [C][C]
  float* B = A + C * C;                                 // [C][C]
  float* u = B + C * C;                                 // [C][kCT]
  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t h = blockIdx.x;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kCT;
  float* Sg = a.state + h * K * V;
  for (int64_t p = tid; p < K * kCT; p += kChunkThreads) {
    const int64_t d = p / kCT, c = p % kCT;
    S[p] = col0 + c < V ? Sg[d * V + col0 + c] : 0.0f;
  }
  for (int64_t t0 = 0; t0 < a.T; t0 += C) {
    const int64_t n = min(C, a.T - t0);
    const int64_t tk = t0 * H * K + h * K, tv = t0 * H * V + h * V;
    const float *kc = a.k + tk, *qc = a.q + tk, *gc = a.g + tk, *vc = a.v + tv, *bc = a.beta + t0 * H + h;
    float* oc = a.o + tv;
    __syncthreads();  // the previous chunk is done with every buffer
    for (int64_t d = tid; d < K; d += kChunkThreads) {
      double prev = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        prev += static_cast<double>(gc[i * H * K + d]);
        G[i * K + d] = prev;
        const float eg = expf(static_cast<float>(prev));
        kg[i * K + d] = kc[i * H * K + d] * eg;
        qg[i * K + d] = qc[i * H * K + d] * eg;
      }
    }
    __syncthreads();
    // A and B: one warp per pair (i, j <= i), lane l summing dimensions l, l + 32, ... then a fixed
    // xor butterfly, so a warp's loads of k and q rows are consecutive floats (a thread per pair made
    // every load of a warp touch 32 rows: ~25 MB of L2 traffic per chunk and block, 2026-12-01).
    for (int64_t p = tid >> 5; p < n * n; p += kChunkThreads / 32) {
      const int64_t i = p / n, j = p % n;
      if (j > i) continue;  // the same for the whole warp
      double sa = 0.0, sb = 0.0;
      for (int64_t d = lane; d < K; d += 32) {
        const double e = static_cast<double>(expf(static_cast<float>(G[i * K + d] - G[j * K + d])));
        const double kj = static_cast<double>(kc[j * H * K + d]) * e;
        sa += static_cast<double>(kc[i * H * K + d]) * kj;
        sb += static_cast<double>(qc[i * H * K + d]) * kj;
      }
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1) {
        sa += __shfl_xor_sync(0xffffffffu, sa, o);
        sb += __shfl_xor_sync(0xffffffffu, sb, o);
      }
      if (lane == 0) {
        A[i * C + j] = j < i ? static_cast<float>(sa) : 0.0f;
        B[i * C + j] = static_cast<float>(sb);
      }
    }
    // u_i = beta_i (v_i - S0^T kg_i) before substitution; o_i = S0^T qg_i (kept in o until the end).
    for (int64_t p = tid; p < n * kCT; p += kChunkThreads) {
      const int64_t i = p / kCT, c = p % kCT;
      float su = 0.0f, so = 0.0f;
      for (int64_t d = 0; d < K; ++d) {
        su = fmaf(kg[i * K + d], S[d * kCT + c], su);
        so = fmaf(qg[i * K + d], S[d * kCT + c], so);
      }
      const bool live = col0 + c < V;
      u[i * kCT + c] = ((live ? vc[i * H * V + col0 + c] : 0.0f) - su) * bc[i * H];
      if (live) oc[i * H * V + col0 + c] = so;
    }
    __syncthreads();
    if (tid < kCT) {  // forward substitution, one column per thread
      for (int64_t i = 1; i < n; ++i) {
        const float b = bc[i * H];
        float ui = u[i * kCT + tid];
        for (int64_t m = 0; m < i; ++m) ui = ui - (A[i * C + m] * b) * u[m * kCT + tid];
        u[i * kCT + tid] = ui;
      }
    }
    __syncthreads();
    for (int64_t p = tid; p < n * kCT; p += kChunkThreads) {
      const int64_t i = p / kCT, c = p % kCT;
      if (col0 + c >= V) continue;
      float oi = oc[i * H * V + col0 + c];
      for (int64_t m = 0; m <= i; ++m) oi = fmaf(B[i * C + m], u[m * kCT + c], oi);
      oc[i * H * V + col0 + c] = oi;
    }
    // S_n = e^{G_n} S0 + sum_m (k_m e^{G_n - G_m}) u_m^T
    const double* Gn = G + (n - 1) * K;
    for (int64_t p = tid; p < n * K; p += kChunkThreads) {
      const int64_t m = p / K, d = p % K;
      kg[p] = kc[m * H * K + d] * expf(static_cast<float>(Gn[d] - G[m * K + d]));
    }
    for (int64_t d = tid; d < K; d += kChunkThreads) qg[d] = expf(static_cast<float>(Gn[d]));
    __syncthreads();
    for (int64_t p = tid; p < K * kCT; p += kChunkThreads) {
      const int64_t d = p / kCT, c = p % kCT;
      float row = S[p] * qg[d];
      for (int64_t m = 0; m < n; ++m) row = fmaf(kg[m * K + d], u[m * kCT + c], row);
      S[p] = row;
    }
  }
  __syncthreads();
  for (int64_t p = tid; p < K * kCT; p += kChunkThreads) {
    const int64_t d = p / kCT, c = p % kCT;
    if (col0 + c < V) Sg[d * V + col0 + c] = S[p];
  }
}

}  // namespace

size_t kda_chunked_smem(int64_t K, int64_t chunk) {
  return static_cast<size_t>(chunk * K) * sizeof(double) +
         static_cast<size_t>(K * kCT + 2 * chunk * K + 2 * chunk * chunk + chunk * kCT) * sizeof(float);
}

void launch_kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T,
                        int64_t H, int64_t K, int64_t V, int64_t chunk, float* state, float* o, cudaStream_t st) {
  const size_t smem = kda_chunked_smem(K, chunk);
  static const bool raised = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kda_chunked_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kKdaChunkedMaxSmem)));
    return true;
  }();
  (void)raised;
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((V + kCT - 1) / kCT));
  kda_chunked_kernel<<<grid, kChunkThreads, smem, st>>>(KdaArgs{q, k, v, g, beta, T, H, K, V, chunk, state, o});
  FERRY_CUDA_LAUNCHED(kda_chunked_kernel);
}

}  // namespace ferry::cuda
