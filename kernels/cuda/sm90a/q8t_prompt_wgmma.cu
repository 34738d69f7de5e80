// See q8t_prompt_wgmma.cuh. sm_90a only (library ferry_cuda_sm90a).
#include "kernels/cuda/sm90a/q8t_prompt_wgmma.cuh"

#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "io/errors.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul_q8t.cuh"

namespace ferry::cuda {
namespace {

using q8t::kPromptK;
using q8t::kPromptRows;
using q8t::kPromptWarpBytes;
using q8t::kRows;
using q8t::kUnitBytes;

constexpr int kMW = 2;                   // 16-row tiles a warp: a warpgroup's m64 tile m is its warps' tile m
constexpr int kBN = kPromptRows;         // 64 activation rows: wgmma's N
constexpr int kSteps = kPromptK / 16;    // k16 steps a stage
constexpr int kStepBytes = kBN * 32;     // x of one k16 step and level: 8 row groups x 2 core matrices
constexpr int kLevelBytes = kSteps * kStepBytes;
constexpr int kWBytes = mma::kWarps * kMW * kPromptWarpBytes;
constexpr int kStageBytes = kWBytes + 2 * kLevelBytes;
constexpr int kStages = 3;

// x in a stage: level lv, k16 step s, row r, 8 k (kc = 0: k 0-7, 1: k 8-15) of the step: K-major core
// matrices of 8 rows x 16 bytes, the step's two core matrices of a row group 128 bytes apart (the
// descriptor's leading byte offset), row groups 256 apart (its stride byte offset), no swizzle.
// The k order is the q8_0 tiles' (matmul_q8t.cuh): the A fragments hold, for quant block b and step s, k =
// 2t + e <- column 32b + 8t + 4s + e and k = 8 + 2t + e <- column 32b + 8t + 4s + 2 + e (t < 4, e < 2), and
// mma.sync's B fragments read x with the same permutation (prompt_body's 16-byte read of columns 8t ..
// 8t + 7). So x's 4-byte column pair 8t + 2p, + 1 of block b (p < 4) lands in step 2b + p / 2, core matrix
// p % 2, at byte 4t of its row.
__device__ __forceinline__ int x_off(int lv, int s, int r, int kc) {
  return kWBytes + lv * kLevelBytes + s * kStepBytes + (r >> 3) * 256 + kc * 128 + (r & 7) * 16;
}

__device__ __forceinline__ uint64_t x_desc(const uint8_t* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | (uint64_t{128 >> 4} << 16) | (uint64_t{256 >> 4} << 32);
}

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(gmem) : "memory");
}

// d = A (64 x 16, each warp's 16 rows in registers as mma.sync's A fragment) * x (16 x 64, shared memory,
// desc) + (acc ? d : 0); d as 8 n8 chunks of mma.sync's C fragment (d[4j + e]).
__device__ __forceinline__ void wgmma_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, int acc) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
}

template <int S>
__global__ void __launch_bounds__(mma::kThreads, 1) q8t_wgmma_kernel(const __grid_constant__ mma::PlainTc p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const mma::Item it = p.item(blockIdx.x);
  constexpr int kThr = mma::kThreads;
  constexpr int kTiles = mma::kWarps * kMW;
  constexpr int kWG = kPromptWarpBytes / 16;
  constexpr int KW = (kTiles * kWG + kThr - 1) / kThr;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  const int nst = p.cols / kPromptK;
  __shared__ int64_t xrow[kBN];
  if (threadIdx.x < kBN) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  __syncthreads();
  const size_t tile_bytes = p.row_bytes * kRows;
  // Weight copies: prompt_body's (a quant granule or the scales of a row pair, per 16-row tile).
  constexpr uint32_t kNone = 0xffffffffu;
  uint32_t woff[KW];
#pragma unroll
  for (int k = 0; k < KW; ++k) {
    const int i = threadIdx.x + k * kThr, w = i / kWG, r = i - w * kWG;
    woff[k] = i < kTiles * kWG && w * kRows < it.nrows
                  ? static_cast<uint32_t>(w * tile_bytes) + (r < 128 ? r * 16 + 1u : 4096u + (r - 128) * 32)
                  : kNone;
  }
  // x granule j = threadIdx.x + k * kThr of a level: row j / 16, columns 8q .. 8q + 7 of the stage (q = j %
  // 16: quant block q / 4, t = q % 4), copied as 4 column pairs to their places in the tiles' k order (x_off).
  constexpr int kXR = kBN * (kPromptK / 8) / kThr;
  const int xq = threadIdx.x % (kPromptK / 8), xr0 = threadIdx.x / (kPromptK / 8);
  const __half* xsrc[kXR];
#pragma unroll
  for (int k = 0; k < kXR; ++k) {
    const int r = xr0 + k * (kThr / (kPromptK / 8));
    xsrc[k] = r < it.nr ? p.xp.hi + xrow[r] * p.xp.stride + xq * 8 : nullptr;
  }
  const int64_t lo_off = p.xp.lo - p.xp.hi;
  auto load = [&](int st, int c) {
    uint8_t* base = smem + st * kStageBytes;
    const size_t unit = static_cast<size_t>(c >> 1) * kUnitBytes;
#pragma unroll
    for (int k = 0; k < KW; ++k) {
      if (woff[k] == kNone) continue;
      const int i = threadIdx.x + k * kThr, w = i / kWG, r = i - w * kWG;
      const uint32_t o = woff[k];
      cp_async16(base + w * kPromptWarpBytes + r * 16, it.w + (o & ~1u) + unit + (c & 1) * (o & 1u ? 2048 : 16));
    }
#pragma unroll
    for (int lv = 0; lv < 2; ++lv)
#pragma unroll
      for (int k = 0; k < kXR; ++k) {
        if (!xsrc[k]) continue;
        const __half* src = xsrc[k] + lv * lo_off + static_cast<int64_t>(c) * kPromptK;
        uint8_t* dst = base + x_off(lv, 2 * (xq >> 2), xr0 + k * (kThr / (kPromptK / 8)), 0) + 4 * (xq & 3);
#pragma unroll
        for (int pr = 0; pr < 4; ++pr) cp_async4(dst + (pr >> 1) * kStepBytes + (pr & 1) * 128, src + 2 * pr);
      }
  };
  float acc[kMW][kBN / 8][4];
#pragma unroll
  for (int m = 0; m < kMW; ++m)
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][j][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nst) load(s, s);
    cp_async_commit();
  }
  for (int c = 0; c < nst; ++c) {
    cp_async_wait<S - 2>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // this thread's copies, seen by wgmma
    __syncthreads();
    if (c + S - 1 < nst) load((c + S - 1) % S, c + S - 1);
    cp_async_commit();
    // Every warp runs (wgmma is a warpgroup's instruction): a warp past the matrix's rows computes on
    // stale weights and stores nothing.
    const uint8_t* base = smem + (c % S) * kStageBytes;
    const uint8_t* ws = base + warp * kMW * kPromptWarpBytes;
#pragma unroll 1
    for (int b = 0; b < 4; ++b) {
      uint32_t a[kMW][2][4];
      float2 d[kMW];
#pragma unroll
      for (int m = 0; m < kMW; ++m) {
        const uint8_t* wm = ws + m * kPromptWarpBytes;
        const uint4 q = *reinterpret_cast<const uint4*>(wm + b * 512 + lane * 16);
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const uint32_t w0 = q8t::word(q, 2 * s), w1 = q8t::word(q, 2 * s + 1);
          a[m][s][0] = q8t::biased_pair(w0, 0x5140u);
          a[m][s][1] = q8t::biased_pair(w0, 0x7362u);
          a[m][s][2] = q8t::biased_pair(w1, 0x5140u);
          a[m][s][3] = q8t::biased_pair(w1, 0x7362u);
        }
        const uint32_t sw = *reinterpret_cast<const uint32_t*>(wm + 2048 + g * 16 + b * 4);
        d[m] = __half22float2(*reinterpret_cast<const __half2*>(&sw));  // rows g, g + 8
      }
      float sum[kMW][32];  // (its first wgmma, acc = 0, ignores the unset values)
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int m = 0; m < kMW; ++m)
#pragma unroll
        for (int lv = 0; lv < 2; ++lv)
#pragma unroll
          for (int s = 0; s < 2; ++s)
            wgmma_n64(sum[m], a[m][s], x_desc(base + x_off(lv, 2 * b + s, 0, 0)), lv | s);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int m = 0; m < kMW; ++m)
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          acc[m][j][0] = fmaf(sum[m][4 * j + 0], d[m].x, acc[m][j][0]);
          acc[m][j][1] = fmaf(sum[m][4 * j + 1], d[m].x, acc[m][j][1]);
          acc[m][j][2] = fmaf(sum[m][4 * j + 2], d[m].y, acc[m][j][2]);
          acc[m][j][3] = fmaf(sum[m][4 * j + 3], d[m].y, acc[m][j][3]);
        }
    }
  }
  cp_async_wait<0>();
  const int t = lane & 3;
#pragma unroll
  for (int m = 0; m < kMW; ++m)
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 8 * j + 2 * t + (i & 1), row = (warp * kMW + m) * kRows + g + 8 * (i >> 1);
        if (r < it.nr && row < it.nrows) p.yrow(it, r)[it.row0 + row] = acc[m][j][i] * p.xp.inv[xrow[r]];
      }
}

}  // namespace

void launch_q8t_prompt_wgmma(mma::PlainTc p, cudaStream_t st) {
  constexpr size_t smem = static_cast<size_t>(kStageBytes) * kStages;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(q8t_wgmma_kernel<kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  p.group = kPromptRows;
  p.bm = mma::tile_rows(kMW);
  p.ntiles = (p.rows + p.bm - 1) / p.bm;
  p.groups_fastest = true;
  const int64_t items = static_cast<int64_t>(p.ntiles) * ((p.n + kPromptRows - 1) / kPromptRows);
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda matmul: " + std::to_string(items) + " tiles in one call");
  q8t_wgmma_kernel<kStages><<<static_cast<unsigned>(items), mma::kThreads, smem, st>>>(p);
  FERRY_CUDA_LAUNCHED(q8t_wgmma_kernel);
}

}  // namespace ferry::cuda
