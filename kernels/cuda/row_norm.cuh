// Row norms and AttnRes spread over a cluster of blocks (rownorm::launch), and the order of their sums.
//
// Why: a decode step has one row. One block per row put AttnRes + its norm on one SM (14 us on the H200,
// 8 launches a step of the slice) and every rmsnorm of 7,168 floats on one SM (5-8 us). A cluster of up to
// 8 blocks takes the row in parts of 1,024 elements, one part per block, and the blocks exchange their
// partial sums through distributed shared memory.
//
// The part order (every CUDA row sum of rmsnorm and AttnRes, whatever kernel computes it, so that a row's
// bits never depend on the row count, the fused path or the launch): a row of D floats is cut into parts
// of kPart = 1,024 elements. Within part p, thread t (of kThreads = 256) adds the terms of elements
// p * kPart + t + k * kThreads, k = 0..3 in order, from 0.0, skipping those >= D; the part's threads are
// added by block_sum's tree (common.cuh: a shuffle-down tree per warp, then the warps in order from 0.0);
// the parts are added in order from 0.0. A row of at most 1,024 floats is one part: the order of the
// one-block kernels before (and of norm_warp_row's), so rows up to 1,024 keep their earlier bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/xprep.cuh"

namespace ferry::cuda::rownorm {

constexpr int kThreads = 256;
constexpr int kPer = 4;                         // a thread's elements in a part
constexpr int64_t kPart = kThreads * kPer;      // 1,024
constexpr int kMaxParts = 8;                    // the portable cluster size
constexpr int64_t kMaxDim = kPart * kMaxParts;  // 8,192: every hidden size of the real models
constexpr int kMaxInputs = 32;                  // AttnRes inputs (K3.1: 93 / 12 blocks + the stream)

struct Inputs {
  const float* v[kMaxInputs];
};

// One launch: AttnRes of nv inputs (nv > 0) into res_out (may be null), then, if norm, the rmsnorm of that
// (or, nv == 0, of in.v[0]) into y with its rows prepared into prep (prep.hi null: not prepared).
// y may alias in.v[0] (a norm in place); res_out and y must not alias an AttnRes input.
// add_to (AttnRes only): add_to += add_from first, where add_to is the last input in.v[nv - 1] (its loads
// then read the sum this thread stored).
struct Call {
  Inputs in{};
  int nv = 0;
  float* add_to = nullptr;
  const float* add_from = nullptr;
  const float* res_w = nullptr;
  float res_eps = 0.0f;
  float* res_out = nullptr;
  bool norm = false;
  const float* norm_w = nullptr;  // null: no weight
  float norm_eps = 0.0f;
  float* y = nullptr;
  xprep::Out prep;
  int64_t dim = 0;

  // The rmsnorm of x (rows of dim) into y, prepared into prep.
  static Call rmsnorm(const float* x, const float* w, int64_t dim, float eps, float* y, const xprep::Out& prep = {}) {
    Call c;
    c.in.v[0] = x;
    c.norm = true;
    c.norm_w = w;
    c.norm_eps = eps;
    c.y = y;
    c.prep = prep;
    c.dim = dim;
    return c;
  }
  // AttnRes of vs[0 .. nv) into out (no norm; nv <= kMaxInputs).
  static Call attn_res(const float* const* vs, int64_t nv, const float* w, int64_t dim, float eps, float* out) {
    Call c;
    for (int64_t s = 0; s < nv; ++s) c.in.v[s] = vs[s];
    c.nv = static_cast<int>(nv);
    c.res_w = w;
    c.res_eps = eps;
    c.res_out = out;
    c.dim = dim;
    return c;
  }
};

inline bool fits(int64_t dim, int64_t nv) { return dim > 0 && dim <= kMaxDim && nv <= kMaxInputs; }

// Whether rmsnorm, attn_res and attn_res_norm take their rows of up to kMaxDim with the cluster kernel: on
// by default; FERRY_ROW_CLUSTER=0 or row_cluster_tune(0) (1 on, -1 the environment's) leaves every row to
// one block (rmsnorm_kernel, attn_res_scores_kernel: the same part order, the same bits).
bool row_cluster();
void row_cluster_tune(int on);
// Whether CudaBackend::add_attn_res_norm adds in the cluster kernel's launch (while fused_ops() and
// row_cluster() hold): on by default (H100, 2026-12-06: K3.1 slice decode 497.6 against 494.3 tok/s, same
// bits); FERRY_FUSE_ADD=0 or fused_add_tune(0) turns it off.
bool fused_add();
void fused_add_tune(int on);
// Whether the cluster kernel loads an AttnRes's first 8 inputs together, up front, and keeps them in
// registers for its three passes (instead of loading each input in each pass, one after the other): on by
// default (H100, 2026-12-06: AttnRes + norm 11.5-12.2 against 12.7-13.0 us, the step's row norms 129 against
// 138 us; decode within noise, 522.2 against 521.4 tok/s); FERRY_ROW_REG=0 or row_reg_inputs_tune(0) (1 on,
// 0 off, -1 the environment's) turns it off. Same bits.
bool row_reg_inputs();
void row_reg_inputs_tune(int on);
// Whether the cluster kernel (with row_reg_inputs) exchanges its partial sums by pushes (row_norm.cu "the push
// exchange": st.async into every block's shared memory, an mbarrier per reduction, one cluster barrier a launch
// instead of five): on by default (H100, 2026-12-07: the 14 row norms of a slice step 129.4 -> 98.9 us, decode
// +2.0 %, memcheck and racecheck clean); FERRY_ROW_PUSH=0 or row_push_tune(0) turns it off (1 on, -1 the
// environment's). Same sums in the same order: the same bits.
bool row_push();
void row_push_tune(int on);
// The cluster kernel takes these rows: row_cluster() and fits().
inline bool takes(int64_t dim, int64_t nv) { return row_cluster() && fits(dim, nv); }

// rows x ceil(dim / kPart) blocks in clusters of one row's parts; programmatic like launch_small.
// Throws LimitError when the grid does not fit.
void launch(const Call& c, int64_t rows, cudaStream_t st);

#if defined(__CUDACC__)
// The part order of a row sum by one block of kThreads threads: f(i) is element i's term (a double).
// Every thread of the block must call it (block_sum synchronises); sh is __shared__ double[32].
template <class F>
__device__ __forceinline__ double part_order_sum(int64_t dim, F f, double* sh);

// AttnRes's softmax of one row's nv scores into p (p may be sc), by one thread, in the CPU's order.
__device__ __forceinline__ void res_softmax(const float* sc, int64_t nv, float* p) {
  float mx = -INFINITY;
  for (int64_t s = 0; s < nv; ++s) mx = fmaxf(mx, sc[s]);
  float sum = 0.0f;
  for (int64_t s = 0; s < nv; ++s) {
    p[s] = expf(__fsub_rn(sc[s], mx));
    sum = __fadd_rn(sum, p[s]);
  }
  for (int64_t s = 0; s < nv; ++s) p[s] = p[s] / sum;
}
#endif

}  // namespace ferry::cuda::rownorm

#if defined(__CUDACC__)
#include <cooperative_groups.h>

#include "kernels/cuda/common.cuh"

namespace ferry::cuda::rownorm {
// The largest of every thread's m over the block, in every thread (a max: any order). Every thread calls it.
__device__ __forceinline__ float block_max(float m) {
  __shared__ float wmax[32];
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
  if ((threadIdx.x & 31) == 0) wmax[threadIdx.x >> 5] = m;
  __syncthreads();
  float b = wmax[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) b = fmaxf(b, wmax[w]);
  return b;
}

// The largest of every thread's m over the whole cluster, in every thread (a max: any order). Every thread
// of every block calls it; the cluster must synchronise once more before any block leaves, since the others
// read this block's shared memory.
__device__ __forceinline__ float cluster_max(cooperative_groups::cluster_group& cl, float m) {
  __shared__ float mine[1];
  const float b = block_max(m);
  if (threadIdx.x == 0) mine[0] = b;
  cl.sync();
  float rm = 0.0f;
  for (unsigned r = 0; r < cl.num_blocks(); ++r) rm = fmaxf(rm, cl.map_shared_rank(mine, r)[0]);
  return rm;
}

template <class F>
__device__ __forceinline__ double part_order_sum(int64_t dim, F f, double* sh) {
  double tot = 0.0;
  for (int64_t base = 0; base < dim; base += kPart) {
    double a[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {  // the four loads in flight before the adds
      const int64_t i = base + threadIdx.x + static_cast<int64_t>(k) * kThreads;
      a[k] = i < dim ? f(i) : 0.0;
    }
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      if (base + threadIdx.x + static_cast<int64_t>(k) * kThreads < dim) s += a[k];
    tot += block_sum(s, sh);
  }
  return tot;
}
}  // namespace ferry::cuda::rownorm
#endif
