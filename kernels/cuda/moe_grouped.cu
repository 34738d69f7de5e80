// The grouped expert matmul (moe.cuh): grid x = 16-row weight tiles, grid y = groups of NR rows of
// every piece in turn, grid z = which weight (gate / up). Each thread block resolves its piece and
// row pointers, then runs the plain fast matmul's block body (matmul_fast.cuh) on them, so a row's
// outputs are bit-identical to CudaBackend::matmul of that expert's weight on that row.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_fast.cuh"
#include "kernels/cuda/moe.cuh"

namespace ferry::cuda {

namespace {

using namespace fast;

struct GroupArgs {
  GroupTable t;
  int which;  // weight of grid z = 0: 0 = gate (z = 1: up), 2 = down
  size_t row_bytes;
  int rows, cols;  // of the weight
  const float* x;
  float* y[2];     // gate/up: g, u; down: y
};

// __grid_constant__: the table is indexed with per-block values; without it nvcc would copy the
// whole 2.7 KB parameter into local memory per thread to take its address.
template <class F, int NR, int O>
__global__ void __launch_bounds__(kTileRows / O * 32) grouped_kernel(const __grid_constant__ GroupArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ const float* xs[NR];
  __shared__ float* ys[NR];
  const GroupTable& t = a.t;
  const int yb = static_cast<int>(blockIdx.y), z = static_cast<int>(blockIdx.z);
  int c = 0;
  while (c + 1 < t.ncalls && yb >= t.bstart[c + 1]) ++c;
  const int r0 = (yb - t.bstart[c]) * NR;
  const int nr = min(NR, t.m[c] - r0);  // >= 1: the launcher gives piece c ceil(m / NR) blocks
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < nr) {
    const int i = t.loc[c] + r0 + tid;
    const int64_t inner = static_cast<int64_t>(t.base) + i;  // row in the intermediate buffers
    if (a.which == 0) {
      xs[tid] = a.x + static_cast<int64_t>(t.src[i]) * a.cols;
      ys[tid] = a.y[z] + inner * a.rows;
    } else {
      xs[tid] = a.x + inner * a.cols;
      ys[tid] = a.y[0] + static_cast<int64_t>(t.dst[i]) * a.rows;
    }
  }
  __syncthreads();  // tile_body's first cp.async reads xs
  const Tile tile{t.w[c][a.which + z], a.row_bytes, a.rows, a.cols, nr};
  tile_body<F, NR, O>(tile, TableRows{xs, ys}, smem);
}

// O = 4 weight rows per warp: the plain path's measured default (matmul_fast.cu); O changes speed only.
template <class F, int NR>
void launch_nr(GroupArgs& a, int nz, cudaStream_t st) {
  constexpr int O = 4;
  constexpr size_t smem = stage_bytes<F, NR>() * stages<F, NR>();
  static const bool raised = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(grouped_kernel<F, NR, O>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    return true;
  }();
  (void)raised;
  int nb = 0;
  for (int c = 0; c < a.t.ncalls; ++c) {
    a.t.bstart[c] = nb;
    nb += (a.t.m[c] + NR - 1) / NR;
  }
  a.t.bstart[a.t.ncalls] = nb;
  if (nb == 0) return;
  const dim3 grid(static_cast<unsigned>((a.rows + kTileRows - 1) / kTileRows), static_cast<unsigned>(nb),
                  static_cast<unsigned>(nz));
  grouped_kernel<F, NR, O><<<grid, kTileRows / O * 32, smem, st>>>(a);
  FERRY_CUDA_LAUNCHED(grouped_kernel);
}

// NR (rows sharing one weight read) from the largest piece, as the plain matmul picks it from n: it
// changes which rows share a block, never a row's arithmetic.
template <class F>
void launch_f(GroupArgs& a, int group, int nz, cudaStream_t st) {
  int mmax = 0;
  for (int c = 0; c < a.t.ncalls; ++c) mmax = std::max(mmax, a.t.m[c]);
  const int m = std::min(mmax, group);
  if (m <= 1) return launch_nr<F, 1>(a, nz, st);
  if (m <= 2) return launch_nr<F, 2>(a, nz, st);
  if (m <= 4) return launch_nr<F, 4>(a, nz, st);
  if (m <= 8) return launch_nr<F, 8>(a, nz, st);
  return launch_nr<F, 16>(a, nz, st);
}

void launch_typed(GroupArgs& a, WType type, int nz, cudaStream_t st) {
  if (type == WType::mxfp4) return launch_f<Mx>(a, matmul_group_rows(type), nz, st);
  return launch_f<Q8>(a, matmul_group_rows(type), nz, st);
}

size_t row_bytes_of(WType type, int cols) {
  Weight w;
  w.type = type;
  w.cols = cols;
  return w.row_bytes();
}

}  // namespace

void launch_grouped_gate_up(const GroupTable& t, WType type, const float* x, int in, int inter, float* g, float* u,
                            cudaStream_t st) {
  GroupArgs a{t, 0, row_bytes_of(type, in), inter, in, x, {g, u}};
  launch_typed(a, type, 2, st);
}

void launch_grouped_down(const GroupTable& t, WType type, const float* act, int in, int inter, float* y,
                         cudaStream_t st) {
  GroupArgs a{t, 2, row_bytes_of(type, inter), in, inter, act, {y, nullptr}};
  launch_typed(a, type, 1, st);
}

}  // namespace ferry::cuda
