// The bandwidth path of the CUDA matmul: q8_0 and mxfp4 weights with cols a multiple of 512 and
// 16-byte aligned data (every spine and expert matrix of the real models). See matmul.cuh for the
// fixed reduction order that makes a row's result independent of the row count, and matmul_fast.cuh
// for the thread-block body (shared with the grouped expert matmul of moe_grouped.cu).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_fast.cuh"

namespace ferry::cuda {

namespace {

using namespace fast;

struct Args {
  const uint8_t* w;
  size_t row_bytes;
  int rows, cols;
  const float* x;
  int64_t n;
  float* y;
};

template <class F, int NR, int O>
__global__ void __launch_bounds__(kTileRows / O * 32) matmul_fast_kernel(Args a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * NR;
  const Tile t{a.w, a.row_bytes, a.rows, a.cols, static_cast<int>(min(static_cast<int64_t>(NR), a.n - r0))};
  tile_body<F, NR, O>(t, PlainRows{a.x, a.y, r0, a.cols, a.rows}, smem);
}

template <class F, int NR, int O>
void launch_o(const Args& a, cudaStream_t st) {
  constexpr size_t smem = stage_bytes<F, NR>() * stages<F, NR>();
  static const bool raised = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(matmul_fast_kernel<F, NR, O>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    return true;
  }();
  (void)raised;
  const dim3 grid(static_cast<unsigned>((a.rows + kTileRows - 1) / kTileRows), static_cast<unsigned>((a.n + NR - 1) / NR));
  matmul_fast_kernel<F, NR, O><<<grid, kTileRows / O * 32, smem, st>>>(a);
  FERRY_CUDA_LAUNCHED(matmul_fast_kernel);
}

int g_rows_per_warp = 0;  // matmul_fast_tune

// Weight rows per warp (O): more rows per warp reuse each x value from shared memory more often and
// cost fewer instructions per weight; fewer give more warps per SM. Measured on the H200 (MatmulBench
// RowsPerWarpSweep, 2026-11-29): O = 4 is fastest or within 5% at every row count for both matrices
// (O = 1 is 20-90% slower: the kernel is bound by instruction count, not by warps in flight).
template <class F, int NR>
void launch(const Args& a, cudaStream_t st) {
  const int o = g_rows_per_warp ? g_rows_per_warp : 4;
  if (o == 1) return launch_o<F, NR, 1>(a, st);
  if (o == 2) return launch_o<F, NR, 2>(a, st);
  return launch_o<F, NR, 4>(a, st);
}

// NR only sets how many rows share one weight read; the arithmetic of each output is the same.
template <class F>
void launch_typed(const Args& a, int group, cudaStream_t st) {
  const int64_t m = std::min<int64_t>(a.n, group);
  if (m <= 1) return launch<F, 1>(a, st);
  if (m <= 2) return launch<F, 2>(a, st);
  if (m <= 4) return launch<F, 4>(a, st);
  if (m <= 8) return launch<F, 8>(a, st);
  return launch<F, 16>(a, st);
}

}  // namespace

void matmul_fast_tune(int rows_per_warp) { g_rows_per_warp = rows_per_warp; }

bool matmul_fast_supported(const Weight& w, const float* x) {
  if (w.type != WType::q8_0 && w.type != WType::mxfp4) return false;
  if (w.cols % kChunk != 0 || w.cols > (int64_t{1} << 30) || w.rows > (int64_t{1} << 30)) return false;
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return aligned(w.data) && aligned(x) && w.row_bytes() % 16 == 0;
}

void launch_matmul_fast(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t st) {
  const Args a{static_cast<const uint8_t*>(w.data), w.row_bytes(), static_cast<int>(w.rows), static_cast<int>(w.cols),
               x, n, y};
  if (w.type == WType::mxfp4) return launch_typed<Mx>(a, matmul_group_rows(w.type), st);
  return launch_typed<Q8>(a, matmul_group_rows(w.type), st);
}

}  // namespace ferry::cuda
