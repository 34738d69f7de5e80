// See mxt_wave_wgmma.cuh. sm_90a only (library ferry_cuda_sm90a).
#include "kernels/cuda/sm90a/mxt_wave_wgmma.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul_mxt.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/sm90a/wgmma.cuh"

namespace ferry::cuda {
namespace {

using mxt::MxT;

constexpr int kBN = kMmaBN;                       // activation rows an item: wgmma's N at most
constexpr int kS = 3;                             // stages (2 blocks a SM, as item_body's launch)
constexpr int kTiles = mma::kWarps;               // 16-row weight tiles a block: one a warp
constexpr int kGPer = mxt::kUnitBytes / 16;       // 16-byte granules of a tile's unit (68)
constexpr int kWB = kTiles * mxt::kUnitBytes;     // a stage's weights: the tiles' units, contiguous
constexpr int kSteps = mma::kK / 16;              // k16 steps a stage
constexpr int kStepBytes = kBN * 32;              // x of one k16 step and level: 4 row groups x 2 core matrices
constexpr int kLevelBytes = kSteps * kStepBytes;
constexpr int kStageBytes = kWB + 2 * kLevelBytes;
static_assert(kWB % 256 == 0 && kStageBytes % 256 == 0, "stage pieces 256-aligned");

// x in a stage: level lv, k16 step s, row r, 8 k (kc = 0: k 0-7, 1: k 8-15) of the step: K-major core
// matrices, the step's two core matrices of a row group 128 bytes apart (the descriptor's leading byte
// offset), row groups 256 apart (its stride byte offset), no swizzle. Step s of the stage is columns 16 s ..
// 16 s + 15 (block s / 2's elements 16 (s % 2) ..), mma::Mx's k order: the 16-byte granule of columns 8 q ..
// 8 q + 7 is step q / 2, core matrix q % 2.
__device__ __forceinline__ int x_off(int lv, int s, int r, int kc) {
  return kWB + lv * kLevelBytes + s * kStepBytes + (r >> 3) * 256 + kc * 128 + (r & 7) * 16;
}

__device__ __forceinline__ uint64_t x_desc(const uint8_t* p) { return wgmma::smem_desc(p, 128, 256); }

// kHybrid: items with fewer than min_nt n8 tiles of rows run mma::item_body (mma.sync) instead, in the same
// launch (the same bits: a measurement arm, FERRY_MXT_WGMMA_MIN_NT; wgmma.m64n8k16 does an eighth of an n64's
// work). Its own instantiation: the two bodies in one kernel take 128 registers and spill a little.
template <int S, bool kHybrid>
__global__ void __launch_bounds__(mma::kThreads, 2) wave_wgmma_kernel(const __grid_constant__ WaveTc p, int min_nt) {
  extern __shared__ __align__(256) uint8_t smem[];
  const mma::Item it = p.item(blockIdx.x);
  if constexpr (kHybrid)
    if ((it.nr + 7) / 8 < min_nt) return mma::item_body<MxT, kBN, S, 2, 1>(p, it, smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int nst = p.cols / mma::kK;
  __shared__ int64_t xrow[kBN];
  if (threadIdx.x < kBN) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  __syncthreads();

  // Weight granule i = threadIdx.x + k * kThreads: granule i % kGPer of tile i / kGPer's unit (as
  // item_body; kNone: a tile past the matrix's rows, nothing to copy).
  constexpr uint32_t kNone = 0xffffffffu;
  constexpr int KW = (kTiles * kGPer + mma::kThreads - 1) / mma::kThreads;
  uint32_t woff[KW];
#pragma unroll
  for (int k = 0; k < KW; ++k) {
    const int i = threadIdx.x + k * mma::kThreads, r = i / kGPer;
    woff[k] = i < kTiles * kGPer && 16 * r < it.nrows ? static_cast<uint32_t>(16 * r * p.row_bytes) : kNone;
  }
  // x granules as item_body's (row xs.row(k), columns 8 q .. 8 q + 7 of a level), to their core matrices.
  const mma::XSources<kBN> xs(p, it, xrow);
  const int64_t lo_off = p.xp.lo - p.xp.hi;
  auto load = [&](int st, int c) {
    uint8_t* base = smem + st * kStageBytes;
    const size_t off = static_cast<size_t>(c) * mxt::kUnitBytes;
#pragma unroll
    for (int k = 0; k < KW; ++k) {
      if (woff[k] == kNone) continue;
      const int i = threadIdx.x + k * mma::kThreads, r = i / kGPer, g16 = (i - r * kGPer) * 16;
      cp_async16(base + r * mxt::kUnitBytes + g16, it.w + woff[k] + off + g16);
    }
#pragma unroll
    for (int lv = 0; lv < 2; ++lv)
#pragma unroll
      for (int k = 0; k < mma::XSources<kBN>::kXR; ++k)
        if (xs.src[k])
          cp_async16(base + x_off(lv, xs.q >> 1, xs.row(k), xs.q & 1),
                     xs.src[k] + lv * lo_off + static_cast<int64_t>(c) * mma::kK);
  };

  float acc[1][kBN / 8][4];  // one 16-row tile a warp (mma::store_sums' shape)
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[0][j][i] = 0.0f;
  const int ntiles = (it.nr + 7) / 8;  // n8 tiles with rows: uniform over the block

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
    const uint8_t* unit = base + warp * mxt::kUnitBytes;
    auto stage = [&](auto nt) {
      constexpr int NT = decltype(nt)::value;
      float sum[2][4 * NT];  // block b's chain into sum[b % 2] (its first wgmma ignores the unset values)
      float dp[2];           // the scales of block b - 1 (rows g, g + 8)
      auto scale = [&](float (&sm)[4 * NT], const float (&dm)[2]) {
        wgmma::fence_operand(sm);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          acc[0][j][0] = fmaf(sm[4 * j + 0], dm[0], acc[0][j][0]);
          acc[0][j][1] = fmaf(sm[4 * j + 1], dm[0], acc[0][j][1]);
          acc[0][j][2] = fmaf(sm[4 * j + 2], dm[1], acc[0][j][2]);
          acc[0][j][3] = fmaf(sm[4 * j + 3], dm[1], acc[0][j][3]);
        }
      };
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        uint32_t af[2][2][2];  // [row g / g + 8][step][k lo / hi]
        float d[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) d[h] = MxT::frag_tile(unit, h, g, b, t, af[h]);
        uint32_t a[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s)
          a[s][0] = af[0][s][0], a[s][1] = af[1][s][0], a[s][2] = af[0][s][1], a[s][3] = af[1][s][1];
        wgmma::fence_operand(sum[b & 1]);
        wgmma::fence();
#pragma unroll
        for (int lv = 0; lv < 2; ++lv)
#pragma unroll
          for (int s = 0; s < 2; ++s)
            wgmma::wgmma_nt<NT>(sum[b & 1], a[s], x_desc(base + x_off(lv, 2 * b + s, 0, 0)), lv | s);
        wgmma::commit();
        if (b > 0) {
          wgmma::wait<1>();
          scale(sum[(b - 1) & 1], dp);
        }
        dp[0] = d[0], dp[1] = d[1];
      }
      wgmma::wait_all();
      scale(sum[1], dp);
    };
    switch (ntiles) {
      case 1: stage(std::integral_constant<int, 1>{}); break;
      case 2: stage(std::integral_constant<int, 2>{}); break;
      case 3: stage(std::integral_constant<int, 3>{}); break;
      default: stage(std::integral_constant<int, 4>{}); break;
    }
  }
  cp_async_wait<0>();
  mma::store_sums<1, kBN>(p, it, xrow, warp, lane, acc);
}

template <int S, bool kHybrid>
void launch(const WaveTc& a, int64_t items, int min_nt, cudaStream_t st) {
  constexpr int kStage = kHybrid ? std::max(kStageBytes, mma::stage_bytes<MxT, kBN, 2, 1>()) : kStageBytes;
  constexpr size_t smem = static_cast<size_t>(kStage) * S;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(wave_wgmma_kernel<S, kHybrid>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  wave_wgmma_kernel<S, kHybrid><<<static_cast<unsigned>(items), mma::kThreads, smem, st>>>(a, min_nt);
  FERRY_CUDA_LAUNCHED(wave_wgmma_kernel);
}

int g_min_nt = -1;  // mxt_wave_wgmma_min_nt_tune

}  // namespace

void launch_wave_mxt_wgmma(const WaveTc& a, int64_t items, cudaStream_t st) {
  // FERRY_MXT_WGMMA_STAGES=4: 4 stages (98 KB, still 2 blocks a SM), a measurement arm.
  static const bool four = [] {
    const char* v = std::getenv("FERRY_MXT_WGMMA_STAGES");
    return v && std::string(v) == "4";
  }();
  // FERRY_MXT_WGMMA_MIN_NT=2..4: items with fewer n8 tiles of rows on mma.sync (item_body), a measurement arm.
  static const int env = [] {
    const char* v = std::getenv("FERRY_MXT_WGMMA_MIN_NT");
    const int n = v ? std::atoi(v) : 1;
    return n >= 1 && n <= 5 ? n : 1;
  }();
  const int min_nt = g_min_nt > 0 ? g_min_nt : env;
  if (min_nt > 1) return four ? launch<4, true>(a, items, min_nt, st) : launch<kS, true>(a, items, min_nt, st);
  four ? launch<4, false>(a, items, 1, st) : launch<kS, false>(a, items, 1, st);
}

void mxt_wave_wgmma_min_nt_tune(int n) { g_min_nt = n; }

}  // namespace ferry::cuda
