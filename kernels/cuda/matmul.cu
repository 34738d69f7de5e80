// Matmul (generic path) and embed; see matmul.cuh for both matmul paths and their reduction orders.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "io/formats/ggml_blocks.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"
#include "kernels/cuda/tile_pack.cuh"

namespace ferry::cuda {

namespace {

constexpr int kWarps = 4;       // warps per thread block; they share the block's copy of x
constexpr int kOutPerWarp = 2;  // weight rows per warp: independent accumulation chains (ILP)
constexpr int kChunkCols = 1024;  // columns per chunk: x chunk NR x 4 KiB, weight chunk <= 4 KiB per row

// Per weight type: bytes per 32-column block and the decode of element `lane` of block `b`.
template <WType T>
struct Fmt;
template <>
struct Fmt<WType::f32> {
  static constexpr int kBlockBytes = 128;
  __device__ static float get(const uint8_t* p, int b, int lane) {
    return reinterpret_cast<const float*>(p)[b * 32 + lane];
  }
};
template <>
struct Fmt<WType::q8_0> {
  static constexpr int kBlockBytes = 34;
  __device__ static float get(const uint8_t* p, int b, int lane) {
    const uint8_t* blk = p + b * 34;
    const float d = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk)));
    return mul(static_cast<float>(static_cast<int8_t>(blk[2 + lane])), d);  // exact
  }
};
template <>
struct Fmt<WType::mxfp4> {
  static constexpr int kBlockBytes = 17;
  // Lane l reads nibble l%16 of the block's 16 bytes: the low nibble for l < 16, the high one above.
  __device__ static float get(const uint8_t* p, int b, int lane) {
    const uint8_t* blk = p + b * 17;
    const unsigned e = blk[0];
    const unsigned nib = (static_cast<unsigned>(blk[1 + (lane & 15)]) >> ((lane >> 4) << 2)) & 15u;
    // Doubled E2M1 magnitudes 0,1,2,3,4,6,8,12 picked by a byte permute (no divergent table load).
    const int mag = static_cast<int>(__byte_perm(0x03020100u, 0x0C080604u, nib & 7u) & 0xffu);
    const float v = static_cast<float>((nib & 8u) ? -mag : mag);
    // 2^(e-128): biased exponent e-1 for e >= 2; float denormals 2^-127, 2^-128 for e = 1, 0.
    const float scale = __uint_as_float(e >= 2 ? (e - 1u) << 23 : 0x00200000u << e);
    return mul(v, scale);  // exact, as ggml's E8M0_TO_FP32_HALF product on the CPU
  }
};

// Copy global bytes [src, src+n) into smem so that global address a lands at dst + (a - (src & ~15)):
// 16-byte loads for the aligned middle, single bytes for the ends. All 32 lanes call it.
__device__ void stage_bytes(uint8_t* dst, const uint8_t* src, int n, int lane) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(src), e = s + static_cast<uintptr_t>(n);
  const uintptr_t base = s & ~uintptr_t{15};
  const uintptr_t as = (s + 15) & ~uintptr_t{15}, ae = e & ~uintptr_t{15};
  if (as < ae) {
    const int nv = static_cast<int>((ae - as) / 16);
    const uint4* g = reinterpret_cast<const uint4*>(as);
    uint4* d = reinterpret_cast<uint4*>(dst + (as - base));
    for (int i = lane; i < nv; i += 32) d[i] = __ldg(g + i);
    const uintptr_t head_end = as;
    if (s + lane < head_end) dst[s + lane - base] = __ldg(src + lane);
    if (ae + lane < e) dst[ae + lane - base] = __ldg(reinterpret_cast<const uint8_t*>(ae) + lane);
  } else {
    for (uintptr_t a = s + lane; a < e; a += 32) dst[a - base] = __ldg(reinterpret_cast<const uint8_t*>(a));
  }
}

// Shared memory of one thread block: x[NR][kChunkCols] floats, then per warp and weight row a chunk of
// weight bytes (+32 for the 16-byte alignment shift and padding).
template <WType T, int NR>
constexpr size_t matmul_smem() {
  return sizeof(float) * NR * kChunkCols + size_t{kWarps} * kOutPerWarp * (kChunkCols / 32 * Fmt<T>::kBlockBytes + 32);
}

// Block: kWarps warps x kOutPerWarp weight rows, against rows [r0, r0 + nr) of x (NR >= nr). Per chunk
// of kChunkCols columns the block stages x (all threads) and each warp its weight rows' bytes into
// shared memory, then lane l applies element l of every 32-column block to all rows.
// Strides of one launch: x and y rows (floats), and per head (blockIdx.z) the offsets of its weight
// rows (bytes), x and y slices (floats). A plain matmul is one head with x_row = cols, y_row = rows.
struct Strides {
  int64_t x_row, y_row;
  size_t w_head;
  int64_t x_head, y_head;
};

template <WType T, int NR>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                  const float* __restrict__ x, int64_t n, float* __restrict__ y, Strides s) {
  pdl_begin();
  using F = Fmt<T>;
  w += blockIdx.z * s.w_head;
  x += blockIdx.z * s.x_head;
  y += blockIdx.z * s.y_head;
  constexpr int kWBytes = kChunkCols / 32 * F::kBlockBytes + 32;
  extern __shared__ __align__(16) uint8_t smem[];
  float* xs = reinterpret_cast<float*>(smem);
  uint8_t* wsm = smem + sizeof(float) * NR * kChunkCols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kOutPerWarp;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * NR;
  const int nr = static_cast<int>(min(static_cast<int64_t>(NR), n - r0));
  const int nout = static_cast<int>(max(int64_t{0}, min(static_cast<int64_t>(kOutPerWarp), rows - o0)));
  float acc[kOutPerWarp][NR];
#pragma unroll
  for (int o = 0; o < kOutPerWarp; ++o)
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[o][r] = 0.0f;
  for (int64_t c0 = 0; c0 < cols; c0 += kChunkCols) {
    const int nc = static_cast<int>(min(static_cast<int64_t>(kChunkCols), cols - c0));
    const int nb = nc / 32;
    __syncthreads();  // every warp is done with the previous chunk
    for (int i = threadIdx.x; i < NR * nc; i += kWarps * 32) {
      const int r = i / nc, k = i - r * nc;
      xs[r * kChunkCols + k] = r < nr ? __ldcg(x + (r0 + r) * s.x_row + c0 + k) : 0.0f;
    }
    int off[kOutPerWarp];
#pragma unroll
    for (int o = 0; o < kOutPerWarp; ++o) {
      const uint8_t* src = w + static_cast<size_t>(o0 + o) * row_bytes + static_cast<size_t>(c0 / 32) * F::kBlockBytes;
      off[o] = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 15);
      if (o < nout) stage_bytes(wsm + (warp * kOutPerWarp + o) * kWBytes, src, nb * F::kBlockBytes, lane);
    }
    __syncthreads();
    if (nout == 0) continue;
    const uint8_t* wrow[kOutPerWarp];
#pragma unroll
    for (int o = 0; o < kOutPerWarp; ++o) wrow[o] = wsm + (warp * kOutPerWarp + o) * kWBytes + off[o];
    const float* xl = xs + lane;
#pragma unroll 4
    for (int b = 0; b < nb; ++b) {
      float xv[NR];
#pragma unroll
      for (int r = 0; r < NR; ++r) xv[r] = xl[r * kChunkCols + b * 32];
#pragma unroll
      for (int o = 0; o < kOutPerWarp; ++o) {
        if (o < nout) {
          const float wv = F::get(wrow[o], b, lane);
#pragma unroll
          for (int r = 0; r < NR; ++r) acc[o][r] = add(acc[o][r], mul(xv[r], wv));
        }
      }
    }
  }
#pragma unroll
  for (int o = 0; o < kOutPerWarp; ++o)
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const float v = warp_fold(acc[o][r]);
      if (lane == 0 && o < nout && r < nr) y[(r0 + r) * s.y_row + o0 + o] = v;
    }
}

// Columns not a multiple of 32 (f32 weights only): the generic warp dot, one warp per output.
// x without __restrict__: read coherently (common.cuh pdl_begin: what the kernel before wrote).
__global__ void matmul_f32_tail_kernel(const float* __restrict__ w, int64_t rows, int64_t cols, const float* x,
                                       int64_t n, float* y) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t idx = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (idx >= rows * n) return;
  const int64_t r = idx / rows, o = idx % rows;
  const float v = warp_dot(x + r * cols, w + o * cols, cols, lane);
  if (lane == 0) y[r * rows + o] = v;
}

// One activation row (decode steps) of an f32 weight with cols % 32 == 0: the routers (896x7168) and MLA's
// per-head matrices. The generic kernel stages 1,024-column chunks of x and of a warp's 2 weight rows in
// shared memory between barriers, so a lane has about one load in flight: the routers ran at 0.86 TB/s
// (H200, 2026-12-02). Here a warp owns one weight row and reads it straight into registers, kRow1Batch
// coalesced 128-byte warp loads at a time (x beside them, from L2 with __ldcg: the kernel before this one
// wrote it, common.cuh pdl_begin), then adds the products in column order: lane l still accumulates
// columns l, l + 32, ... with separately rounded multiply and add, then warp_fold. The generic kernel's
// order, so the bits of the CPU back-end, as before. (A kernel with one warp per row streaming through
// shared memory was measured slower early on 2026-12-02; this one has kRow1Batch weight loads per lane in
// flight, as many of x, and no barrier. Two batches in flight, the next one's loads issued before this one's
// adds and the first batch's weights before pdl_begin: slower, 14.7 against 14.0 us per router, H100
// 2026-12-06. A thread block per row, its 4 warps loading a quarter of the row each at once, x and then the
// products in shared memory, warp 0 adding them in order: slower too, 18.2 against 13.3 us, same call.)
constexpr int kRow1Warps = 4;
constexpr int kRow1Batch = 32;

// A weight float read once (not kept in L1). Not volatile: the compiler issues a batch's loads
// together.
__device__ __forceinline__ float ld_stream_f32(const float* p) {
  float v;
  asm("ld.global.nc.L1::no_allocate.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
  return v;
}

__global__ void __launch_bounds__(kRow1Warps * 32)
    matmul_f32_row1_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                           const float* __restrict__ x, float* __restrict__ y, Strides s) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kRow1Warps + (threadIdx.x >> 5);
  if (o >= rows) return;  // a whole warp
  const uint8_t* row = w + blockIdx.z * s.w_head + static_cast<size_t>(o) * row_bytes;
  const float* wr = reinterpret_cast<const float*>(row) + lane;
  const float* xr = x + blockIdx.z * s.x_head + lane;
  const int64_t nb = cols / 32;
  float acc = 0.0f;
  int64_t b = 0;
  for (; b + kRow1Batch <= nb; b += kRow1Batch) {
    float wv[kRow1Batch], xv[kRow1Batch];
#pragma unroll
    for (int u = 0; u < kRow1Batch; ++u) {
      wv[u] = ld_stream_f32(wr + (b + u) * 32);
      xv[u] = __ldcg(xr + (b + u) * 32);
    }
#pragma unroll
    for (int u = 0; u < kRow1Batch; ++u) acc = add(acc, mul(xv[u], wv[u]));
  }
  if (b < nb) {  // the last nb % kRow1Batch blocks: loads first, then the sums in order
    float wv[kRow1Batch], xv[kRow1Batch];
#pragma unroll
    for (int u = 0; u < kRow1Batch; ++u) {
      const bool in = b + u < nb;
      wv[u] = in ? ld_stream_f32(wr + (b + u) * 32) : 0.0f;
      xv[u] = in ? __ldcg(xr + (b + u) * 32) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kRow1Batch; ++u)
      if (b + u < nb) acc = add(acc, mul(xv[u], wv[u]));
  }
  const float v = warp_fold(acc);
  if (lane == 0) y[blockIdx.z * s.y_head + o] = v;
}

// The same rows, order and bits with the row in flight at once (row_bulk_on; on by default since 2026-12-07,
// FERRY_F32_ROW_BULK=0 turns it off). The routers (896x7168) ran at 2.3 TB/s (H200, 11.1 us each): a warp walks its
// row in 7 dependent batches of loads and there are 6.8 warps a SM. Here a block is one warp and one row: lane 0
// asks for the whole row with bulk copies into shared memory (cp.async.bulk, one mbarrier per 1,024 columns)
// before the programmatic wait, so every weight byte of the launch is requested at once (28 KB a block: 7 blocks a
// SM by shared memory, 924 rows in one wave); x comes from L2 batch by batch as before (the next batch loaded
// while this one's chunk is awaited), and lane l adds columns l, l + 32, ... from shared memory in column order.
constexpr int kBulkChunkCols = kRow1Batch * 32;  // one batch of x: 1,024 columns
constexpr int kBulkMaxChunks = 12;  // rows of up to 12,288 columns (48 KB of shared memory)

__global__ void __launch_bounds__(32)
    matmul_f32_row_bulk_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                               const float* __restrict__ x, float* __restrict__ y, Strides s) {
  extern __shared__ __align__(16) uint8_t smem[];  // the row (cp.async.bulk: 16-byte aligned)
  __shared__ __align__(8) uint64_t bar[kBulkMaxChunks];
  float* ws = reinterpret_cast<float*>(smem);
  const int lane = threadIdx.x;
  const int64_t o = blockIdx.x;
  const int nchunks = static_cast<int>((cols + kBulkChunkCols - 1) / kBulkChunkCols);
  if (lane == 0) {
    const uint8_t* row = w + blockIdx.z * s.w_head + static_cast<size_t>(o) * row_bytes;
    const auto bytes = [&](int c) {  // chunk c's: columns [c0, min(cols, c0 + kBulkChunkCols))
      const int64_t c0 = static_cast<int64_t>(c) * kBulkChunkCols;
      return static_cast<uint32_t>(min(cols - c0, int64_t{kBulkChunkCols}) * sizeof(float));
    };
    for (int c = 0; c < nchunks; ++c) mbar_arm(&bar[c], bytes(c));
    fence_mbar_init();
    for (int c = 0; c < nchunks; ++c)
      bulk_copy_to_smem(ws + c * kBulkChunkCols, row + static_cast<size_t>(c) * kBulkChunkCols * sizeof(float), bytes(c),
                        &bar[c]);
  }
  __syncwarp();
  pdl_begin();
  const float* xr = x + blockIdx.z * s.x_head + lane;
  const int64_t nb = cols / 32;
  float acc = 0.0f;
  float xv[kRow1Batch], xn[kRow1Batch];
  auto load_x = [&](int64_t b0, float (&v)[kRow1Batch]) {
#pragma unroll
    for (int u = 0; u < kRow1Batch; ++u) v[u] = b0 + u < nb ? __ldcg(xr + (b0 + u) * 32) : 0.0f;
  };
  load_x(0, xv);
  for (int64_t b = 0; b < nb; b += kRow1Batch) {  // a batch of 32 blocks = one chunk of 1,024 columns
    if (b + kRow1Batch < nb) load_x(b + kRow1Batch, xn);
    mbar_wait0(&bar[b / kRow1Batch]);
#pragma unroll
    for (int u = 0; u < kRow1Batch; ++u)
      if (b + u < nb) acc = add(acc, mul(xv[u], ws[(b + u) * 32 + lane]));
#pragma unroll
    for (int u = 0; u < kRow1Batch; ++u) xv[u] = xn[u];
  }
  const float v = warp_fold(acc);
  if (lane == 0) y[blockIdx.z * s.y_head + o] = v;
}

// Rows of up to 32 x NB columns (MLA's per-head W_uk^T, 512x128 per head: 4 blocks of 32): one warp per row
// loads 4 floats per lane, so a warp has 512 bytes in flight and a block of 4 warps lives for one load
// round trip (H200 slice, 2026-12-02: 62 us for the 25 MB of 96 heads, 0.4 TB/s). Here a warp owns RW =
// kRow1Batch / NB consecutive rows of one head and issues all their loads at once (x's NB floats once),
// then adds each row's products exactly as matmul_f32_row1_kernel: lane l over columns l, l + 32, ... in
// order from 0, then warp_fold. The same bits (the CPU's), 8x the bytes in flight per warp.
template <int NB>
__global__ void __launch_bounds__(kRow1Warps * 32)
    matmul_f32_short_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                            const float* __restrict__ x, float* __restrict__ y, Strides s) {
  constexpr int RW = kRow1Batch / NB;
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kRow1Warps + (threadIdx.x >> 5)) * RW;
  if (o0 >= rows) return;  // a whole warp
  const int nb = static_cast<int>(cols / 32);  // <= NB
  const uint8_t* base = w + blockIdx.z * s.w_head;
  const float* xr = x + blockIdx.z * s.x_head + lane;
  float xv[NB], wv[RW][NB];
#pragma unroll
  for (int u = 0; u < NB; ++u) xv[u] = u < nb ? __ldcg(xr + u * 32) : 0.0f;
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const float* wr = reinterpret_cast<const float*>(base + static_cast<size_t>(o0 + r) * row_bytes) + lane;
#pragma unroll
    for (int u = 0; u < NB; ++u) wv[r][u] = o0 + r < rows && u < nb ? ld_stream_f32(wr + u * 32) : 0.0f;
  }
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < NB; ++u)
      if (u < nb) acc = add(acc, mul(xv[u], wv[r][u]));
    const float v = warp_fold(acc);
    if (lane == 0 && o0 + r < rows) y[blockIdx.z * s.y_head + o0 + r] = v;
  }
}

// f32 matmuls of many rows (a prompt pass's routers: 896x7168 at 1,024 rows; MLA's per-head matrices) with
// the generic kernel's order, so the CPU's bits: output (o, r) is lane l's sum over columns l, l + 32, ...
// from 0 in increasing order (add(acc, mul(x, w)), no fma), then warp_fold. The generic kernel gives each
// warp 2 outputs of 8 rows, so every product costs a load (x and the weight from shared memory, 10 loads
// per 16 products): a prompt pass's three routers took 14 ms of the 1,024-token pass (H200, 2026-12-01,
// ~2.8 TFLOP/s). Here a warp owns a tile of kTileO outputs x kTileR rows (64 sums per lane: 16 loads per
// 64 products); the block's kTileWarpsO x kTileWarpsR warps share a stage of kTileK columns of x's rows and
// the weights' rows in shared memory (16-byte loads; rows past the end read as zeros, never stored).
// PIPE (FERRY_F32_TILE=2, the default): two stages in dynamic shared memory, the next one's copies (cp.async)
// in flight while the warps work on this one, instead of every warp waiting for each stage's loads (a
// 1,024-token pass's three routers 3.28 -> 2.64 ms, H100, 2026-12-07b).
constexpr int kTileO = 8, kTileR = 8, kTileWarpsO = 2, kTileWarpsR = 4, kTileK = 256;
constexpr int kTileThreads = kTileWarpsO * kTileWarpsR * 32;
constexpr int kTileBO = kTileO * kTileWarpsO, kTileBR = kTileR * kTileWarpsR;  // block: 16 outputs x 32 rows
constexpr size_t kTileStageBytes = static_cast<size_t>(kTileBR + kTileBO) * kTileK * sizeof(float);

template <bool PIPE>
__global__ void __launch_bounds__(kTileThreads)
    matmul_f32_tile_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
                           int64_t n, float* __restrict__ y, Strides s) {
  pdl_begin();
  extern __shared__ __align__(16) float tile_smem[];  // PIPE: 2 x (xs, ws)
  __shared__ __align__(16) float xs1[PIPE ? 1 : kTileBR][PIPE ? 4 : kTileK];
  __shared__ __align__(16) float ws1[PIPE ? 1 : kTileBO][PIPE ? 4 : kTileK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wo = warp % kTileWarpsO, wr = warp / kTileWarpsO;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kTileBO, r0 = static_cast<int64_t>(blockIdx.y) * kTileBR;
  const uint8_t* wz = w + blockIdx.z * s.w_head;
  const float* xz = x + blockIdx.z * s.x_head;
  float acc[kTileO][kTileR];
#pragma unroll
  for (int o = 0; o < kTileO; ++o)
#pragma unroll
    for (int r = 0; r < kTileR; ++r) acc[o][r] = 0.0f;
  using XS = float[kTileK];
  const auto stage_x = [&](int64_t c0) -> XS* {
    if constexpr (PIPE) return reinterpret_cast<XS*>(tile_smem + ((c0 / kTileK) & 1) * (kTileBR + kTileBO) * kTileK);
    else return xs1;
  };
  const auto stage_w = [&](int64_t c0) -> XS* {
    if constexpr (PIPE) return stage_x(c0) + kTileBR;
    else return ws1;
  };
  // Stage c0's x rows and weight rows into its buffers: rows past the ends as zeros (never stored);
  // PIPE: by cp.async, one commit group per stage.
  const auto fill = [&](int64_t c0) {
    const int n4 = static_cast<int>(min(static_cast<int64_t>(kTileK), cols - c0)) / 4;
    XS* xs = stage_x(c0);
    XS* ws = stage_w(c0);
    for (int i = threadIdx.x; i < kTileBR * n4; i += kTileThreads) {
      const int r = i / n4, q = i - r * n4;
      const float* src = xz + (r0 + r) * s.x_row + c0 + 4 * q;
      if (PIPE && r0 + r < n) {
        cp_async16(&xs[r][q * 4], src);
      } else {
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < n) v = __ldcg(reinterpret_cast<const float4*>(src));
        *reinterpret_cast<float4*>(&xs[r][q * 4]) = v;
      }
    }
    for (int i = threadIdx.x; i < kTileBO * n4; i += kTileThreads) {
      const int o = i / n4, q = i - o * n4;
      const float* src = reinterpret_cast<const float*>(wz + static_cast<size_t>(o0 + o) * row_bytes) + c0 + 4 * q;
      if (PIPE && o0 + o < rows) {
        cp_async16(&ws[o][q * 4], src);
      } else {
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (o0 + o < rows) v = __ldg(reinterpret_cast<const float4*>(src));
        *reinterpret_cast<float4*>(&ws[o][q * 4]) = v;
      }
    }
    if constexpr (PIPE) cp_async_commit();
  };
  if constexpr (PIPE) fill(0);
  for (int64_t c0 = 0; c0 < cols; c0 += kTileK) {
    const int nc = static_cast<int>(min(static_cast<int64_t>(kTileK), cols - c0));  // a multiple of 32
    if constexpr (PIPE) {
      // The buffer of stage c0 + kTileK was last read at stage c0 - kTileK: the barrier at the end of that
      // stage's loop below (every warp done with it) came before this fill.
      if (c0 + kTileK < cols) {
        fill(c0 + kTileK);
        cp_async_wait<1>();  // this stage's group is in; the next one's may still fly
      } else {
        cp_async_wait<0>();
      }
    } else {
      __syncthreads();  // every warp is done with the previous stage
      fill(c0);
    }
    __syncthreads();
    XS* xs = stage_x(c0);
    XS* ws = stage_w(c0);
    for (int b = 0; b < nc / 32; ++b) {
      float xv[kTileR], wv[kTileO];
#pragma unroll
      for (int r = 0; r < kTileR; ++r) xv[r] = xs[wr * kTileR + r][b * 32 + lane];
#pragma unroll
      for (int o = 0; o < kTileO; ++o) wv[o] = ws[wo * kTileO + o][b * 32 + lane];
#pragma unroll
      for (int o = 0; o < kTileO; ++o)
#pragma unroll
        for (int r = 0; r < kTileR; ++r) acc[o][r] = add(acc[o][r], mul(xv[r], wv[o]));
    }
    if constexpr (PIPE) __syncthreads();  // every warp is done with this stage's buffer before its next fill
  }
#pragma unroll
  for (int o = 0; o < kTileO; ++o)
#pragma unroll
    for (int r = 0; r < kTileR; ++r) {
      const float v = warp_fold(acc[o][r]);
      const int64_t oo = o0 + wo * kTileO + o, rr = r0 + wr * kTileR + r;
      if (lane == 0 && oo < rows && rr < n) y[blockIdx.z * s.y_head + rr * s.y_row + oo] = v;
    }
}

int g_f32_tile = -1;  // matmul_f32_tile_tune

// FERRY_F32_TILE / matmul_f32_tile_tune: 0 off, 1 the tile kernel, 2 its two-stage pipelined version.
int f32_tile_level() {
  static const int env = env_level("FERRY_F32_TILE", 2, 2);
  return level_on(g_f32_tile, env, 2);
}

// Whether the tile kernel takes this call: on (FERRY_F32_TILE), 32+ rows, 16-byte loads line up.
bool f32_tile_takes(const Weight& w, const float* x, int64_t n, const Strides& s) {
  if (f32_tile_level() == 0 || n < 32 || w.cols % 32 != 0) return false;
  const auto a16 = [](uintptr_t v) { return v % 16 == 0; };
  return a16(reinterpret_cast<uintptr_t>(w.data)) && a16(reinterpret_cast<uintptr_t>(x)) && w.row_bytes() % 16 == 0 &&
         s.w_head % 16 == 0 && s.x_row % 4 == 0 && s.x_head % 4 == 0;
}

void launch_f32_tile(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t st, const Strides& s,
                     int64_t heads) {
  const dim3 grid(static_cast<unsigned>((w.rows + kTileBO - 1) / kTileBO), static_cast<unsigned>((n + kTileBR - 1) / kTileBR),
                  static_cast<unsigned>(heads));
  if (f32_tile_level() == 2) {
    static const bool raised = [] {
      FERRY_CUDA_CHECK(cudaFuncSetAttribute(matmul_f32_tile_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(2 * kTileStageBytes)));
      return true;
    }();
    (void)raised;
    return launch_small(matmul_f32_tile_kernel<true>, grid, kTileThreads, 2 * kTileStageBytes, st,
                        static_cast<const uint8_t*>(w.data), w.row_bytes(), w.rows, w.cols, x, n, y, s);
  }
  launch_small(matmul_f32_tile_kernel<false>, grid, kTileThreads, 0, st, static_cast<const uint8_t*>(w.data),
               w.row_bytes(), w.rows, w.cols, x, n, y, s);
}

int g_row1 = -1;  // matmul_f32_row1_tune

bool row1_on() {
  static const bool env = env_switch("FERRY_F32_ROW1", true);
  return switch_on(g_row1, env);
}

int g_row_bulk = -1;  // matmul_f32_row_bulk_tune

bool row_bulk_on() {
  static const bool env = env_switch("FERRY_F32_ROW_BULK", true);
  return switch_on(g_row_bulk, env);
}

// Rows the bulk kernel takes: whole 16-byte granules, aligned, at most kBulkMaxChunks chunks.
bool row_bulk_takes(const Weight& w, const Strides& s) {
  const auto al = [](uintptr_t v) { return (v & 15u) == 0; };
  return row_bulk_on() && w.cols % 32 == 0 && w.cols <= int64_t{kBulkChunkCols} * kBulkMaxChunks &&
         al(reinterpret_cast<uintptr_t>(w.data)) && w.row_bytes() % 16 == 0 && s.w_head % 16 == 0;
}

template <int NB>
void launch_f32_short(const Weight& w, const float* x, float* y, cudaStream_t st, const Strides& s, int64_t heads) {
  constexpr int64_t rows_per_block = int64_t{kRow1Warps} * (kRow1Batch / NB);
  const dim3 grid(static_cast<unsigned>((w.rows + rows_per_block - 1) / rows_per_block), 1, static_cast<unsigned>(heads));
  launch_small(matmul_f32_short_kernel<NB>, grid, kRow1Warps * 32, 0, st, static_cast<const uint8_t*>(w.data),
               w.row_bytes(), w.rows, w.cols, x, y, s);
}

void launch_f32_row1(const Weight& w, const float* x, float* y, cudaStream_t st, const Strides& s, int64_t heads) {
  const int64_t nb = w.cols / 32;  // cols % 32 == 0 here
  if (nb <= 2) return launch_f32_short<2>(w, x, y, st, s, heads);
  if (nb <= 4) return launch_f32_short<4>(w, x, y, st, s, heads);
  if (nb <= 8) return launch_f32_short<8>(w, x, y, st, s, heads);
  if (row_bulk_takes(w, s)) {
    const dim3 grid(static_cast<unsigned>(w.rows), 1, static_cast<unsigned>(heads));
    return launch_small(matmul_f32_row_bulk_kernel, grid, 32, static_cast<size_t>(w.cols) * sizeof(float), st,
                        static_cast<const uint8_t*>(w.data), w.row_bytes(), w.rows, w.cols, x, y, s);
  }
  const dim3 grid(static_cast<unsigned>((w.rows + kRow1Warps - 1) / kRow1Warps), 1, static_cast<unsigned>(heads));
  launch_small(matmul_f32_row1_kernel, grid, kRow1Warps * 32, 0, st, static_cast<const uint8_t*>(w.data), w.row_bytes(),
               w.rows, w.cols, x, y, s);
}

template <WType T, int NR>
void launch_group(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t st, const Strides& s,
                  int64_t heads) {
  constexpr size_t smem = matmul_smem<T, NR>();
  static const bool raised = [] {  // more than the default 48 KiB of dynamic shared memory
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(matmul_kernel<T, NR>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    return true;
  }();
  (void)raised;
  const int64_t warps = (w.rows + kOutPerWarp - 1) / kOutPerWarp;
  const dim3 grid(static_cast<unsigned>((warps + kWarps - 1) / kWarps), static_cast<unsigned>((n + NR - 1) / NR),
                  static_cast<unsigned>(heads));
  launch_small(matmul_kernel<T, NR>, grid, kWarps * 32, smem, st, static_cast<const uint8_t*>(w.data), w.row_bytes(),
               w.rows, w.cols, x, n, y, s);
}

// The group width NR is the smallest power of two holding min(n, group) rows, so one row does not pay
// for 15 idle ones. NR changes only how many rows share a weight read: every row's own products and
// sums are the same operations in the same order for any NR (rows never mix), so a row's bits do not
// depend on the row count.
template <WType T>
void launch_typed(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t st, const Strides& s,
                  int64_t heads = 1) {
  const int64_t m = std::min<int64_t>(n, matmul_group_rows(T));
  if (T == WType::f32 && n == 1 && row1_on()) return launch_f32_row1(w, x, y, st, s, heads);
  if (T == WType::f32 && f32_tile_takes(w, x, n, s)) return launch_f32_tile(w, x, n, y, st, s, heads);
  if (m <= 1) return launch_group<T, 1>(w, x, n, y, st, s, heads);
  if (m <= 2) return launch_group<T, 2>(w, x, n, y, st, s, heads);
  if (m <= 4) return launch_group<T, 4>(w, x, n, y, st, s, heads);
  if (m <= 8) return launch_group<T, 8>(w, x, n, y, st, s, heads);
  return launch_group<T, 16>(w, x, n, y, st, s, heads);
}

Strides plain_strides(const Weight& w) { return Strides{w.cols, w.rows, 0, 0, 0}; }

template <WType T>
__global__ void embed_kernel(const uint8_t* __restrict__ table, size_t row_bytes, int64_t cols,
                             const int32_t* __restrict__ ids, float* __restrict__ y) {
  pdl_begin();
  const int64_t i = blockIdx.y;
  const uint8_t* row = table + static_cast<size_t>(ids[i]) * row_bytes;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i * cols + c] = Fmt<T>::get(row, static_cast<int>(c / 32), static_cast<int>(c % 32));
}

}  // namespace

int matmul_group_rows(WType t) { return t == WType::mxfp4 ? 16 : 8; }

namespace {
int g_split = -1;  // matmul_ksplit_tune: -1 the rule (or FERRY_KSPLIT), 0 never, P > 0 that many parts
}  // namespace

void matmul_ksplit_tune(int parts) { g_split = parts; }
void matmul_f32_row1_tune(int on) { g_row1 = on; }
void matmul_f32_row_bulk_tune(int on) { g_row_bulk = on; }
void matmul_f32_tile_tune(int on) { g_f32_tile = on; }

// The rule, from the H200 sweep (docs/BENCHMARKS.md "split K", MatmulBenchSplitKSweep; graph replays,
// one row): a split pays where a matrix has too few 16-row tiles to spread over the SMs (128x7168: 8.2 ->
// 5.4 us with 4-7 parts; 576x7168: 8.3 -> 6.5 us), and for 7,168-row matrices with long rows (7168x12288:
// 43.6 -> 39.1 us, 7168x33792: 96.2 -> 85.3 us with 3 parts). Elsewhere it costs 5-25 % at one row (the
// partials' round trip and shorter pipelines): 1536x7168, 3584x7168, 6144x7168, 7168x7168, 12288x7168.
// FERRY_KSPLIT=0 never splits, FERRY_KSPLIT=P takes P parts (capped by the units of a row).
KSplit matmul_ksplit(const Weight& w) {
  static const int env = [] {
    const char* v = std::getenv("FERRY_KSPLIT");
    return v ? std::atoi(v) : -1;
  }();
  KSplit ks;
  if (w.type != WType::q8_0 || w.cols % 512 != 0 || w.rows <= 0) return ks;
  ks.unit = w.cols % 1024 == 0 ? 1024 : 512;
  const int64_t units = w.cols / ks.unit;
  const int64_t tiles = (w.rows + 15) / 16;
  const int force = g_split >= 0 ? g_split : env;
  int64_t parts = 1;
  if (force >= 0)
    parts = force == 0 ? 1 : force;
  else if (tiles < 64)
    parts = std::max<int64_t>(2, (192 + tiles - 1) / tiles);
  else if (tiles >= 256 && w.cols >= 12288)
    parts = 3;
  ks.parts = static_cast<int>(std::clamp<int64_t>(parts, 1, std::min<int64_t>(units, 64)));
  return ks;
}

void launch_matmul(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t st, const splitk::Bufs& sk) {
  if (matmul_fast_supported(w, x)) return launch_matmul_fast(w, x, n, y, st, sk);
  switch (w.type) {
    case WType::f32:
      if (w.cols % 32 != 0) {
        const int64_t threads = w.rows * n * 32;
        launch_small(matmul_f32_tail_kernel, blocks_for(threads, 256), 256, 0, st, static_cast<const float*>(w.data),
                     w.rows, w.cols, x, n, y);
        return;
      }
      return launch_typed<WType::f32>(w, x, n, y, st, plain_strides(w));
    case WType::q8_0: return launch_typed<WType::q8_0>(w, x, n, y, st, plain_strides(w));
    case WType::mxfp4: return launch_typed<WType::mxfp4>(w, x, n, y, st, plain_strides(w));
  }
}

void launch_embed(const Weight& t, const int32_t* ids, int64_t n, float* y, cudaStream_t st) {
  const dim3 grid(blocks_for(std::min<int64_t>(t.cols, 65536), 256), static_cast<unsigned>(n));
  const auto* p = static_cast<const uint8_t*>(t.data);
  if (t.type == WType::f32) {
    launch_small(embed_kernel<WType::f32>, grid, 256, 0, st, p, t.row_bytes(), t.cols, ids, y);
  } else {
    launch_small(embed_kernel<WType::q8_0>, grid, 256, 0, st, p, t.row_bytes(), t.cols, ids, y);
  }
}

// q8_0 weights of plain matmuls become q8_0 tiles (matmul_q8t.cuh), unless FERRY_Q8T=0 (measurements:
// the row-layout kernels instead). In place, through a temporary of at most 64 MB, freed before the next
// weight: inside the memory plan's margin (io/store/memory_plan.cpp: at least 512 MiB stay free).
void CudaBackend::prepare_matmul_weight(Weight& w) {
  static const bool on = env_switch("FERRY_Q8T", true);
  if (!on || !matmul_q8t_packable(w)) return;
  bind();
  const size_t bytes = tile_pack_scratch_bytes(w.nbytes(), w.row_bytes() * kPackTileRows);
  void* tmp = alloc_uninit(bytes);
  launch_q8t_pack(w, tmp, bytes, stream_);
  synchronize();
  release(tmp);
  w.layout = WLayout::q8_tiles;
}

// Resident experts' mxfp4 matrices become mxfp4 tiles (matmul_mxt.cuh), unless FERRY_MXT=0 (measurements):
// all of them or none (a batch is one layout; a model whose expert shapes do not take the tiles keeps
// rows), and only where the row layout would run on the tensor cores in decode steps and in prompt passes:
// the tiles' kernels give those kernels' bits, so resident experts keep the logits of streamed ones. In
// place, through one temporary (a tile at least, up to 64 MB), freed at the end.
void CudaBackend::prepare_expert_weights(Weight* const* ws, size_t count) {
  static const bool on = env_switch("FERRY_MXT", true);
  if (!on || count == 0) return;
  size_t need = 0, tile = 0;
  for (size_t i = 0; i < count; ++i) {
    const Weight& w = *ws[i];
    if (!matmul_mxt_packable(w) || !matmul_dec_supported(w) || !matmul_mma_supported(w)) return;
    need = std::max(need, w.nbytes());
    tile = std::max(tile, w.row_bytes() * kPackTileRows);
  }
  bind();
  const size_t bytes = tile_pack_scratch_bytes(need, tile);
  void* tmp = alloc_uninit(bytes);
  for (size_t i = 0; i < count; ++i) {
    launch_mxt_pack(*ws[i], tmp, bytes, stream_);
    ws[i]->layout = WLayout::mx_tiles;
  }
  synchronize();
  release(tmp);
}

void CudaBackend::keep_x(const float* y, int64_t rows, int64_t cols) {
  kept_ = Kept{};
  kept_.x = y;
  kept_.rows = rows;
  kept_.cols = cols;
}

xprep::Out CudaBackend::keep_prepared(const float* y, int64_t rows, int64_t cols) {
  keep_x(y, rows, cols);
  const xprep::Out o = xprep::prep_layout(scratch(kKeptX, mma_prep_bytes(rows, cols)), rows, cols, true, XOrder::natural);
  kept_.xp = xprep::prepared(o, cols);
  kept_.prepared = true;
  return o;
}

void CudaBackend::drop_x(const float* y) {
  if (kept_.x == y) kept_ = Kept{};
}

mma::XPrep CudaBackend::prep_decode(const float* x, int64_t n, int64_t cols, void* buf, XOrder order) {
  if (x == kept_.x && n == kept_.rows && cols == kept_.cols && order == XOrder::natural) {
    if (!kept_.prepared) {
      kept_.xp = prep_x(x, n, cols, scratch(kKeptX, mma_prep_bytes(n, cols)), stream_, true);
      kept_.prepared = true;
    }
    return kept_.xp;
  }
  return prep_x(x, n, cols, buf, stream_, true, order);
}

void CudaBackend::matmul(const Weight& w, const float* x, int64_t n, float* y) {
  if (n <= 0) return;
  if (w.empty() || w.rows <= 0 || w.cols <= 0)
    throw TensorError("cuda matmul: empty weight (rows=" + std::to_string(w.rows) + ", cols=" +
                      std::to_string(w.cols) + ")");
  if (n > 65535 * int64_t{8}) throw LimitError("cuda matmul: " + std::to_string(n) + " rows in one call (max 524280)");
  bind();
  if (w.layout == WLayout::q8_tiles) {
    // Decode steps and verify blocks: one kernel for every row count. Prompt passes: their own kernel
    // (many rows per weight read, tensor-core bound) and their own bits, as for the row layout.
    void* buf = scratch(kMmaX, mma_prep_bytes(n, w.cols));
    if (prompt_pass_) return launch_matmul_q8t_prompt(w, prep_x(x, n, w.cols, buf, stream_), n, y, stream_);
    return launch_matmul_q8t(w, prep_decode(x, n, w.cols, buf), n, y, stream_, split_bufs(w, n));
  }
  if (w.layout == WLayout::mx_tiles) {  // the row layout's tensor-core bits (matmul_mxt.cuh)
    void* buf = scratch(kMmaX, mma_prep_bytes(n, w.cols));
    if (prompt_pass_)
      return launch_matmul_mma(w, prep_x(x, n, w.cols, buf, stream_, false, XOrder::natural, prompt_lo8(w.type)), n, y,
                               stream_);
    return launch_matmul_mxt(w, prep_decode(x, n, w.cols, buf, XOrder::mxt), n, y, stream_);
  }
  if (prompt_pass_ && matmul_mma_supported(w)) {
    const mma::XPrep xp =
        prep_x(x, n, w.cols, scratch(kMmaX, mma_prep_bytes(n, w.cols)), stream_, false, XOrder::natural, prompt_lo8(w.type));
    return launch_matmul_mma(w, xp, n, y, stream_);
  }
  const splitk::Bufs sk = split_bufs(w, n);
  if (!prompt_pass_ && matmul_dec_supported(w)) {
    const mma::XPrep xp = prep_decode(x, n, w.cols, scratch(kMmaX, mma_prep_bytes(n, w.cols)), x_order(w.type, false));
    return launch_matmul_dec(w, xp, n, y, stream_, sk);
  }
  launch_matmul(w, x, n, y, stream_, sk);
}

namespace {
// The scratch a split matmul of n rows needs (splitk.cuh): partials [parts][n][rows] and one counter per
// (16-row tile, row group), at most tiles x n.
struct SplitScratch {
  size_t part_floats = 0, counters = 0;
};
SplitScratch split_scratch(const Weight& w, const KSplit& ks, int64_t n) {
  if (ks.parts <= 1) return {};
  return {static_cast<size_t>(n) * static_cast<size_t>(w.rows) * static_cast<size_t>(ks.parts),
          static_cast<size_t>((w.rows + 15) / 16 * n)};
}

int g_group = -1;         // matmul_group_tune
int g_group_launch = -1;  // matmul_group_launch_tune
int g_group_split = -1;   // matmul_group_split_tune
}  // namespace

void matmul_group_tune(int on) { g_group = on; }
void matmul_group_launch_tune(int on) { g_group_launch = on; }
void matmul_group_split_tune(int on) { g_group_split = on; }

void CudaBackend::matmul_group(const MatmulOut* outs, size_t count, const float* x, int64_t n) {
  static const bool env = env_switch("FERRY_Q8T_GROUP", true);
  const bool on = switch_on(g_group, env);
  // The q8_0-tiles weights of x's width; everything else runs alone first (stream order keeps the
  // shared scratch of its x preparation apart from the group's).
  std::vector<const MatmulOut*> tiles;
  for (size_t i = 0; i < count; ++i) {
    const Weight& w = *outs[i].w;
    if (on && !prompt_pass_ && w.layout == WLayout::q8_tiles && w.cols == outs[0].w->cols)
      tiles.push_back(&outs[i]);
    else
      matmul(w, x, n, outs[i].y);
  }
  if (tiles.size() == 1) matmul(*tiles[0]->w, x, n, tiles[0]->y);
  if (tiles.size() < 2 || n <= 0) return;
  if (n > 65535 * int64_t{8}) throw LimitError("cuda matmul: " + std::to_string(n) + " rows in one call (max 524280)");
  bind();
  const int64_t cols = tiles[0]->w->cols;
  const mma::XPrep xp = prep_decode(x, n, cols, scratch(kMmaX, mma_prep_bytes(n, cols)));
  static const bool one_env = env_switch("FERRY_Q8T_ONE_LAUNCH", true);
  static const bool split_env = env_switch("FERRY_Q8T_GROUP_SPLIT", true);
  const bool one = switch_on(g_group_launch, one_env), split_too = one && switch_on(g_group_split, split_env);
  std::vector<const Weight*> joint;  // one launch for all of them
  std::vector<float*> joint_y;
  std::vector<splitk::Bufs> sks;      // their splits
  std::vector<SplitScratch> offsets;  // where each split one's scratch starts, the split ones side by side
  SplitScratch total;
  for (const MatmulOut* o : tiles) {
    const KSplit ks = matmul_q8t_split(*o->w);
    if (!one || (ks.parts > 1 && !split_too) || ks.stream > 0) {  // the group's kernel has no stream split
      launch_matmul_q8t(*o->w, xp, n, o->y, stream_, split_bufs(*o->w, n));
      continue;
    }
    joint.push_back(o->w);
    joint_y.push_back(o->y);
    splitk::Bufs sk;
    sk.parts = ks.parts;
    sk.unit = ks.unit;
    sks.push_back(sk);
    offsets.push_back(total);
    const SplitScratch need = split_scratch(*o->w, ks, n);
    total.part_floats += need.part_floats;
    total.counters += need.counters;
  }
  if (joint.empty()) return;
  float* part =
      total.part_floats ? static_cast<float*>(scratch(kSplitPart, total.part_floats * sizeof(float))) : nullptr;
  int* cnt = total.counters ? static_cast<int*>(zeroed_scratch(kSplitCount, total.counters * sizeof(int))) : nullptr;
  for (size_t i = 0; i < sks.size(); ++i) {
    if (sks[i].parts <= 1) continue;
    sks[i].part = part + offsets[i].part_floats;
    sks[i].cnt = cnt + offsets[i].counters;
  }
  launch_matmul_q8t_group(joint.data(), joint_y.data(), sks.data(), joint.size(), xp, n, stream_);
}

splitk::Bufs CudaBackend::split_bufs(const Weight& w, int64_t n) {
  const KSplit ks = w.layout == WLayout::q8_tiles ? matmul_q8t_split(w) : matmul_ksplit(w);
  splitk::Bufs b;
  b.parts = ks.parts;
  b.unit = ks.unit;
  b.stream = ks.stream;
  if (ks.parts <= 1) return b;
  const SplitScratch need = split_scratch(w, ks, n);
  b.part = static_cast<float*>(scratch(kSplitPart, need.part_floats * sizeof(float)));
  b.cnt = static_cast<int*>(zeroed_scratch(kSplitCount, need.counters * sizeof(int)));
  return b;
}

// Every head in one launch of the generic kernel (blockIdx.z = head): the per-head matrices of MLA's
// absorbed decode are small, so one launch instead of one per head is what matters. The generic
// kernel's order is the CPU's, so the result is bit-identical to the CPU back-end's per-head matmuls.
void CudaBackend::matmul_heads(const Weight& w, const HeadsLayout& l, const float* x, int64_t n, float* y) {
  if (n <= 0 || l.heads <= 0) return;
  if (w.empty() || w.rows <= 0 || w.cols <= 0 || l.w_head_rows < 0)
    throw TensorError("cuda matmul_heads: empty weight or negative head offset (rows=" + std::to_string(w.rows) +
                      ", cols=" + std::to_string(w.cols) + ")");
  if (w.layout != WLayout::rows) throw TensorError("cuda matmul_heads: a weight in a tiles layout (matmul / experts only)");
  if (w.cols % 32 != 0 || l.heads > 65535 || n > 65535 * int64_t{8})
    return Backend::matmul_heads(w, l, x, n, y);  // per head (rare shapes)
  bind();
  const Strides s{l.x_tok, l.y_tok, static_cast<size_t>(l.w_head_rows) * w.row_bytes(), l.x_head, l.y_head};
  switch (w.type) {
    case WType::f32: return launch_typed<WType::f32>(w, x, n, y, stream_, s, l.heads);
    case WType::q8_0: return launch_typed<WType::q8_0>(w, x, n, y, stream_, s, l.heads);
    case WType::mxfp4: return launch_typed<WType::mxfp4>(w, x, n, y, stream_, s, l.heads);
  }
}

void CudaBackend::embed(const Weight& table, const int32_t* ids_host, int64_t n, float* y) {
  if (table.empty()) throw TensorError("cuda embed: empty table");
  if (table.type == WType::mxfp4) throw TensorError("cuda embed: mxfp4 tables are not supported (f32 or q8_0)");
  if (table.layout != WLayout::rows) throw TensorError("cuda embed: a table in a tiles layout (matmul / experts only)");
  if (n <= 0) return;
  for (int64_t i = 0; i < n; ++i)
    if (ids_host[i] < 0 || ids_host[i] >= table.rows)
      throw LimitError("cuda embed: token id " + std::to_string(ids_host[i]) + " outside the table of " +
                       std::to_string(table.rows) + " rows");
  bind();
  const auto* ids = static_cast<const int32_t*>(stage(kIds, ids_host, static_cast<size_t>(n) * sizeof(int32_t)));
  launch_embed(table, ids, n, y, stream_);
}

}  // namespace ferry::cuda
