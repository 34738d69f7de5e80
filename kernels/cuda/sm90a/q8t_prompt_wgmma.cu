// See q8t_prompt_wgmma.cuh. sm_90a only (library ferry_cuda_sm90a).
#include "kernels/cuda/sm90a/q8t_prompt_wgmma.cuh"

#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "io/errors.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul_q8t.cuh"
#include "kernels/cuda/sm90a/wgmma.cuh"

namespace ferry::cuda {
namespace {

using q8t::kPromptK;
using q8t::kPromptRows;
using q8t::kPromptWarpBytes;

constexpr int kMW = 2;                   // 16-row tiles a warp: a warpgroup's m64 tile m is its warps' tile m
constexpr int kBN = kPromptRows;         // 64 activation rows: wgmma's N
constexpr int kSteps = kPromptK / 16;    // k16 steps a stage
constexpr int kStepBytes = kBN * 32;     // x of one k16 step and level: 8 row groups x 2 core matrices
constexpr int kLevelBytes = kSteps * kStepBytes;
constexpr int kWBytes = mma::kWarps * kMW * kPromptWarpBytes;
// x's levels: 2 (hi + lo, the default) or 1 (hi only: FERRY_MMA_LEVELS=1, prep_x's lo == nullptr).
template <int L>
__host__ __device__ constexpr int stage_bytes() { return kWBytes + L * kLevelBytes; }
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

__device__ __forceinline__ uint64_t x_desc(const uint8_t* p) { return wgmma::smem_desc(p, 128, 256); }

template <int S, int L, bool kOverlap>
__global__ void __launch_bounds__(mma::kThreads, 1) q8t_wgmma_kernel(const __grid_constant__ mma::PlainTc p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const mma::Item it = p.item(blockIdx.x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  const int nst = p.cols / kPromptK;
  __shared__ int64_t xrow[kBN];
  if (threadIdx.x < kBN) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  __syncthreads();
  const q8t::PromptWeightCopies<kMW> wc(p.row_bytes, it.nrows);
  // x: this thread's granule k of a level (row xs.row(k), columns 8 q .. 8 q + 7 of the stage: quant block
  // q / 4, t = q % 4) goes as 4 column pairs to their places in the tiles' k order (x_off).
  const mma::XSources<kBN> xs(p, it, xrow);
  constexpr int kStageBytes = stage_bytes<L>();
  const int64_t lo_off = L == 2 ? p.xp.lo - p.xp.hi : 0;
  auto load = [&](int st, int c) {
    uint8_t* base = smem + st * kStageBytes;
    wc.copy(base, it.w, c);
#pragma unroll
    for (int lv = 0; lv < L; ++lv)
#pragma unroll
      for (int k = 0; k < mma::XSources<kBN>::kXR; ++k) {
        if (!xs.src[k]) continue;
        const __half* src = xs.src[k] + lv * lo_off + static_cast<int64_t>(c) * kPromptK;
        uint8_t* dst = base + x_off(lv, 2 * (xs.q >> 2), xs.row(k), 0) + 4 * (xs.q & 3);
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
    wgmma::fence_smem_writes();  // this thread's copies, seen by wgmma
    __syncthreads();
    if (c + S - 1 < nst) load((c + S - 1) % S, c + S - 1);
    cp_async_commit();
    // Every warp runs (wgmma is a warpgroup's instruction): a warp past the matrix's rows computes on
    // stale weights and stores nothing.
    const uint8_t* base = smem + (c % S) * kStageBytes;
    const uint8_t* ws = base + warp * kMW * kPromptWarpBytes;
    float sum[kMW][32];  // a tile's block sums (its first wgmma, acc = 0, ignores the unset values)
    // Tile m's 2 L wgmma of block b (hi's two k16 steps, then lo's, into a fresh sum) as one batch.
    auto issue = [&](int m, int b, const uint32_t (&am)[2][4]) {
      wgmma::fence_operand(sum[m]);
      wgmma::fence();
#pragma unroll
      for (int lv = 0; lv < L; ++lv)
#pragma unroll
        for (int s = 0; s < 2; ++s)
          wgmma::wgmma_n64(sum[m], am[s], x_desc(base + x_off(lv, 2 * b + s, 0, 0)), lv | s);
      wgmma::commit();
    };
    auto scale = [&](int m, float2 dm) {
      wgmma::fence_operand(sum[m]);
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        acc[m][j][0] = fmaf(sum[m][4 * j + 0], dm.x, acc[m][j][0]);
        acc[m][j][1] = fmaf(sum[m][4 * j + 1], dm.x, acc[m][j][1]);
        acc[m][j][2] = fmaf(sum[m][4 * j + 2], dm.y, acc[m][j][2]);
        acc[m][j][3] = fmaf(sum[m][4 * j + 3], dm.y, acc[m][j][3]);
      }
    };
    if constexpr (!kOverlap) {
#pragma unroll 1
      for (int b = 0; b < 4; ++b) {
        uint32_t a[kMW][2][4];
        float2 d[kMW];
        q8t::prompt_block_frags<kMW>(ws, b, lane, g, a, d);
#pragma unroll
        for (int m = 0; m < kMW; ++m) issue(m, b, a[m]);
        wgmma::wait_all();
#pragma unroll
        for (int m = 0; m < kMW; ++m) scale(m, d[m]);
      }
    } else {
      // The tiles take turns: while one tile's batch runs, the other's sums are scaled and the next block's
      // fragments decoded (batches finish in order, so waiting for all but the newest is waiting for the
      // other tile's). The stage's last batch is waited for before the stage's shared memory is refilled.
      // The block loop is unrolled: rolled, ptxas cannot follow which batch a wait retires across the back
      // edge and serializes every wgmma (its warning C7514).
      static_assert(kMW == 2, "the overlap alternates two tiles");
      float2 d1 = make_float2(0.0f, 0.0f);  // tile 1's scales of the block in flight
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        uint32_t a[kMW][2][4];
        float2 d[kMW];
        q8t::prompt_block_frags<kMW>(ws, b, lane, g, a, d);
        issue(0, b, a[0]);
        if (b > 0) {
          wgmma::wait<1>();
          scale(1, d1);
        }
        issue(1, b, a[1]);
        wgmma::wait<1>();
        scale(0, d[0]);
        d1 = d[1];
      }
      wgmma::wait_all();
      scale(1, d1);
    }
  }
  cp_async_wait<0>();
  mma::store_sums<kMW, kBN>(p, it, xrow, warp, lane, acc);
}

template <int L, bool kOverlap>
void launch(const mma::PlainTc& p, cudaStream_t st, int64_t items) {
  constexpr size_t smem = static_cast<size_t>(stage_bytes<L>()) * kStages;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(q8t_wgmma_kernel<kStages, L, kOverlap>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  q8t_wgmma_kernel<kStages, L, kOverlap><<<static_cast<unsigned>(items), mma::kThreads, smem, st>>>(p);
  FERRY_CUDA_LAUNCHED(q8t_wgmma_kernel);
}

}  // namespace

void launch_q8t_prompt_wgmma(mma::PlainTc p, cudaStream_t st, bool overlap) {
  p.group = kPromptRows;
  p.bm = mma::tile_rows(kMW);
  p.ntiles = (p.rows + p.bm - 1) / p.bm;
  p.groups_fastest = true;
  const int64_t items = static_cast<int64_t>(p.ntiles) * ((p.n + kPromptRows - 1) / kPromptRows);
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda matmul: " + std::to_string(items) + " tiles in one call");
  if (p.xp.lo)
    overlap ? launch<2, true>(p, st, items) : launch<2, false>(p, st, items);
  else
    overlap ? launch<1, true>(p, st, items) : launch<1, false>(p, st, items);
}

}  // namespace ferry::cuda
