// KDA: conv1d_silu, kda_gate, kda_recurrent, and the kda_chunked entry (kernel in kda_chunked.cu; see kda.cuh).
#include <atomic>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/gate_act.cuh"
#include "kernels/cuda/kda.cuh"
#include "kernels/cuda/switches.hpp"

namespace ferry::cuda {

namespace {

// Up to kConvCalls independent convolutions of one shape in one launch (blockIdx.y picks the call).
constexpr int kConvCalls = 4;
struct ConvCalls {
  Backend::Conv1dCall c[kConvCalls];
};

// One token of one channel's convolution: silu of wc's H + 1 taps over the channel's history (its H inputs
// before, oldest first) and xin, the history then shifted to end with xin.
__device__ __forceinline__ float conv1d_silu_token(const float* wc, float* hist, int H, float xin) {
  float acc = 0.0f;
  for (int i = 0; i < H; ++i) acc = add(acc, mul(wc[i], hist[i]));
  acc = add(acc, mul(wc[H], xin));
  for (int i = 0; i + 1 < H; ++i) hist[i] = hist[i + 1];
  if (H > 0) hist[H - 1] = xin;
  return siluf_(acc);
}

// One channel c of one convolution: serial over the T tokens.
__device__ __forceinline__ void conv1d_silu_channel(const float* x, int64_t T, int64_t C, const float* w, int W,
                                                    float* state, float* y, int64_t c) {
  const int H = W - 1;
  float hist[kMaxConvWidth];
  for (int i = 0; i < H; ++i) hist[i] = state[i * C + c];
  const float* wc = w + c * W;
  for (int64_t t = 0; t < T; ++t) {
    const float xin = x[t * C + c];  // read before y is written: y may alias x
    y[t * C + c] = conv1d_silu_token(wc, hist, H, xin);
  }
  for (int i = 0; i < H; ++i) state[i * C + c] = hist[i];
}

__global__ void conv1d_silu_kernel(const float* x, int64_t T, int64_t C, const float* w, int W, float* state,
                                   float* y) {
  pdl_begin();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < C) conv1d_silu_channel(x, T, C, w, W, state, y, c);
}

__global__ void conv1d_silu_many_kernel(const __grid_constant__ ConvCalls calls, int64_t T, int64_t C, int W) {
  pdl_begin();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Backend::Conv1dCall& k = calls.c[blockIdx.y];
  if (c < C) conv1d_silu_channel(k.x, T, C, k.w, W, k.state, k.y, c);
}

// Prompt passes: the convolution in chunks of kConvTokens tokens, a thread per (chunk, channel), each
// thread's history the kMaxConvWidth - 1 inputs before its chunk (chunk 0: the carried state), so T
// tokens are T / 16 times more threads than conv1d_silu_channel's one serial walk per channel (a 1,024-token
// pass of the K3.1 slice spent 5.9 ms in 9 convolutions, H100 2026-12-06). Every output is the same sum of
// the same products in the same order (the history holds the same inputs), so the same bits. Only for
// calls whose y does not overlap their x (a chunk's history is the inputs of the chunk before, which an
// in-place call overwrites) and 2+ chunks (so T >= W - 1: the new state is x's last W - 1 rows; chunk 0's
// thread writes it after reading the old one, so no other thread reads the state).
constexpr int kConvTokens = 16;
static_assert(kConvTokens >= kMaxConvWidth - 1, "a chunk's history lies in the chunk before, the state in x");

template <int W>  // W > 0: the kernel width at compile time (the history in registers); 0: runtime
__global__ void conv1d_silu_chunks_kernel(const __grid_constant__ ConvCalls calls, int64_t T, int64_t C, int wrt) {
  pdl_begin();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const Backend::Conv1dCall& k = calls.c[blockIdx.z];
  const int w_ = W > 0 ? W : wrt;
  const int H = w_ - 1;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kConvTokens;
  const int nt = static_cast<int>(min(static_cast<int64_t>(kConvTokens), T - t0));
  float hist[kMaxConvWidth], xv[kConvTokens];
#pragma unroll
  for (int u = 0; u < kConvTokens; ++u) xv[u] = u < nt ? k.x[(t0 + u) * C + c] : 0.0f;
#pragma unroll
  for (int i = 0; i < (W > 0 ? W - 1 : kMaxConvWidth - 1); ++i)
    if (i < H) hist[i] = t0 == 0 ? k.state[i * C + c] : k.x[(t0 - H + i) * C + c];
  const float* wc = k.w + c * w_;
#pragma unroll
  for (int u = 0; u < kConvTokens; ++u) {
    if (u >= nt) break;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < (W > 0 ? W - 1 : kMaxConvWidth - 1); ++i)
      if (i < H) acc = add(acc, mul(wc[i], hist[i]));
    acc = add(acc, mul(wc[H], xv[u]));
    k.y[(t0 + u) * C + c] = siluf_(acc);
#pragma unroll
    for (int i = 0; i + 1 < (W > 0 ? W - 1 : kMaxConvWidth - 1); ++i)
      if (i + 1 < H) hist[i] = hist[i + 1];
    if (H > 0) {
      if constexpr (W > 0)
        hist[W > 1 ? W - 2 : 0] = xv[u];
      else
        hist[H - 1] = xv[u];
    }
  }
  if (t0 == 0)
    for (int i = 0; i < H; ++i) k.state[i * C + c] = k.x[(T - H + i) * C + c];
}

__device__ __forceinline__ float kda_gate_of(float x, float a_log, bool safe, float lower) {
  const float a = expf(a_log);
  if (safe) return mul(lower, sigmoidf_(mul(a, x)));
  const float sp = x > 20.0f ? x : log1pf(expf(x));  // torch softplus, threshold 20
  return mul(-a, sp);
}

__global__ void kda_gate_kernel(const float* f, const float* a_log, int64_t T, int64_t H, int64_t K, bool safe,
                                float lower, float* g) {
  pdl_begin();
  const int64_t n = T * H * K;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    g[i] = kda_gate_of(f[i], a_log[(i / K) % H], safe, lower);
}

// Backend::kda_gate_beta in one launch: add_rows' add (AddRowsOp), kda_gate_kernel's gate, SigmoidOp's sigmoid.
__global__ void kda_gate_beta_kernel(float* f, const float* bias, const float* a_log, int64_t T, int64_t H, int64_t K,
                                     bool safe, float lower, float* g, float* beta) {
  pdl_begin();
  const int64_t hk = H * K, n = T * hk;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = add(f[i], bias[i % hk]);
    f[i] = x;
    g[i] = kda_gate_of(x, a_log[(i / K) % H], safe, lower);
    if (i < T * H) beta[i] = sigmoidf_(beta[i]);
  }
}

// Block (head h, column tile): thread j owns column tile*kKdaCols + j of S (kept in shared memory
// column-major by tile so a warp's accesses hit consecutive banks). Shared: S[K][kKdaCols], e, k, q [K].
__global__ void kda_recurrent_kernel(const float* q, const float* k, const float* v, const float* g,
                                     const float* beta, int64_t T, int64_t H, int64_t K, int64_t V, float* state,
                                     float* o) {
  pdl_begin();
  extern __shared__ float sm[];
  float* S = sm;
  float* e = S + K * kKdaCols;
  float* ks = e + K;
  float* qs = ks + K;
  const int64_t h = blockIdx.x;
  const int j = threadIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kKdaCols + j;
  const bool live = col < V;
  float* Sg = state + h * K * V;
  for (int64_t d = 0; d < K; ++d) S[d * kKdaCols + j] = live ? Sg[d * V + col] : 0.0f;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t th = t * H + h;
    __syncthreads();  // the previous token is done with e, ks, qs
    for (int64_t d = j; d < K; d += blockDim.x) {
      e[d] = expf(g[th * K + d]);
      ks[d] = k[th * K + d];
      qs[d] = q[th * K + d];
    }
    __syncthreads();
    float u = 0.0f;
    for (int64_t d = 0; d < K; ++d) {
      const float row = mul(S[d * kKdaCols + j], e[d]);
      S[d * kKdaCols + j] = row;
      u = add(u, mul(ks[d], row));
    }
    u = mul(__fsub_rn(live ? v[th * V + col] : 0.0f, u), beta[th]);
    float out = 0.0f;
    for (int64_t d = 0; d < K; ++d) {
      const float row = add(S[d * kKdaCols + j], mul(ks[d], u));
      S[d * kKdaCols + j] = row;
      out = add(out, mul(qs[d], row));
    }
    if (live) o[th * V + col] = out;
  }
  if (live)
    for (int64_t d = 0; d < K; ++d) Sg[d * V + col] = S[d * kKdaCols + j];
}

// One token of the delta rule for a column S of the state (K rows, in registers), given the token's decay
// e = exp(g), k and q (shared), the column's value v and beta: S *= e, u = (v - k.S) beta, S += k u; returns
// q.S. The separately rounded products and sums in d's order, as the CPU's.
template <int K>
__device__ __forceinline__ float delta_rule_token(float (&S)[K], const float* e, const float* ks, const float* qs,
                                                  float v, float beta) {
  float u = 0.0f;
#pragma unroll
  for (int d = 0; d < K; ++d) {
    S[d] = mul(S[d], e[d]);
    u = add(u, mul(ks[d], S[d]));
  }
  u = mul(__fsub_rn(v, u), beta);
  float out = 0.0f;
#pragma unroll
  for (int d = 0; d < K; ++d) {
    S[d] = add(S[d], mul(ks[d], u));
    out = add(out, mul(qs[d], S[d]));
  }
  return out;
}

// The same rule with the column of S in registers, for K a compile-time key dim: a thread issues all K
// loads of its column at once (the shared-memory kernel above waits for them a few at a time: a decode
// step's 96 x 128 x 128 state, 6.3 MB, took 18 us, 6x the DRAM time of reading and writing it). Block
// (head h, column tile) of kKdaCols threads as above, and the same operations in the same order per
// column, so the same bits.
template <int K>
__global__ void __launch_bounds__(kKdaCols) kda_recurrent_reg_kernel(const float* q, const float* k, const float* v,
                                                                     const float* g, const float* beta, int64_t T,
                                                                     int64_t H, int64_t V, float* state, float* o) {
  pdl_begin();
  __shared__ float e[K], ks[K], qs[K];
  const int64_t h = blockIdx.x;
  const int j = threadIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kKdaCols + j;
  const bool live = col < V;
  float* Sg = state + h * K * V + (live ? col : 0);
  float S[K];
#pragma unroll
  for (int d = 0; d < K; ++d) S[d] = live ? __ldcg(Sg + d * V) : 0.0f;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t th = t * H + h;
    __syncthreads();  // the previous token is done with e, ks, qs
    for (int d = j; d < K; d += kKdaCols) {
      e[d] = expf(g[th * K + d]);
      ks[d] = k[th * K + d];
      qs[d] = q[th * K + d];
    }
    __syncthreads();
    const float out = delta_rule_token<K>(S, e, ks, qs, live ? v[th * V + col] : 0.0f, beta[th]);
    if (live) o[th * V + col] = out;
  }
  if (live) {
#pragma unroll
    for (int d = 0; d < K; ++d) Sg[d * V] = S[d];
  }
}

// Backend::kda_decode in one launch (kda_fuse() & 1): block h of V threads (V / 32 warps) for head h, thread j
// carrying column j of the head's state in registers, as kda_recurrent_reg_kernel's V / kKdaCols blocks of the
// head do together. Per token, with the operations of the four launches it replaces:
// - thread d (< K): f + dt_bias, the gate and e = exp(gate) of key dimension d (kda_gate_beta_kernel, then the
//   recurrent kernel's expf), f written back; every thread beta's sigmoid, thread 0 writing it back;
// - the delta rule of column j (kda_recurrent_reg_kernel);
// - the rmsnorm of the head's V outputs (norm_warp_row<true>: warp w's shuffle tree over its 32 squares is that
//   row's k = w tree, and the warps' sums are added in warp order, as its k loop adds them), times o_norm;
// - times sigmoid(gate) (SigmoidMulOp's sigmoid_mul_value).
// So the bits of the four (GPU test Ops.KdaDecodeInOneLaunchGivesTheBitsOfItsFourOps).
constexpr int kKdaDecodeMaxV = 256;

template <int K>
__global__ void __launch_bounds__(kKdaDecodeMaxV) kda_decode_kernel(KdaDecode a) {
  pdl_begin();
  __shared__ float e[K], ks[K], qs[K];
  __shared__ double part[kKdaDecodeMaxV / 32];
  const int64_t h = blockIdx.x, H = a.H, V = a.V;
  const int j = threadIdx.x, lane = j & 31, nw = static_cast<int>(blockDim.x >> 5);
  float* Sg = a.state + h * K * V + j;
  float S[K];
#pragma unroll
  for (int d = 0; d < K; ++d) S[d] = __ldcg(Sg + d * V);
  const float a_log = a.a_log[h];
  for (int64_t t = 0; t < a.T; ++t) {
    const int64_t th = t * H + h;
    const float braw = a.beta[th];
    __syncthreads();  // the token before is done with e, ks, qs and part; every thread has read beta[th]
    for (int d = j; d < K; d += blockDim.x) {
      const int64_t i = th * K + d;
      const float x = add(a.f[i], a.dt_bias[h * K + d]);
      a.f[i] = x;
      e[d] = expf(kda_gate_of(x, a_log, a.gp.safe_gate, a.gp.lower_bound));
      ks[d] = a.k[i];
      qs[d] = a.q[i];
    }
    const float bt = sigmoidf_(braw);
    if (j == 0) a.beta[th] = bt;
    __syncthreads();
    const float out = delta_rule_token<K>(S, e, ks, qs, a.v[th * V + j], bt);
    double s = static_cast<double>(out) * out;
    for (int o = 16; o >= 1; o >>= 1) s += __shfl_down_sync(kFullMask, s, o);
    if (lane == 0) part[j >> 5] = s;
    __syncthreads();
    double sum = 0.0;
    for (int w = 0; w < nw; ++w) sum += part[w];
    const auto inv = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(V) + a.eps));
    const float y = a.o_norm ? mul(mul(out, inv), a.o_norm[j]) : mul(out, inv);
    a.o[th * V + j] = sigmoid_mul_value(y, a.gate[th * V + j]);
  }
#pragma unroll
  for (int d = 0; d < K; ++d) Sg[d * V] = S[d];
}

// Backend::kda_conv_l2norm in one launch (kda_fuse() & 2): warp (input c of q, k, v; head h), lane l taking
// channels h * K + l + 32 m (m < K / 32), each walked over the T tokens as conv1d_silu_channel walks it (the
// history in registers, the same products and sums in the same order, silu; the state written at the end);
// then, for q and k, each token's row of K outputs normalised as norm_warp_row<false> does it (lane l holds its
// elements l + 32 m: the same shuffle trees, added in m's order), q's also scaled by q_scale. So the bits of
// conv1d_silu_many and l2norm_qk (GPU test Ops.KdaConvL2normInOneLaunchGivesTheBitsOfItsTwoOps).
constexpr int kConvNormWarps = 8;
constexpr int kConvNormMaxK = 256;  // norm_warp_row's rows (elementwise.cu kWarpRowMax)
constexpr int kConvNormMaxPer = kConvNormMaxK / 32;

struct ConvQkv {
  Backend::Conv1dCall c[3];
};

template <int WC>  // WC > 0: the kernel width at compile time (the history in registers); 0: W at run time
__global__ void __launch_bounds__(32 * kConvNormWarps)
    kda_conv_l2norm_kernel(const __grid_constant__ ConvQkv calls, int64_t T, int64_t H, int64_t K, int wrt, float eps,
                           float q_scale) {
  pdl_begin();
  const int W = WC > 0 ? WC : wrt;
  const int64_t wi = static_cast<int64_t>(blockIdx.x) * kConvNormWarps + (threadIdx.x >> 5);
  if (wi >= 3 * H) return;  // a whole warp; nothing below synchronises the block
  const int ci = static_cast<int>(wi / H), lane = threadIdx.x & 31;
  const int64_t h = wi % H, C = H * K;
  const Backend::Conv1dCall& k = calls.c[ci];
  const int per = static_cast<int>(K / 32), hn = W - 1;
  float hist[kConvNormMaxPer][kMaxConvWidth];
#pragma unroll
  for (int m = 0; m < kConvNormMaxPer; ++m) {
    if (m >= per) break;
    const int64_t c = h * K + lane + 32 * m;
    for (int i = 0; i < hn; ++i) hist[m][i] = k.state[i * C + c];
  }
  for (int64_t t = 0; t < T; ++t) {
    float y[kConvNormMaxPer];
#pragma unroll
    for (int m = 0; m < kConvNormMaxPer; ++m) {
      if (m >= per) break;
      const int64_t c = h * K + lane + 32 * m;
      y[m] = conv1d_silu_token(k.w + c * W, hist[m], hn, k.x[t * C + c]);  // x read before y is written
    }
    float* yr = k.y + t * C + h * K;
    if (ci < 2) {  // q and k: norm_warp_row<false, ci == 0> of the row
      double s2 = 0.0;
#pragma unroll
      for (int m = 0; m < kConvNormMaxPer; ++m) {
        if (m >= per) break;
        double s = static_cast<double>(y[m]) * y[m];
        for (int o = 16; o >= 1; o >>= 1) s += __shfl_down_sync(kFullMask, s, o);
        s2 += __shfl_sync(kFullMask, s, 0);
      }
      const auto inv = static_cast<float>(1.0 / sqrt(s2 + eps));
#pragma unroll
      for (int m = 0; m < kConvNormMaxPer; ++m) {
        if (m >= per) break;
        const float o = mul(y[m], inv);
        yr[lane + 32 * m] = ci == 0 ? mul(o, q_scale) : o;
      }
    } else {
#pragma unroll
      for (int m = 0; m < kConvNormMaxPer; ++m)
        if (m < per) yr[lane + 32 * m] = y[m];
    }
  }
#pragma unroll
  for (int m = 0; m < kConvNormMaxPer; ++m) {
    if (m >= per) break;
    const int64_t c = h * K + lane + 32 * m;
    for (int i = 0; i < hn; ++i) k.state[i * C + c] = hist[m][i];
  }
}

int g_kda_reg = -1;    // kda_recurrent_reg_tune
int g_kda_fuse = -1;   // kda_fuse_tune
std::atomic<int64_t> g_kda_decode_calls{0}, g_kda_conv_calls{0};

}  // namespace

int kda_fuse() {
  static const int env = env_level("FERRY_KDA_FUSE", 0, 3);
  return fused_ops() ? level_on(g_kda_fuse, env, 3) : 0;
}
void kda_fuse_tune(int on) { g_kda_fuse = on; }
int64_t kda_decode_fused_calls() { return g_kda_decode_calls.load(); }
int64_t kda_conv_fused_calls() { return g_kda_conv_calls.load(); }

void kda_recurrent_reg_tune(int on) { g_kda_reg = on; }

namespace {
int g_conv_chunks = -1;  // conv1d_chunks_tune

// Whether conv1d_silu_chunks_kernel takes these calls: on (FERRY_CONV_CHUNKS), 2+ chunks of tokens, and no
// call's y overlapping its x.
bool conv_chunks_take(const Backend::Conv1dCall* calls, size_t count, int64_t T, int64_t C) {
  static const bool env = env_switch("FERRY_CONV_CHUNKS", true);
  if (!switch_on(g_conv_chunks, env) || T < 2 * kConvTokens) return false;
  for (size_t i = 0; i < count; ++i) {
    const float *x = calls[i].x, *y = calls[i].y;
    if (y < x + T * C && x < y + T * C) return false;
  }
  return true;
}

void launch_conv_chunks(const ConvCalls& cc, unsigned count, int64_t T, int64_t C, int W, cudaStream_t st) {
  const dim3 grid(blocks_for(C, 128), static_cast<unsigned>((T + kConvTokens - 1) / kConvTokens), count);
  if (W == 4) return launch_small(conv1d_silu_chunks_kernel<4>, grid, 128, 0, st, cc, T, C, W);
  launch_small(conv1d_silu_chunks_kernel<0>, grid, 128, 0, st, cc, T, C, W);
}
}  // namespace

void conv1d_chunks_tune(int on) { g_conv_chunks = on; }

void CudaBackend::conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t W, float* state,
                              float* y) {
  if (W < 1 || W > kMaxConvWidth)
    throw LimitError("cuda conv1d_silu: kernel width must be in 1.." + std::to_string(kMaxConvWidth) + ", got " +
                     std::to_string(W));
  if (T <= 0 || C <= 0) return;
  bind();
  const Conv1dCall call{x, w, state, y};
  if (conv_chunks_take(&call, 1, T, C)) {
    ConvCalls cc{};
    cc.c[0] = call;
    return launch_conv_chunks(cc, 1, T, C, static_cast<int>(W), stream_);
  }
  launch_small(conv1d_silu_kernel, blocks_for(C, 128), 128, 0, stream_, x, T, C, w, static_cast<int>(W), state, y);
}

void CudaBackend::conv1d_silu_many(const Conv1dCall* calls, size_t count, int64_t T, int64_t C, int64_t W) {
  if (!fused_ops() || count > static_cast<size_t>(kConvCalls) || W < 1 || W > kMaxConvWidth) return Backend::conv1d_silu_many(calls, count, T, C, W);
  if (T <= 0 || C <= 0 || count == 0) return;
  bind();
  ConvCalls cc{};
  for (size_t i = 0; i < count; ++i) cc.c[i] = calls[i];
  if (conv_chunks_take(calls, count, T, C))
    return launch_conv_chunks(cc, static_cast<unsigned>(count), T, C, static_cast<int>(W), stream_);
  launch_small(conv1d_silu_many_kernel, dim3(blocks_for(C, 128), static_cast<unsigned>(count)), 128, 0, stream_, cc, T, C,
               static_cast<int>(W));
}

void CudaBackend::kda_gate(const float* f, const float* a_log, int64_t T, int64_t H, int64_t K,
                           const KdaGateParams& p, float* g) {
  const int64_t n = T * H * K;
  if (n <= 0) return;
  bind();
  const unsigned blocks = blocks_for(n, 256);
  launch_small(kda_gate_kernel, blocks < 65535u ? blocks : 65535u, 256, 0, stream_, f, a_log, T, H, K, p.safe_gate,
               p.lower_bound, g);
}

void CudaBackend::kda_gate_beta(float* f, const float* dt_bias, const float* a_log, int64_t T, int64_t H, int64_t K,
                                const KdaGateParams& p, float* g, float* beta) {
  const int64_t n = T * H * K;
  if (!fused_ops() || n <= 0 || K <= 0) return Backend::kda_gate_beta(f, dt_bias, a_log, T, H, K, p, g, beta);
  bind();
  const unsigned blocks = blocks_for(n, 256);
  launch_small(kda_gate_beta_kernel, blocks < 65535u ? blocks : 65535u, 256, 0, stream_, f, dt_bias, a_log, T, H, K,
               p.safe_gate, p.lower_bound, g, beta);
}

void CudaBackend::kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                int64_t T, int64_t H, int64_t K, int64_t V, float* state, float* o) {
  if (T <= 0 || H <= 0) return;
  const size_t smem = static_cast<size_t>(K * kKdaCols + 3 * K) * sizeof(float);
  if (smem > 96 * 1024)
    throw LimitError("cuda kda_recurrent: key dim " + std::to_string(K) + " needs more shared memory than 96 KiB");
  bind();
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((V + kKdaCols - 1) / kKdaCols));
  static const bool reg_env = env_switch("FERRY_KDA_REG", true);
  const bool reg = switch_on(g_kda_reg, reg_env);
  if (reg && K == 128) {
    launch_small(kda_recurrent_reg_kernel<128>, grid, kKdaCols, 0, stream_, q, k, v, g, beta, T, H, V, state, o);
    return;
  }
  if (reg && K == 64) {
    launch_small(kda_recurrent_reg_kernel<64>, grid, kKdaCols, 0, stream_, q, k, v, g, beta, T, H, V, state, o);
    return;
  }
  if (smem > 48 * 1024)
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kda_recurrent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  launch_small(kda_recurrent_kernel, grid, kKdaCols, smem, stream_, q, k, v, g, beta, T, H, K, V, state, o);
}

void CudaBackend::kda_conv_l2norm(const Conv1dCall* qkv, int64_t T, int64_t H, int64_t K, int64_t W, float eps,
                                  float q_scale) {
  const bool fits = T > 0 && H > 0 && K > 0 && K % 32 == 0 && K <= kConvNormMaxK && W >= 1 && W <= kMaxConvWidth &&
                    3 * H <= int64_t{65535} * kConvNormWarps;
  if (!fits || !(kda_fuse() & 2)) return Backend::kda_conv_l2norm(qkv, T, H, K, W, eps, q_scale);
  bind();
  ConvQkv cc{};
  for (int i = 0; i < 3; ++i) cc.c[i] = qkv[i];
  const unsigned blocks = blocks_for(3 * H, kConvNormWarps);
  if (W == 4)
    launch_small(kda_conv_l2norm_kernel<4>, blocks, 32 * kConvNormWarps, 0, stream_, cc, T, H, K, 4, eps, q_scale);
  else
    launch_small(kda_conv_l2norm_kernel<0>, blocks, 32 * kConvNormWarps, 0, stream_, cc, T, H, K, static_cast<int>(W),
                 eps, q_scale);
  g_kda_conv_calls.fetch_add(1);
}

void CudaBackend::kda_decode(const KdaDecode& a) {
  const bool fits = (a.K == 128 || a.K == 64) && a.V > 0 && a.V <= kKdaDecodeMaxV && a.V % 32 == 0 && a.H > 0 &&
                    a.H <= 65535 && a.T > 0;
  if (!fits || !(kda_fuse() & 1)) return Backend::kda_decode(a);
  bind();
  if (a.K == 128)
    launch_small(kda_decode_kernel<128>, static_cast<unsigned>(a.H), static_cast<unsigned>(a.V), 0, stream_, a);
  else
    launch_small(kda_decode_kernel<64>, static_cast<unsigned>(a.H), static_cast<unsigned>(a.V), 0, stream_, a);
  g_kda_decode_calls.fetch_add(1);
  keep_x(a.o, a.T, a.H * a.V);  // as gate_kept keeps it (fused_ops() holds here)
}

void CudaBackend::kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                              int64_t T, int64_t H, int64_t K, int64_t V, int64_t chunk, float* state, float* o) {
  if (T <= 0 || H <= 0) return;
  if (chunk <= 0) chunk = 64;  // the CPU back-end's default
  if (kda_chunked_smem(K, chunk) > kKdaChunkedMaxSmem) return kda_recurrent(q, k, v, g, beta, T, H, K, V, state, o);
  bind();
  float* pre = nullptr;
  size_t pre_bytes = 0;
  if (kda_chunked_prepass()) {
    const int64_t chunks = (T + chunk - 1) / chunk;
    pre_bytes = std::min(kKdaPrepassMaxBytes, kda_prepass_bytes(H, K, chunk) * static_cast<size_t>(chunks));
    pre = static_cast<float*>(scratch(kKdaPre, pre_bytes));
  }
  launch_kda_chunked(q, k, v, g, beta, T, H, K, V, chunk, state, o, pre, pre_bytes, stream_);
}

}  // namespace ferry::cuda
