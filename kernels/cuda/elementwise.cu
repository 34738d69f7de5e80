// Norms and element-wise ops (see elementwise.cuh).
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/gate_act.cuh"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/switches.hpp"
#include "kernels/cuda/xprep.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace ferry::cuda {

namespace {

constexpr int kThreads = 256;

// This thread's share of a row sum: f(i) for i = threadIdx.x, + blockDim.x, ... added in that order,
// with four terms loaded before they are added. A decode row is one block of 7168 floats: a plain
// strided loop waits out one global-load latency per element (~15 us per row measured on the H200);
// four loads in flight cut that fourfold without changing the order of the additions.
template <class F>
__device__ __forceinline__ double strided_sum(int64_t dim, F f) {
  double s = 0.0;
  const int64_t bd = blockDim.x;
  int64_t i = threadIdx.x;
  for (; i + 3 * bd < dim; i += 4 * bd) {
    const double a = f(i), b = f(i + bd), c = f(i + 2 * bd), d = f(i + 3 * bd);
    s += a;
    s += b;
    s += c;
    s += d;
  }
  for (; i < dim; i += bd) s += f(i);
  return s;
}

// A row of up to kRegs * blockDim.x floats held in registers: one round of loads in flight for the
// whole row (and its weights), where a strided loop pays one global-load latency per step. Element k
// of this thread is index threadIdx.x + k * blockDim.x, so sums over k keep strided_sum's order.
constexpr int kRegs = 32;  // 8192 floats at 256 threads: every hidden size of the real models

__device__ __forceinline__ void load_row(const float* r, int64_t dim, float* v) {
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    v[k] = i < dim ? r[i] : 0.0f;
  }
}

__device__ __forceinline__ double sum_squares(const float* v, int64_t dim) {
  double s = 0.0;
#pragma unroll
  for (int k = 0; k < kRegs; ++k)
    if (threadIdx.x + static_cast<int64_t>(k) * blockDim.x < dim) s += static_cast<double>(v[k]) * v[k];
  return s;
}

// Rows the cluster kernel does not take (longer than rownorm::kMaxDim, or FERRY_ROW_CLUSTER=0): one block
// per row, the sum in the same part order (row_norm.cuh).
__global__ void rmsnorm_kernel(const float* x, const float* w, int64_t dim, float eps, float* y) {
  pdl_begin();
  __shared__ double sh[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
  double ss = rownorm::part_order_sum(dim, [&](int64_t i) { return static_cast<double>(xr[i]) * xr[i]; }, sh);
  const auto inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(dim) + eps));
  // y may alias x: part_order_sum's last block_sum synchronised after every thread's last read.
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = w ? mul(mul(xr[i], inv), w[i]) : mul(xr[i], inv);
}

__global__ void layernorm_kernel(const float* x, const float* w, const float* b, int64_t dim, float eps, float* y) {
  pdl_begin();
  __shared__ double sh[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
  const double s = strided_sum(dim, [&](int64_t i) { return static_cast<double>(xr[i]); });
  const double mean = block_sum(s, sh) / static_cast<double>(dim);
  double ss = strided_sum(dim, [&](int64_t i) { return (xr[i] - mean) * (xr[i] - mean); });
  ss = block_sum(ss, sh);
  const auto inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(dim) + eps));
  const auto meanf = static_cast<float>(mean);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = mul(__fsub_rn(xr[i], meanf), inv);
    if (w) v = mul(v, w[i]);
    if (b) v = add(v, b[i]);
    yr[i] = v;
  }
}

__global__ void l2norm_kernel(const float* x, int64_t dim, float eps, float* y) {
  pdl_begin();
  __shared__ double sh[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
  if (dim <= kRegs * static_cast<int64_t>(blockDim.x)) {  // the row in registers, as rmsnorm_kernel
    float v[kRegs];
    load_row(xr, dim, v);
    const double ss = block_sum(sum_squares(v, dim), sh);
    const auto inv = static_cast<float>(1.0 / sqrt(ss + eps));
#pragma unroll
    for (int k = 0; k < kRegs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < dim) yr[i] = mul(v[k], inv);
    }
    return;
  }
  double ss = strided_sum(dim, [&](int64_t i) { return static_cast<double>(xr[i]) * xr[i]; });
  ss = block_sum(ss, sh);
  const auto inv = static_cast<float>(1.0 / sqrt(ss + eps));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = mul(xr[i], inv);
}

// Rows of at most kRowThreads floats (per-head norms: a prompt pass of 1,024 rows x 96 heads is 98,304
// rows of 128) by one warp each, 8 rows per block, with the block kernels' exact order: the block
// kernel gives element i to thread i, sums each warp's 32 squares by block_sum's shuffle tree and adds
// the warp sums in warp order; here lane l takes elements l, l + 32, ... and runs the same tree per
// 32 elements, then adds the trees in order. Same bits, a row per warp instead of a block per row.
constexpr int kWarpRowMax = 256;  // == kRowThreads: the block kernels hold element i in thread i
constexpr int kWarpRowsPerBlock = 8;

// One row by one warp; kScale: the output then multiplied by s (as a scale op after the norm: rounded twice).
template <bool kRms, bool kScale = false>
__device__ __forceinline__ void norm_warp_row(const float* xr, const float* w, int64_t dim, float eps, float* yr,
                                              int lane, float s = 1.0f) {
  constexpr int kPer = kWarpRowMax / 32;
  float v[kPer], wv[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t i = lane + 32 * k;
    v[k] = i < dim ? xr[i] : 0.0f;
    wv[k] = kRms && w && i < dim ? w[i] : 0.0f;
  }
  double t = 0.0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (32 * k >= dim) break;
    double s = lane + 32 * k < dim ? static_cast<double>(v[k]) * v[k] : 0.0;
    for (int o = 16; o >= 1; o >>= 1) s += __shfl_down_sync(kFullMask, s, o);
    t += __shfl_sync(kFullMask, s, 0);
  }
  const auto inv = static_cast<float>(kRms ? 1.0 / sqrt(t / static_cast<double>(dim) + eps) : 1.0 / sqrt(t + eps));
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t i = lane + 32 * k;
    if (i < dim) {
      const float o = kRms && w ? mul(mul(v[k], inv), wv[k]) : mul(v[k], inv);
      yr[i] = kScale ? mul(o, s) : o;
    }
  }
}

template <bool kRms>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    norm_warp_kernel(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) {
  pdl_begin();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (r < rows) norm_warp_row<kRms>(x + r * dim, w, dim, eps, y + r * dim, threadIdx.x & 31);
}

// KDA's q and k rows in one launch (Backend::l2norm_qk, in place): rows [0, rows) of q, scaled after the
// norm, then the rows of k.
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    l2norm_qk_kernel(float* q, float* k, int64_t rows, int64_t dim, float eps, float q_scale) {
  pdl_begin();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r < rows) norm_warp_row<false, true>(q + r * dim, nullptr, dim, eps, q + r * dim, lane, q_scale);
  else if (r < 2 * rows) norm_warp_row<false>(k + (r - rows) * dim, nullptr, dim, eps, k + (r - rows) * dim, lane);
}

// One element-wise functor per op; the grid-stride loop is shared.
template <class F>
__global__ void elementwise_kernel(int64_t n, F f) {
  pdl_begin();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    f(i);
}

struct AddOp {
  const float *a, *b;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = add(a[i], b[i]); }
};
struct ScaleOp {
  float* x;
  float s;
  __device__ void operator()(int64_t i) const { x[i] = mul(x[i], s); }
};
struct AxpyOp {
  float a;
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = add(y[i], mul(a, x[i])); }
};
struct SwigluOp {
  const float *g, *u;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = swiglu_value(g[i], u[i]); }
};
struct SituOp {
  const float *g, *u;
  float beta, lbeta;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = situ_value(g[i], u[i], beta, lbeta); }
};
struct AddRowsOp {
  const float *x, *b;
  int64_t dim;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = add(x[i], b[i % dim]); }
};
struct SigmoidOp {
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = sigmoidf_(x[i]); }
};
struct SigmoidMulOp {
  const float *x, *gate;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = sigmoid_mul_value(x[i], gate[i]); }
};
template <class F>
void run_elementwise(int64_t n, const F& f, cudaStream_t st) {
  if (n <= 0) return;
  const unsigned blocks = blocks_for(n, kThreads);
  launch_small(elementwise_kernel<F>, blocks < 65535u * 16 ? blocks : 65535u * 16, kThreads, 0, st, n, f);
}

void check_rows(const char* op, int64_t rows) {
  if (rows > 0x7fffffff) throw LimitError(std::string("cuda ") + op + ": " + std::to_string(rows) + " rows in one call");
}

}  // namespace

// Rows of up to kWarpRowMax floats: a warp each (norm_warp_kernel, the one-part order); up to
// rownorm::kMaxDim: a cluster of blocks each (row_norm.cu); longer (or FERRY_ROW_CLUSTER=0): a block each
// (rmsnorm_kernel).
void CudaBackend::rmsnorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) {
  if (rows <= 0) return;
  check_rows("rmsnorm", rows);
  bind();
  if (dim <= kWarpRowMax) {
    launch_small(norm_warp_kernel<true>, blocks_for(rows, kWarpRowsPerBlock), 32 * kWarpRowsPerBlock, 0, stream_, x, w,
                 rows, dim, eps, y);
    return;
  }
  if (rownorm::takes(dim, 0)) {
    rownorm::launch(rownorm::Call::rmsnorm(x, w, dim, eps, y), rows, stream_);
    return;
  }
  launch_small(rmsnorm_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream_, x, w, dim, eps, y);
}

void CudaBackend::rmsnorm_kept(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) {
  static_assert(rownorm::kThreads == xprep::kThreads, "the norm's rows are prepared by its own blocks");
  if (!fused_ops()) return Backend::rmsnorm_kept(x, w, rows, dim, eps, y);
  if (rows > 0 && dim > kWarpRowMax && rownorm::takes(dim, 0) && !prompt_pass_) {
    check_rows("rmsnorm", rows);
    bind();
    rownorm::launch(rownorm::Call::rmsnorm(x, w, dim, eps, y, keep_prepared(y, rows, dim)), rows, stream_);
    return;
  }
  rmsnorm(x, w, rows, dim, eps, y);
  keep_x(y, rows, dim);
}

void CudaBackend::layernorm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                            float* y) {
  if (rows <= 0) return;
  check_rows("layernorm", rows);
  bind();
  launch_small(layernorm_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream_, x, w, b, dim, eps, y);
}

void CudaBackend::l2norm(const float* x, int64_t rows, int64_t dim, float eps, float* y) {
  if (rows <= 0) return;
  check_rows("l2norm", rows);
  bind();
  if (dim <= kWarpRowMax) {
    launch_small(norm_warp_kernel<false>, blocks_for(rows, kWarpRowsPerBlock), 32 * kWarpRowsPerBlock, 0, stream_, x,
                 nullptr, rows, dim, eps, y);
    return;
  }
  launch_small(l2norm_kernel, static_cast<unsigned>(rows), kRowThreads, 0, stream_, x, dim, eps, y);
}

void CudaBackend::l2norm_qk(float* q, float* k, int64_t rows, int64_t dim, float eps, float q_scale) {
  if (rows <= 0) return;
  if (!fused_ops() || dim > kWarpRowMax || rows > 0x3fffffff) return Backend::l2norm_qk(q, k, rows, dim, eps, q_scale);
  bind();
  launch_small(l2norm_qk_kernel, blocks_for(2 * rows, kWarpRowsPerBlock), 32 * kWarpRowsPerBlock, 0, stream_, q, k, rows,
               dim, eps, q_scale);
}

void CudaBackend::add(const float* a, const float* b, int64_t n, float* y) {
  bind();
  run_elementwise(n, AddOp{a, b, y}, stream_);
}
void CudaBackend::add_rows(const float* x, const float* b, int64_t rows, int64_t dim, float* y) {
  if (rows <= 0 || dim <= 0) return;
  bind();
  run_elementwise(rows * dim, AddRowsOp{x, b, dim, y}, stream_);
}
void CudaBackend::scale(float* x, float s, int64_t n) {
  bind();
  run_elementwise(n, ScaleOp{x, s}, stream_);
}
void CudaBackend::axpy(float a, const float* x, int64_t n, float* y) {
  bind();
  run_elementwise(n, AxpyOp{a, x, y}, stream_);
}
void CudaBackend::copy2d(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                         int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  bind();
  if (src_stride == cols && dst_stride == cols) {
    copy(dst, src, static_cast<size_t>(rows * cols) * sizeof(float));
    return;
  }
  FERRY_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * sizeof(float), src,
                                     static_cast<size_t>(src_stride) * sizeof(float),
                                     static_cast<size_t>(cols) * sizeof(float), static_cast<size_t>(rows),
                                     cudaMemcpyDeviceToDevice, stream_));
  stream_copied(stream_);
}
void CudaBackend::swiglu(const float* g, const float* u, int64_t n, float* y) {
  bind();
  run_elementwise(n, SwigluOp{g, u, y}, stream_);
}
void CudaBackend::situ(const float* g, const float* u, int64_t n, float beta, float lbeta, float* y) {
  bind();
  run_elementwise(n, SituOp{g, u, beta, lbeta, y}, stream_);
}
void CudaBackend::gate_kept(const GateAct& act, const float* a, const float* b, int64_t rows, int64_t cols, float* y) {
  if (fused_gate() && !prompt_pass_ && rows > 0 && prep_gate_ok(a, b, y, cols)) {
    bind();
    prep_gate_into(act, a, b, rows, cols, y, keep_prepared(y, rows, cols), stream_);
    return;
  }
  Backend::gate_kept(act, a, b, rows, cols, y);
  if (fused_ops()) keep_x(y, rows, cols);
}
void CudaBackend::sigmoid(const float* x, int64_t n, float* y) {
  bind();
  run_elementwise(n, SigmoidOp{x, y}, stream_);
}
void CudaBackend::sigmoid_mul(const float* x, const float* gate, int64_t n, float* y) {
  bind();
  run_elementwise(n, SigmoidMulOp{x, gate, y}, stream_);
}

}  // namespace ferry::cuda
