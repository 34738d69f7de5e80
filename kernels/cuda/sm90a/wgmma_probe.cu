// See wgmma_probe.cuh. sm_90a only (wgmma is an arch-specific instruction).
#include "kernels/cuda/sm90a/wgmma_probe.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/sm90a/wgmma.cuh"

namespace ferry::cuda {
namespace {

constexpr int kSteps = kWgmmaProbeK / 16;

__device__ __forceinline__ uint32_t pair_at(const uint16_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 16);
}

// One warpgroup. Warp w owns A's rows 16w .. 16w + 15 (the mma.sync A fragment layout, which is also
// wgmma's for A in registers); accumulator element i of chunk c (n8 columns 8c ..) sits where mma.sync's
// C fragment puts it.
template <int N>
__global__ void __launch_bounds__(128) probe_kernel(const uint16_t* A, const uint16_t* X, int kstride, int nstride,
                                                    int lbo, int sbo, float* dw, float* dm, int* compiled) {
  // (+1 KB: a descriptor that strides further than the layout, e.g. its two offsets swapped, still reads
  // inside the block's shared memory: wrong sums, not a fault that ends the process's CUDA context.)
  __shared__ __align__(128) uint8_t bs[kSteps * N * 32 + 1024];
  for (int i = threadIdx.x; i < kSteps * N * 16; i += 128) {
    const int s = i / (N * 16), r = i - s * N * 16, n = r / 16, k = r % 16;
    const int off = s * N * 32 + (n / 8) * nstride + (k / 8) * kstride + (n % 8) * 16 + (k % 8) * 2;
    *reinterpret_cast<uint16_t*>(bs + off) = X[n * kWgmmaProbeK + 16 * s + k];
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  uint32_t a[kSteps][4];
  for (int s = 0; s < kSteps; ++s) {
    const uint16_t* r0 = A + (16 * w + g) * kWgmmaProbeK + 16 * s + 2 * t;
    const uint16_t* r1 = r0 + 8 * kWgmmaProbeK;
    a[s][0] = pair_at(r0), a[s][1] = pair_at(r1), a[s][2] = pair_at(r0 + 8), a[s][3] = pair_at(r1 + 8);
  }
  auto put = [&](float* out, int c, const float (&v)[4]) {
    const int row = 16 * w + g, col = 8 * c + 2 * t;
    out[row * N + col] = v[0], out[row * N + col + 1] = v[1];
    out[(row + 8) * N + col] = v[2], out[(row + 8) * N + col + 1] = v[3];
  };
  // mma.sync: per n8 chunk, the 4 steps into a fresh accumulator.
  for (int c = 0; c < N / 8; ++c) {
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s = 0; s < kSteps; ++s) {
      const uint16_t* xr = X + (8 * c + g) * kWgmmaProbeK + 16 * s + 2 * t;
      mma::mma16816(sum, a[s], pair_at(xr), pair_at(xr + 8), sum);
    }
    put(dm, c, sum);
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (threadIdx.x == 0) *compiled = 1;
  wgmma::fence_smem_writes();  // the generic writes, seen by wgmma
  __syncthreads();
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  wgmma::fence();
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const uint64_t desc = wgmma::smem_desc(bs + s * N * 32, lbo, sbo);
    if constexpr (N == 8)
      wgmma::wgmma_n8(d, a[s], desc, s);
    else
      wgmma::wgmma_n24(d, a[s], desc, s);
  }
  wgmma::commit();
  wgmma::wait_all();
#pragma unroll
  for (int c = 0; c < N / 8; ++c) {
    const float v[4] = {d[4 * c], d[4 * c + 1], d[4 * c + 2], d[4 * c + 3]};
    put(dw, c, v);
  }
#else
  if (threadIdx.x == 0) *compiled = 0;
#endif
}

}  // namespace

bool wgmma_probe(int n, const uint16_t* a, const uint16_t* x, int kstride, int nstride, int lbo, int sbo, float* dw,
                 float* dm) {
  if (n != 8 && n != 24) return false;
  uint16_t *da = nullptr, *dx = nullptr;
  float *ow = nullptr, *om = nullptr;
  int* flag = nullptr;
  const size_t na = 64 * kWgmmaProbeK, nx = static_cast<size_t>(n) * kWgmmaProbeK, no = 64 * static_cast<size_t>(n);
  FERRY_CUDA_CHECK(cudaMalloc(&da, na * 2));
  FERRY_CUDA_CHECK(cudaMalloc(&dx, nx * 2));
  FERRY_CUDA_CHECK(cudaMalloc(&ow, no * 4));
  FERRY_CUDA_CHECK(cudaMalloc(&om, no * 4));
  FERRY_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  FERRY_CUDA_CHECK(cudaMemcpy(da, a, na * 2, cudaMemcpyHostToDevice));
  FERRY_CUDA_CHECK(cudaMemcpy(dx, x, nx * 2, cudaMemcpyHostToDevice));
  FERRY_CUDA_CHECK(cudaMemset(ow, 0xff, no * 4));
  FERRY_CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
  if (n == 8)
    probe_kernel<8><<<1, 128>>>(da, dx, kstride, nstride, lbo, sbo, ow, om, flag);
  else
    probe_kernel<24><<<1, 128>>>(da, dx, kstride, nstride, lbo, sbo, ow, om, flag);
  FERRY_CUDA_CHECK(cudaGetLastError());
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
  int compiled = 0;
  FERRY_CUDA_CHECK(cudaMemcpy(&compiled, flag, sizeof(int), cudaMemcpyDeviceToHost));
  FERRY_CUDA_CHECK(cudaMemcpy(dw, ow, no * 4, cudaMemcpyDeviceToHost));
  FERRY_CUDA_CHECK(cudaMemcpy(dm, om, no * 4, cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(da), static_cast<void*>(dx), static_cast<void*>(ow), static_cast<void*>(om),
                  static_cast<void*>(flag)})
    FERRY_CUDA_CHECK(cudaFree(p));
  return compiled == 1;
}

}  // namespace ferry::cuda
