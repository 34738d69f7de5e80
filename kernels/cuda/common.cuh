// Device helpers shared by the CUDA kernels.
//
// Exactness: the CPU back-end builds with -ffp-contract=off, so its products and sums are separately
// rounded. Kernels that must match it bit for bit (matmul, attention and indexer scores, the KDA
// recurrence) use __fmul_rn / __fadd_rn, which nvcc never fuses into an FMA.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/switches.hpp"

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
// 4-byte ones (through L1), for copies that scatter a 16-byte run.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// mbarriers that count bytes (sm_90): bulk copies into shared memory (matmul.cu's f32 bulk rows) and
// st.async stores from the cluster's other blocks (row_norm.cu's push exchange) complete their bytes on one;
// waiting for its phase 0 makes them visible. `bar` is a uint64_t in shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// One thread: an mbarrier whose phase 0 completes once `bytes` have arrived (one arrival, with the count).
// fence_mbar_init() then, before another thread, block or the async proxy uses it.
__device__ __forceinline__ void mbar_arm(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(bar)) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Waits for phase 0. Cluster: the bytes come from other blocks of the cluster (acquire at cluster scope).
template <bool Cluster = false>
__device__ __forceinline__ void mbar_wait0(uint64_t* bar) {
  if constexpr (Cluster)
    asm volatile(
        "{\n .reg .pred P;\n"
        "WAIT:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P, [%0], 0;\n @!P bra WAIT;\n}\n" ::"r"(
            smem_u32(bar))
        : "memory");
  else
    asm volatile(
        "{\n .reg .pred P;\n"
        "WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 P, [%0], 0;\n @!P bra WAIT;\n}\n" ::"r"(smem_u32(bar))
        : "memory");
}
// A bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) into this block's shared memory,
// completing on bar.
__device__ __forceinline__ void bulk_copy_to_smem(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// Programmatic dependent launch of the small kernels (norms, elementwise, attention, KDA, prep_x, the
// generic matmul: everything a decode step runs besides the weight-streaming matmuls, which have their
// own, dec::launch_dependent). A decode step is ~190 kernels, ~140 of them a few microseconds long, one
// after the other on one stream. Launched with launch_small while pdl_small() holds, a kernel's blocks may
// become resident while the kernel before it still runs; each such kernel starts with pdl_begin(): it
// waits until the kernel before has finished and its writes are visible (griddepcontrol.wait: at once
// for a plain launch), then lets the next one launch. So every kernel still runs after the one before it,
// and every block waits before it reads or writes anything (also a block with nothing to do: otherwise
// the kernel could finish before the one before it, and the next kernel would see that one unfinished):
// the same results, with the next kernel's launch and block dispatch overlapping this one. prep_x lets
// its matmul launch first thing and then waits.
// One rule for every kernel that may be launched so: what the kernel before wrote is read with coherent
// loads (plain, or __ldcg), never the non-coherent read-only path (ld.global.nc: what a `const
// __restrict__` pointer compiles to), which assumes the bytes do not change while the kernel runs. prep_x
// read its x that way and, launched programmatically, changed the H200 slice's logits from the first
// token, differently from run to run; with __ldcg the logits are identical (2026-12-02,
// docs/BENCHMARKS.md). On by default since (switches.hpp: FERRY_PDL=0 turns it off; H200 slice decode
// 524.9 / 523.6 against 491.8 / 479.5 tok/s); off, launch_small is a plain launch and pdl_begin returns at
// once.
__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// The CUDA documentation says a programmatic launch may start before the kernel before it on the stream
// completes, and that griddepcontrol.wait waits for grids; it does not say what becomes of a copy or
// memset enqueued between the two (a staged pointer table, a 2-D row copy, a zeroed buffer). So every
// copy and memset the back-end enqueues is noted (stream_copied), and the next kernel launched on that
// stream is a plain launch, whatever it asked for: the copy is then waited for as in any stream.
void stream_copied(cudaStream_t st);
// Whether a copy or memset was noted on st since its last launch through launch_kernel; forgets it.
bool take_stream_copied(cudaStream_t st);
// cudaMemcpyAsync / cudaMemsetAsync(0) on st, checked and noted: how the back-end enqueues every copy.
void copy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st);
void zero_async(void* p, size_t bytes, cudaStream_t st);

// kernel<<<grid, block, smem, st>>>(args...) in clusters of `cluster` blocks along x (1: no clusters; gridDim.x
// a multiple of it), as a programmatic dependent of the kernel before it on st when `programmatic` (the
// kernel must then wait, griddepcontrol.wait, before it reads or writes what the kernel before touches); the
// launch error, if any, is thrown naming this call. The one launcher of every programmatic path:
// launch_kernel, launch_small and launch_small_cluster below and dec::launch_dependent (the decode matmuls).
template <class... P, class... A>
void launch_kernel_in_clusters(bool programmatic, unsigned cluster, void (*kernel)(P...), dim3 grid, dim3 block,
                               size_t smem, cudaStream_t st, A&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[2];
  unsigned n = 0;
  const bool after_copy = take_stream_copied(st);  // forgets the copy whatever this launch is
  if (programmatic && !after_copy) {
    at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    at[n].id = cudaLaunchAttributeClusterDimension;
    at[n].val.clusterDim.x = cluster;
    at[n].val.clusterDim.y = 1;
    at[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = at;
  cfg.numAttrs = n;
  FERRY_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

template <class... P, class... A>
void launch_kernel(bool programmatic, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                   A&&... args) {
  launch_kernel_in_clusters(programmatic, 1, kernel, grid, block, smem, st, std::forward<A>(args)...);
}

// launch_small for a grid of clusters of `cluster` blocks along x.
template <class... P, class... A>
void launch_small_cluster(unsigned cluster, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                          A&&... args) {
  launch_kernel_in_clusters(pdl_for(reinterpret_cast<const void*>(kernel)), cluster, kernel, grid, block, smem, st,
                            std::forward<A>(args)...);
}

// A small kernel (one that starts with pdl_begin), programmatic while pdl_small() (and, under
// FERRY_PDL_ONLY, only if its name has one of the variable's names: pdl_for).
template <class... P, class... A>
void launch_small(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A&&... args) {
  launch_kernel(pdl_for(reinterpret_cast<const void*>(kernel)), kernel, grid, block, smem, st,
                std::forward<A>(args)...);
}

}  // namespace ferry::cuda
