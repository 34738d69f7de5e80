// The tensor-core x preparation (prep_x, matmul_mma.cu) as device code any kernel can end with: a norm
// that already holds its output row in registers writes the row's prepared halves too, and the matmuls
// after it skip their prep_x launch (CudaBackend::rmsnorm_kept, attn_res_norm). One rule for both: per
// row, k from the row's max |x| (max |x * 2^k| in [2^14, 2^15)), hi = fp16(x * 2^k), lo = fp16(x * 2^k -
// hi) (exact), inv = 2^-k, written at the order's position of each element. Elementwise apart from the
// max, so any kernel that computes the same row gets the same bits as prep_x.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/matmul_mma_launch.cuh"

namespace ferry::cuda::xprep {

constexpr int kThreads = 256;  // the block size of every kernel that prepares rows (row_scale_exp)

// Position of element c of a row in the mx order (matmul_dec.cuh's Mx): within each 16 elements, 4t + j
// goes to 2t + (j & 1) + 8 (j >> 1).
__device__ __forceinline__ int64_t mx_pos(int64_t c) {
  const int r = static_cast<int>(c & 15), t = r >> 2, j = r & 3;
  return (c & ~int64_t{15}) + 2 * t + (j & 1) + 8 * (j >> 1);
}

// Position of element c in the mxt order (matmul_mxt.cuh): within each 32, 16s + 4t + j goes to 8t + 4s + j
// (lane t's B fragments of both k16 steps of a block, in the mx order's k positions, contiguous).
__device__ __forceinline__ int64_t mxt_pos(int64_t c) {
  const int r = static_cast<int>(c & 31);
  return (c & ~int64_t{31}) + 8 * ((r & 15) >> 2) + 4 * (r >> 4) + (r & 3);
}

__device__ __forceinline__ int64_t order_pos(int64_t c, XOrder o) {
  return o == XOrder::mx ? mx_pos(c) : o == XOrder::mxt ? mxt_pos(c) : c;
}

// The row's k from each thread's max |x| over its share of the row (the block's kThreads threads
// together): max |x * 2^k| in [2^14, 2^15), 0 for a row of zeros or non-finite values.
__device__ __forceinline__ int row_scale_exp(float m) {
  __shared__ float part[kThreads / 32];
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
  __syncthreads();
  m = part[0];
#pragma unroll
  for (int i = 1; i < kThreads / 32; ++i) m = fmaxf(m, part[i]);
  if (!(m > 0.0f && isfinite(m))) return 0;
  int e = 0;
  frexpf(m, &e);  // m = f * 2^e, f in [0.5, 1)
  return max(-125, min(125, 15 - e));  // 2^k and 2^-k stay normal floats; max|x| < 2^128 needs k >= -113
}

// Where a kernel writes prepared rows (the layout prep_x writes into its buffer; hi == nullptr: none).
struct Out {
  __half* hi = nullptr;
  __half* lo = nullptr;  // nullptr: hi only
  float* inv = nullptr;
  XOrder order = XOrder::natural;
};

// Row r (dim elements) prepared into o, from a block of kThreads threads where thread t holds element
// t + k * kThreads in v[k]. Every thread of the block must call it (row_scale_exp synchronises).
template <int K>
__device__ __forceinline__ void write_row(const float (&v)[K], int64_t dim, int64_t r, const Out& o) {
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (threadIdx.x + static_cast<int64_t>(k) * kThreads < dim) m = fmaxf(m, fabsf(v[k]));
  const int e = row_scale_exp(m);
  const float up = __int_as_float((e + 127) << 23);
  __half* hr = o.hi + r * dim;
  __half* lr = o.lo ? o.lo + r * dim : nullptr;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (c >= dim) break;
    const float a = v[k] * up;  // exact: a power of two, inside the float range
    const __half h = __float2half_rn(a);
    const int64_t d = order_pos(c, o.order);
    hr[d] = h;
    if (lr) lr[d] = __float2half_rn(a - __half2float(h));  // a - h is exact
  }
  if (threadIdx.x == 0) o.inv[r] = __int_as_float((127 - e) << 23);
}

// Host side (matmul_mma.cu). Where prep_x puts n rows of cols in a buffer of mma_prep_bytes(n, cols): hi,
// lo (both_levels, or under FERRY_MMA_LEVELS=2, the default) and inv.
Out prep_layout(void* buf, int64_t n, int64_t cols, bool both_levels, XOrder order);
// The matmuls' view of rows prepared into o.
mma::XPrep prepared(const Out& o, int64_t cols);

}  // namespace ferry::cuda::xprep
