// The prompt pass's tensor-core matmul (matmul_mma.cuh): x preparation and the plain matmul's launch.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "io/errors.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"

namespace ferry::cuda {

namespace {

using namespace mma;

// One block per row: the row's max |x| picks k (max |x * 2^k| in [2^14, 2^15)), then hi / lo.
constexpr int kPrepThreads = 256;

__global__ void __launch_bounds__(kPrepThreads) prep_x_kernel(const float* __restrict__ x, int64_t cols,
                                                              __half* __restrict__ hi, __half* __restrict__ lo,
                                                              float* __restrict__ inv) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kPrepThreads) m = fmaxf(m, fabsf(xr[c]));
  __shared__ float part[kPrepThreads / 32];
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
  __syncthreads();
  m = part[0];
#pragma unroll
  for (int i = 1; i < kPrepThreads / 32; ++i) m = fmaxf(m, part[i]);
  int k = 0;
  if (m > 0.0f && isfinite(m)) {
    int e = 0;
    frexpf(m, &e);  // m = f * 2^e, f in [0.5, 1)
    k = max(-125, min(125, 15 - e));  // 2^k and 2^-k stay normal floats; max|x| < 2^128 needs k >= -113
  }
  const float up = __int_as_float((k + 127) << 23), down = __int_as_float((127 - k) << 23);
  __half* hr = hi + r * cols;
  __half* lr = lo ? lo + r * cols : nullptr;
  for (int64_t c = threadIdx.x; c < cols; c += kPrepThreads) {
    const float v = xr[c] * up;  // exact: a power of two, inside the float range
    const __half h = __float2half_rn(v);
    hr[c] = h;
    if (lr) lr[c] = __float2half_rn(v - __half2float(h));  // v - h is exact
  }
  if (threadIdx.x == 0) inv[r] = down;
}

constexpr int kPlainMW = 1;  // 128-row tiles (64 activation rows per group)

// Plain matmul: item j = (row group j / ntiles, weight tile j % ntiles), x prepared as [n, cols].
struct PlainMma {
  const uint8_t* w;
  size_t row_bytes;
  int rows, cols;
  XPrep xp;
  float* y;
  int64_t n;
  int ntiles, group;
  __device__ Item item(int64_t j) const {
    Item it;
    const int64_t grp = j / ntiles;
    const int tile = static_cast<int>(j - grp * ntiles);
    it.c = 0;
    it.z = 0;
    it.r0 = static_cast<int>(grp * group);
    it.row0 = tile * tile_rows(kPlainMW);
    it.w = w + static_cast<size_t>(it.row0) * row_bytes;
    it.nrows = min(tile_rows(kPlainMW), rows - it.row0);
    it.nr = static_cast<int>(min(static_cast<int64_t>(group), n - it.r0));
    return it;
  }
  __device__ int64_t xrow(const Item& it, int r) const { return it.r0 + r; }
  __device__ float* yrow(const Item& it, int r) const { return y + static_cast<int64_t>(it.r0 + r) * rows; }
};

template <class F, int BN, int S, int L>
__global__ void __launch_bounds__(kThreads, 1) plain_mma_kernel(const __grid_constant__ PlainMma p) {
  extern __shared__ __align__(16) uint8_t smem[];
  item_body<F, BN, S, L, kPlainMW>(p, p.item(blockIdx.x), smem);
}

constexpr int kPlainBN = 64;
constexpr int kPlainStages = 4;  // 213 KB for q8_0: one block of 8 warps per SM

template <class F, int L>
void launch_plain(PlainMma p, cudaStream_t st) {
  constexpr int S = kPlainStages;
  constexpr size_t smem = static_cast<size_t>(stage_bytes<F, kPlainBN, L, kPlainMW>()) * S;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(plain_mma_kernel<F, kPlainBN, S, L>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  p.group = kPlainBN;
  p.ntiles = (p.rows + tile_rows(kPlainMW) - 1) / tile_rows(kPlainMW);
  const int64_t items = static_cast<int64_t>(p.ntiles) * ((p.n + kPlainBN - 1) / kPlainBN);
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda mma matmul: " + std::to_string(items) + " tiles in one call");
  plain_mma_kernel<F, kPlainBN, S, L><<<static_cast<unsigned>(items), kThreads, smem, st>>>(p);
  FERRY_CUDA_LAUNCHED(plain_mma_kernel);
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}
const int g_levels = env_is("FERRY_MMA_LEVELS", "1") ? 1 : 2;
const bool g_enabled = !env_is("FERRY_MMA", "0");

}  // namespace

bool matmul_mma_supported(const Weight& w) {
  if (!g_enabled || (w.type != WType::q8_0 && w.type != WType::mxfp4)) return false;
  if (w.cols % kK != 0 || w.cols > (int64_t{1} << 30) || w.rows > (int64_t{1} << 30)) return false;
  // 16-byte windows over each row's stage bytes: the last one ends inside the matrix when it starts
  // and ends 16-aligned.
  return (reinterpret_cast<uintptr_t>(w.data) & 15u) == 0 && w.nbytes() % 16 == 0;
}

size_t mma_prep_bytes(int64_t n, int64_t cols) {
  const size_t halves = static_cast<size_t>(n) * static_cast<size_t>(cols);
  return 2 * halves * sizeof(__half) + static_cast<size_t>(n) * sizeof(float) + 512;
}

XPrep prep_x(const float* x, int64_t n, int64_t cols, void* buf, cudaStream_t st) {
  XPrep p;
  const size_t halves = static_cast<size_t>(n) * static_cast<size_t>(cols);
  auto* hi = static_cast<__half*>(buf);
  __half* lo = g_levels == 2 ? hi + halves : nullptr;
  auto* inv = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(buf) + ((2 * halves * sizeof(__half) + 255) & ~size_t{255}));
  if (n > 0) {
    prep_x_kernel<<<static_cast<unsigned>(n), kPrepThreads, 0, st>>>(x, cols, hi, lo, inv);
    FERRY_CUDA_LAUNCHED(prep_x_kernel);
  }
  p.hi = hi;
  p.lo = lo;
  p.inv = inv;
  p.stride = cols;
  return p;
}

void launch_matmul_mma(const Weight& w, const XPrep& xp, int64_t n, float* y, cudaStream_t st) {
  PlainMma p{static_cast<const uint8_t*>(w.data), w.row_bytes(), static_cast<int>(w.rows), static_cast<int>(w.cols),
             xp, y, n, 0, 0};
  if (n > (int64_t{1} << 30)) throw LimitError("cuda mma matmul: " + std::to_string(n) + " rows in one call");
  const bool l2 = xp.lo != nullptr;
  if (w.type == WType::mxfp4) return l2 ? launch_plain<Mx, 2>(p, st) : launch_plain<Mx, 1>(p, st);
  return l2 ? launch_plain<Q8, 2>(p, st) : launch_plain<Q8, 1>(p, st);
}

}  // namespace ferry::cuda
