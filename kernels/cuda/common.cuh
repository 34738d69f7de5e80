// Device helpers shared by the CUDA kernels.
//
// Exactness: the CPU back-end builds with -ffp-contract=off, so its products and sums are separately
// rounded. Kernels that must match it bit for bit (matmul, attention and indexer scores, the KDA
// recurrence) use __fmul_rn / __fadd_rn, which nvcc never fuses into an FMA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }

// kernels/cpu/dot.hpp's lane fold: lane l += lane l+16, then l+8, l+4, l+2, l+1. shfl_down gives lane
// l the value of lane l+s, so lane 0 ends with exactly the CPU's lanes_reduce.
__device__ __forceinline__ float warp_fold(float a) {
  for (int s = 16; s >= 1; s >>= 1) a = add(a, __shfl_down_sync(kFullMask, a, s));
  return a;
}

// dot.hpp's dot(x, w, n) by one warp: lane l accumulates elements l, l+32, ... in increasing order.
// Every lane must call it; the result is valid in lane 0.
__device__ __forceinline__ float warp_dot(const float* x, const float* w, int64_t n, int lane) {
  float acc = 0.0f;
  for (int64_t i = lane; i < n; i += 32) acc = add(acc, mul(x[i], w[i]));
  return warp_fold(acc);
}

// Sum of one double per thread over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `sh` is __shared__ double[32]. The order is fixed by blockDim only.
__device__ __forceinline__ double block_sum(double v, double* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int s = 16; s >= 1; s >>= 1) v += __shfl_down_sync(kFullMask, v, s);
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  double t = 0.0;
  for (int i = 0; i < nw; ++i) t += sh[i];
  return t;
}

// 16-byte asynchronous global -> shared copies (the fast and tensor-core matmuls' stage loaders).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace ferry::cuda
