// The bandwidth path of the CUDA matmul: q8_0 and mxfp4 weights with cols a multiple of 512 and
// 16-byte aligned data (every spine and expert matrix of the real models). See matmul.cuh for the
// fixed reduction order that makes a row's result independent of the row count, and matmul_fast.cuh
// for the thread-block body (shared with the grouped expert matmul of moe_grouped.cu).
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "io/errors.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_fast.cuh"
#include "kernels/cuda/switches.hpp"

namespace ferry::cuda {

namespace {

using namespace fast;

constexpr int kO = 4;  // weight rows per warp: 4 warps per 16-row tile (the measured best, 2026-11-29)
constexpr size_t kShallow = 44 * 1024;  // the shallow variant's stage budget (more blocks per SM)

template <class F, int NR, int S>
__global__ void __launch_bounds__(kTileRows / kO * 32, min_blocks<F, NR>())
    matmul_fast_kernel(const PlainProblem p, int64_t nitems) {
  extern __shared__ __align__(16) uint8_t smem[];
  int first, last;
  block_items(nitems, gridDim.x, first, last);
  items_body<F, NR, kO, S>(p, first, last, smem);
}

int g_spread = 0;  // matmul_fast_tune: 0 = default, 1 = one item per block, 2 = a grid of resident blocks
int g_depth = 0;   // 0 = default, 1 = deep, 2 = shallow

}  // namespace

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    FERRY_CUDA_CHECK(cudaGetDevice(&dev));
    FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

bool sm90a_device() {
  static const bool sm90 = [] {
    int dev = 0, major = 0, minor = 0;
    FERRY_CUDA_CHECK(cudaGetDevice(&dev));
    FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major == 9 && minor == 0;
  }();
  return sm90;
}

// Defaults measured on the H200 (2026-12-01, MatmulBenchDepthAndSpreadSweep and
// MoeBenchExpertBatchBandwidth): shallow stages (more blocks per SM) are faster or equal for every
// matrix and row count (q8_0 7168x33792 at one row 2.10 -> 2.63 TB/s; a 16-expert mxfp4 batch at
// 4 rows each 521 -> 412 us); resident blocks walking runs of tiles are not faster than one tile per
// block (the hardware's block scheduler), and slower for the expert batches.
bool fast_shallow(bool q8) {
  (void)q8;
  return g_depth != 1;
}

int64_t fast_grid(int64_t nitems, int per_sm, bool q8) {
  (void)q8;
  return g_spread == 2 ? std::min<int64_t>(nitems, static_cast<int64_t>(per_sm) * sm_count()) : nitems;
}

namespace {

template <class F, int NR, int S>
void launch_s(const PlainProblem& p, cudaStream_t st) {
  constexpr int kThreads = kTileRows / kO * 32;
  constexpr size_t smem = stage_bytes<F, NR>() * S;
  static const int per_sm = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(matmul_fast_kernel<F, NR, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    int b = 0;
    FERRY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, matmul_fast_kernel<F, NR, S>, kThreads, smem));
    return std::max(b, 1);
  }();
  const int64_t nitems = static_cast<int64_t>(p.ntiles) * ((p.n + NR - 1) / NR) * p.parts;
  if (nitems > (int64_t{1} << 31) - 1)
    throw LimitError("cuda matmul: " + std::to_string(nitems) + " tiles in one call (max 2^31 - 1)");
  const int64_t blocks = fast_grid(nitems, per_sm, std::is_same_v<F, Q8>);
  matmul_fast_kernel<F, NR, S><<<static_cast<unsigned>(blocks), kThreads, smem, st>>>(p, nitems);
  FERRY_CUDA_LAUNCHED(matmul_fast_kernel);
}

// Stage depth: deep stages keep more bytes in flight per block, shallow ones fit more blocks per SM.
// Speed only: the arithmetic of an output is the same in both.
template <class F, int NR>
void launch(PlainProblem p, cudaStream_t st) {
  p.group = NR;
  if (fast_shallow(std::is_same_v<F, Q8>)) return launch_s<F, NR, stages<F, NR>(kShallow)>(p, st);
  return launch_s<F, NR, stages<F, NR>()>(p, st);
}

// NR only sets how many rows share one weight read; the arithmetic of each output is the same.
template <class F>
void launch_typed(const PlainProblem& a, int group, cudaStream_t st) {
  const int64_t m = std::min<int64_t>(a.n, group);
  if (m <= 1) return launch<F, 1>(a, st);
  if (m <= 2) return launch<F, 2>(a, st);
  if (m <= 4) return launch<F, 4>(a, st);
  if (m <= 8) return launch<F, 8>(a, st);
  return launch<F, 16>(a, st);
}

}  // namespace

void matmul_fast_tune(int spread, int depth) {
  g_spread = spread;
  g_depth = depth;
}

bool matmul_fast_supported(const Weight& w, const float* x) {
  if (w.type != WType::q8_0 && w.type != WType::mxfp4) return false;
  if (w.cols % kChunk != 0 || w.cols > (int64_t{1} << 30) || w.rows > (int64_t{1} << 30)) return false;
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return aligned(w.data) && aligned(x) && w.row_bytes() % 16 == 0;
}

void launch_matmul_fast(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t st, const splitk::Bufs& sk) {
  PlainProblem a{static_cast<const uint8_t*>(w.data), w.row_bytes(), static_cast<int>(w.rows),
                 static_cast<int>(w.cols), x, y, n, 1, static_cast<int>((w.rows + kTileRows - 1) / kTileRows)};
  a.parts = sk.parts;
  a.unit = sk.unit;
  a.sk = sk;
  if (w.type == WType::mxfp4) return launch_typed<Mx>(a, matmul_group_rows(w.type), st);
  return launch_typed<Q8>(a, matmul_group_rows(w.type), st);
}

}  // namespace ferry::cuda
