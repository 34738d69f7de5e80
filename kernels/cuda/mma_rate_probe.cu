#include "kernels/cuda/mma_rate_probe.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul_mma.cuh"

namespace ferry::cuda {

namespace {

constexpr int kChains = 8;
constexpr int kThreads = 256;

// Operands of ones (fp16 0x3C00 pairs; E4M3 0x38 bytes) so the sums stay finite; the results are written so
// the compiler keeps every mma.
template <bool E4>
__global__ void __launch_bounds__(kThreads) rate_kernel(float* out, int iters) {
  const uint32_t one = E4 ? 0x38383838u : 0x3C003C00u;
  uint32_t a[4] = {one, one, one, one};
  const uint32_t b0 = one, b1 = one;
  float acc[kChains][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (E4)
        mma::mma16832_e4m3(acc[c], a, b0, b1, acc[c]);
      else
        mma::mma16816(acc[c], a, b0, b1, acc[c]);
    }
  }
  float s = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[blockIdx.x * kThreads + threadIdx.x] = s;
}

template <bool E4>
double tflops(int iters, int reps) {
  int dev = 0, sms = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&dev));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int blocks = sms * 8;  // 64 warps a SM: as many as fit
  float* out = nullptr;
  FERRY_CUDA_CHECK(cudaMalloc(&out, sizeof(float) * blocks * kThreads));
  cudaEvent_t t0, t1;
  FERRY_CUDA_CHECK(cudaEventCreate(&t0));
  FERRY_CUDA_CHECK(cudaEventCreate(&t1));
  rate_kernel<E4><<<blocks, kThreads>>>(out, 16);  // warm-up
  FERRY_CUDA_CHECK(cudaGetLastError());
  float best = 1e30f;
  for (int r = 0; r < reps; ++r) {
    FERRY_CUDA_CHECK(cudaEventRecord(t0));
    rate_kernel<E4><<<blocks, kThreads>>>(out, iters);
    FERRY_CUDA_CHECK(cudaEventRecord(t1));
    FERRY_CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    best = std::min(best, ms);
  }
  FERRY_CUDA_CHECK(cudaEventDestroy(t0));
  FERRY_CUDA_CHECK(cudaEventDestroy(t1));
  FERRY_CUDA_CHECK(cudaFree(out));
  const double macs = (E4 ? 4096.0 : 2048.0) * kChains * iters * (static_cast<double>(blocks) * kThreads / 32);
  return 2 * macs / (best * 1e-3) / 1e12;
}

}  // namespace

MmaRates mma_sync_rates(int iters, int reps) {
  MmaRates r;
  r.fp16_tflops = tflops<false>(iters, reps);
  r.e4m3_tflops = tflops<true>(iters, reps);
  return r;
}

}  // namespace ferry::cuda
