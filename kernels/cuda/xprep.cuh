// The tensor-core x preparation (prep_x, matmul_mma.cu) as device code any kernel can end with: a norm
// that already holds its output row in registers writes the row's prepared halves too, and the matmuls
// after it skip their prep_x launch (CudaBackend::rmsnorm_kept, attn_res_norm). One rule for both: per
// row, k from the row's max |x| (max |x * 2^k| in [2^14, 2^15)), hi = fp16(x * 2^k), lo = fp16(x * 2^k -
// hi) (exact), inv = 2^-k, written at the order's position of each element; or, for the mxfp4 weights' prompt
// kernels at level 3, lo8 = E4M3(lo * 2^5) in lo8's own order (lo8_bits.cuh). Elementwise apart from the
// max, so any kernel that computes the same row gets the same bits as prep_x.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/lo8_bits.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"

namespace ferry::cuda::xprep {

constexpr int kThreads = 256;  // the block size of every kernel that prepares rows (row_scale_exp)

#if defined(__CUDACC__)  // device code: the .cu files; cuda_backend.cuh (host code too) needs only Out
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

// k from a row's max |x| m: max |x * 2^k| in [2^14, 2^15), 0 for a row of zeros or non-finite values.
__device__ __forceinline__ int scale_exp(float m) {
  if (!(m > 0.0f && isfinite(m))) return 0;
  int e = 0;
  frexpf(m, &e);  // m = f * 2^e, f in [0.5, 1)
  return max(-125, min(125, 15 - e));  // 2^k and 2^-k stay normal floats; max|x| < 2^128 needs k >= -113
}

// The row's k from each thread's max |x| over its share of the row (the block's kThreads threads
// together): scale_exp of the row's max.
__device__ __forceinline__ int row_scale_exp(float m) {
  __shared__ float part[kThreads / 32];
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
  __syncthreads();
  m = part[0];
#pragma unroll
  for (int i = 1; i < kThreads / 32; ++i) m = fmaxf(m, part[i]);
  return scale_exp(m);
}

#endif  // __CUDACC__

// Where a kernel writes prepared rows (the layout prep_x writes into its buffer; hi == nullptr: none).
struct Out {
  __half* hi = nullptr;
  __half* lo = nullptr;  // nullptr: hi only (or lo8)
  float* inv = nullptr;
  XOrder order = XOrder::natural;
  uint8_t* lo8 = nullptr;  // lo as E4M3 (lo8_bits.cuh), in lo8::lo8_pos order; natural order only
};

#if defined(__CUDACC__)
// lo values l0, l1 (x * 2^k - hi) as two E4M3 bytes of l * 2^5 (lo8::kUp), l0's in the low byte: round to nearest
// even, no saturation (|l| <= 8).
__device__ __forceinline__ uint16_t lo8_pair(float l0, float l1) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(l1 * lo8::kUp), "f"(l0 * lo8::kUp));
  return r;
}

// Element c of row r (dim elements) of value x prepared into o, the row's 2^k being up.
__device__ __forceinline__ void put_one(const Out& o, int64_t r, int64_t dim, int64_t c, float x, float up) {
  const float a = x * up;  // exact: a power of two, inside the float range
  const __half h = __float2half_rn(a);
  const int64_t d = r * dim + order_pos(c, o.order);
  o.hi[d] = h;
  const float l = a - __half2float(h);  // exact
  if (o.lo) o.lo[d] = __float2half_rn(l);
  if (o.lo8) o.lo8[r * dim + lo8::lo8_pos(c)] = static_cast<uint8_t>(lo8_pair(l, 0.0f));
}

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
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (c >= dim) break;
    put_one(o, r, dim, c, v[k], up);
  }
  if (threadIdx.x == 0) o.inv[r] = __int_as_float((127 - e) << 23);
}

// This thread's largest |element| of v.
template <int V>
__device__ __forceinline__ float max_abs4(const float4 (&v)[V]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i)
    m = fmaxf(m, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
  return m;
}

// write_row4's stores for the row's k (scale_exp of its max |x|), with thread t holding float4 j = j0 + t +
// i * kThreads in v[i] (a block's share of a row that several blocks prepare); not the row's inv.
template <int V>
__device__ __forceinline__ void put_row4(const float4 (&v)[V], int64_t cols, int64_t r, const Out& o, int k, int j0);

// Row r (cols elements, cols % 16 == 0) prepared into o, from a block of kThreads threads where thread t
// holds float4 j = t + i * kThreads (elements 4j .. 4j + 3) in v[i] (prep_x's register kernel and the
// fused ones after it). Every thread of the block must call it.
template <int V>
__device__ __forceinline__ void write_row4(const float4 (&v)[V], int64_t cols, int64_t r, const Out& o) {
  const int k = row_scale_exp(max_abs4(v));
  put_row4(v, cols, r, o, k, 0);
  if (threadIdx.x == 0) o.inv[r] = __int_as_float((127 - k) << 23);
}

template <int V>
__device__ __forceinline__ void put_row4(const float4 (&v)[V], int64_t cols, int64_t r, const Out& o, int k, int j0) {
  const int nv = static_cast<int>(cols / 4);
  const float up = __int_as_float((k + 127) << 23);
  __half* hr = o.hi + r * cols;
  __half* lr = o.lo ? o.lo + r * cols : nullptr;
  uint8_t* l8 = o.lo8 ? o.lo8 + r * cols : nullptr;
  const XOrder order = o.order;
  // 4 elements 4j .. 4j + 3 as two half2: at 4j and 4j + 2, in the mx order at 2t and 8 + 2t of their 16
  // (t = j & 3), in the mxt order at 8t + 4s and 8t + 4s + 2 of their 32 (s = (j >> 2) & 1).
  const auto put = [order](__half* row, int j, __half a, __half b, __half c, __half d) {
    const bool mx = order == XOrder::mx;
    const int64_t p0 = mx                      ? 16 * (j >> 2) + 2 * (j & 3)
                       : order == XOrder::mxt ? 32 * (j >> 3) + 8 * (j & 3) + 4 * ((j >> 2) & 1)
                                              : 4 * j;
    const int64_t p1 = mx ? p0 + 8 : p0 + 2;
    *reinterpret_cast<__half2*>(row + p0) = __halves2half2(a, b);
    *reinterpret_cast<__half2*>(row + p1) = __halves2half2(c, d);
  };
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int j = j0 + threadIdx.x + i * kThreads;
    if (j >= nv) break;
    const float a[4] = {v[i].x * up, v[i].y * up, v[i].z * up, v[i].w * up};
    __half h[4];
    float d[4];  // a - h: exact
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      h[q] = __float2half_rn(a[q]);
      d[q] = a[q] - __half2float(h[q]);
    }
    put(hr, j, h[0], h[1], h[2], h[3]);
    if (lr) put(lr, j, __float2half_rn(d[0]), __float2half_rn(d[1]), __float2half_rn(d[2]), __float2half_rn(d[3]));
    if (l8) {  // natural order: elements 4j, 4j + 1 and 4j + 2, 4j + 3 are pairs in lo8's order
      *reinterpret_cast<uint16_t*>(l8 + lo8::lo8_pos(4 * j)) = lo8_pair(d[0], d[1]);
      *reinterpret_cast<uint16_t*>(l8 + lo8::lo8_pos(4 * j + 2)) = lo8_pair(d[2], d[3]);
    }
  }
}

#endif  // __CUDACC__

// Host side (matmul_mma.cu). Where prep_x puts n rows of cols in a buffer of mma_prep_bytes(n, cols): hi,
// lo (both_levels, or under FERRY_MMA_LEVELS=2, the default, or 3 without lo8) or lo8 (lo8 and not both_levels:
// in lo's place) and inv.
Out prep_layout(void* buf, int64_t n, int64_t cols, bool both_levels, XOrder order, bool lo8 = false);
// The matmuls' view of rows prepared into o.
mma::XPrep prepared(const Out& o, int64_t cols);

}  // namespace ferry::cuda::xprep

namespace ferry::cuda {
// Whether prep_gate takes rows of cols (cols % 16 == 0, at most 131,072: a row is a cluster of up to 8
// blocks, each thread up to 16 float4) at a, b and y (y may be null): 16-byte aligned.
bool prep_gate_ok(const float* a, const float* b, const float* y, int64_t cols);
// act(a, b) of n rows of cols (gate_act.cuh) prepared into buf as prep_x would prepare the activation (and
// written to y unless y is null): one launch.
mma::XPrep prep_gate(const GateAct& act, const float* a, const float* b, int64_t n, int64_t cols, float* y, void* buf,
                     cudaStream_t st, bool both_levels, XOrder order, bool lo8 = false);
// The same into a place of xprep::prep_layout.
void prep_gate_into(const GateAct& act, const float* a, const float* b, int64_t n, int64_t cols, float* y,
                    const xprep::Out& o, cudaStream_t st);
}  // namespace ferry::cuda

namespace ferry::cuda::xprep {

}  // namespace ferry::cuda::xprep
