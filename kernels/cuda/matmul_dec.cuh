// Decode steps and verify blocks on the tensor cores: the q8_0 / mxfp4 matmul for a few activation rows
// (1 to 16 per weight read), fp16 mma.sync with the prompt pass's exact arithmetic (matmul_mma.cuh:
// weights as their exact fp16 values, the block scale applied in fp32 after each block's products, x
// prepared per row by prep_x as hi + lo halves of a power-of-two scaling). Which weights take it is
// matmul_dec_supported's (matmul_mma.cu dec_wins: by default mxfp4 and q8_0 of 12,288 rows and more,
// where it was measured faster than the CUDA-core kernel of matmul_fast.cuh; FERRY_DEC_MMA=1 all, =0
// none).
//
// Measured on the H200 (docs/BENCHMARKS.md "decode steps on the tensor cores", 2026-12-01): at one row
// neither kernel is bound by instruction issue or by DRAM. Both run 3-4 resident blocks of 4 warps per
// SM (448 tiles of 16 rows for a 7168-row matrix), issue on half the cycles and wait on latency, at
// 40-45 % of the DRAM rate. So this kernel wins where it does less per weight (mxfp4's decode, 16-expert
// batches 1.12x at one row, 1.4-2.2x at 4-16 rows; any weight at 8-16 rows, 1.25-1.33x for q8_0) and
// loses where the CUDA-core kernel's one-tile-per-block grid is as good and the prep launch is extra
// (q8_0 7168x7168 at one row: 28.4 vs 25.2 us).
//
// The n8 side of an mma carries 4 activation rows as (hi, lo) column pairs: column 2i is row i's hi,
// column 2i + 1 its lo. A thread's accumulator pair (c0, c1) is then one row's hi and lo products of one
// weight row, so per quant block: sum = mma(step 0) then mma(step 1) into a fresh accumulator, and
// acc = fma((c0 + c1) * 2^-k, block scale, acc). One row costs one mma per k16 step (the prompt
// kernel's layout needs 2 per 8 rows). Undoing the row's scaling 2^k per block (exact: a power of two)
// rather than at the end keeps the accumulator in the CPU's range: the prompt kernel's accumulator
// holds y * 2^k and can overflow for tiny rows against huge mxfp4 exponents; this one cannot.
//
// Order, and why a row's bits depend only on the row: a thread block of 4 warps computes a 16-row
// weight tile; warp w takes the quant blocks b with b % 4 == w, in increasing b, into its own
// accumulators, and the 4 warps' sums are added in warp order at the end. The mma's additions for an
// output element depend only on its own weight row and activation column. None of this depends on the
// number of rows in the call, on where a row sits among them, on the tile's stage width or on which
// thread block computes it, so a row alone has the bits of the same row in a verify block of 16, and
// the grouped expert kernel (moe_grouped.cu) gives the bits of this plain matmul. The order differs
// from the CUDA-core kernel's and the CPU's: results agree with them to ~4e-7 of the largest output.
// A split K (splitk.cuh: q8_0 shapes chosen by matmul_ksplit) applies this order within each part of the
// columns and adds the parts' sums in part order; the split is a function of the weight, so the above
// holds unchanged.
//
// Stages: cp.async copies, per stage of 128 KB columns (KB quant blocks per warp: 8 when cols % 1024 ==
// 0 and the group has at most 4 rows, 4 when cols % 512 == 0, else 1; dec_stage_blocks, speed only),
// each tile row's 16-aligned window over its raw bytes and the group's prepared hi / lo columns
// (row-major [row][level][columns], padded so that ldmatrix is conflict-free). B fragments come from
// ldmatrix.x4 (both k16 steps of a quant block for 8 columns in one instruction). The kernel is a
// programmatic dependent of prep_x (launch_dependent): it issues its first stages' weight copies while
// prep_x runs and waits for x only then (1-6 % faster, FERRY_DEC_PDL=0 turns it off).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/splitk.cuh"

namespace ferry::cuda::dec {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;  // weight rows per tile (one m16 tile, split over the warps by quant block)

// Stage geometry of a format F (Q8 / Mx below), KB quant blocks per warp per stage and NRA
// activation rows per group.
template <class F, int KB, int NRA>
struct Geo {
  static constexpr int kCols = 32 * kWarps * KB;           // columns per stage
  static constexpr int kRaw = kWarps * KB * F::kBlockBytes;  // bytes per weight row per stage
  // A row's stage bytes start at an offset o (mod 16) that is a multiple of the row alignment (q8_0 row
  // bytes are multiples of 8 for cols % 128 == 0, mxfp4 of 4): the window covers o + kRaw bytes.
  static constexpr int kAlign = F::kBlockBytes == 34 ? 8 : 4;
  static constexpr int kWin = (kRaw + 16 - kAlign + 15) / 16;  // 16-byte granules per row window
  static constexpr int kSlot = kWin * 16;
  static constexpr int kXS = (kCols + 8) * 2;  // bytes per (row, level) of x in a stage
  static constexpr int kXOff = kRows * kSlot + 16;  // +16: Mx::frag reads a word past the last row
  static constexpr int kStage = kXOff + NRA * 2 * kXS;
  static constexpr int kNT = (NRA + 3) / 4;  // n8 tiles: 4 rows each
};

// Stages for a shared-memory budget per block (3 to 8): ~56 KB keeps 4 blocks of 4 warps per SM.
template <class F, int KB, int NRA>
__host__ __device__ constexpr int stages(int budget = 56 * 1024) {
  const int s = budget / Geo<F, KB, NRA>::kStage;
  return s < 3 ? 3 : s > 8 ? 8 : s;
}

// The formats' A fragments (k16 steps s = 0, 1 of a quant block, rows g and g + 8) and the factor that
// turns a block's mma sums of scaled x into y: kXScale * 2^-k (a power of two, exact).
// q8_0: mma::Q8 as the prompt kernel (natural k order).
struct Q8 : mma::Q8 {
  static constexpr float kXScale = 1.0f;
};
// mxfp4 with x in prep_x's permuted order (XOrder::mx): thread t's 8 weights of a row are the nibbles of
// the 4 bytes 4t..4t+3 (one unaligned word, where the natural order needs two 16-bit pieces a step):
// step 0 the low nibbles (elements 4t..4t+3 at k 2t, 2t+1, 2t+8, 2t+9), step 1 the high ones
// (elements 16 + 4t..). An E2M1 nibble s|ee|m placed as fp16 sign, exponent bits 1..0 and mantissa
// bit 9 is exactly value * 2^-14 (subnormals included), as the CUDA-core kernel decodes it: ~1.6
// instructions per weight against ~2.8 for the prompt kernel's table lookups.
struct Mx {
  static constexpr int kBlockBytes = 17;
  static constexpr float kXScale = 16384.0f;  // 2^14: the decoded values are value * 2^-14
  // The 4 quant bytes 4t .. 4t + 3 of a row's block -> its fragments a[step][k lo / hi] (the mxfp4 tiles'
  // decode kernel, matmul_mxt.cuh, loads the same bytes re-ordered and decodes them by e2m1::tile_lo / hi).
  // Elements 4t, 4t + 1 | 4t + 2, 4t + 3 (step 0), 16 + 4t, ... (step 1): mma::e2m1_frags.
  __device__ static void decode(uint32_t q, uint32_t a[2][2]) { mma::e2m1_frags(e2m1::row_lo(q), e2m1::row_hi(q), a); }
  __device__ static float frag(const uint8_t* slot, int o, int b, int t, uint32_t a[2][2]) {
    const int off = o + b * kBlockBytes + 1 + 4 * t;
    const uint32_t* w = reinterpret_cast<const uint32_t*>(slot) + (off >> 2);
    decode(__funnelshift_r(w[0], w[1], (off & 3) * 8), a);
    const unsigned e = slot[o + b * kBlockBytes];
    return __uint_as_float(e ? e << 23 : 0x00400000u);  // 2^(e-127)
  }
};

// Programmatic dependent launch (sm_90): a kernel launched with launch_dependent (matmul_mma.cu) may
// start while the kernel before it runs; grid_dependency_wait() returns once that kernel has finished and
// its writes are visible (at once when there is none). The kernel before says when its dependents may
// start (allow_dependents(); prep_x does at its top).
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void allow_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// Launches kernel<<<grid, kThreads, smem, st>>>(arg) as a programmatic dependent of the kernel before it
// on st (prep_x), so that its blocks issue their first weight copies while prep_x runs (FERRY_DEC_PDL=0:
// a plain launch, for measurements).
template <class Arg>
void launch_dependent(void (*kernel)(Arg), dim3 grid, size_t smem, cudaStream_t st, const Arg& arg) {
  static const bool pdl = [] {
    const char* v = std::getenv("FERRY_DEC_PDL");
    return !(v && v[0] == '0');
  }();
  launch_kernel(pdl, kernel, grid, kThreads, smem, st, arg);
}

// One work item: a 16-row weight tile against a group of nr (<= NRA) activation rows. As mma::Item.
using Item = mma::Item;

// The end of an item of a 16-row tile computed by 4 warps (this kernel and matmul_q8t.cuh's): each warp's
// accumulator pairs (acc[j][h]: tile row g + 8h, activation row 4j + t) go to red (kWarps * NT * 64
// floats of shared memory no warp still reads), the warps' sums are added in warp order, and the
// outputs stored (splitk::store, and finish where K is split).
template <int NT, class P, class I>
__device__ __forceinline__ void store_warp_sums(const P& p, const I& it, const float (&acc)[NT][2], float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) red[((warp * NT + j) * 2 + h) * 32 + lane] = acc[j][h];
  __syncthreads();
  for (int e = threadIdx.x; e < NT * 64; e += kThreads) {
    const int j = e >> 6, h = (e >> 5) & 1, l = e & 31;
    float v = red[(j * 2 + h) * 32 + l];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v += red[((w * NT + j) * 2 + h) * 32 + l];
    const int r = 4 * j + (l & 3), row = (l >> 2) + 8 * h;
    if (r < it.nr && row < it.nrows) splitk::store(p, it, r, row, v);
  }
  splitk::finish<kRows>(p, it);
}

// The x side of a 16-row item in the kernels that load A fragments straight into registers (matmul_q8t.cuh,
// matmul_mxt.cuh): this lane's B column g of n8 tile j is activation row 4j + g / 2 (past the group: the
// group's last row, whose columns are discarded), level g % 2; x[j] points at its prepared halves from
// column col + 8t. xinv[j] = scale * 2^-k of the lane's accumulator row 4j + t (0 past the group).
template <int NT, class P>
__device__ __forceinline__ void lane_x(const P& p, const Item& it, const int64_t* xrow, int col, float scale,
                                       const __half* (&x)[NT], float (&xinv)[NT]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int r = min(4 * j + (g >> 1), it.nr - 1);
    x[j] = ((g & 1) ? p.xp.lo : p.xp.hi) + xrow[r] * p.xp.stride + col + 8 * t;
    xinv[j] = 4 * j + t < it.nr ? p.xp.inv[xrow[4 * j + t]] * scale : 0.0f;
  }
}

// Item it of problem p (p.item / p.xrow / p.yrow / p.xp / p.row_bytes / p.cols as the prompt kernel's
// problems): out[r][row0 + i] for i < nrows, r < nr.
template <class F, int KB, int NRA, int S, class P>
__device__ __forceinline__ void item_body(const P& p, const Item& it, uint8_t* smem) {
  using G = Geo<F, KB, NRA>;
  constexpr int NT = G::kNT;
  constexpr int KW = (kRows * G::kWin + kThreads - 1) / kThreads;       // weight granules per thread
  constexpr int XG = G::kCols / 8;                                      // x granules per (row, level)
  constexpr int KX = (NRA * 2 * XG + kThreads - 1) / kThreads;          // x granules per thread
  static_assert(S * G::kStage >= kWarps * NT * 64 * 4, "the final reduction reuses the stages");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  // The item's stages: its columns [k0, k1) (a part of a split K starts on a stage boundary: splitk.cuh).
  const int s0 = it.k0 / G::kCols, nst = (it.k1 - it.k0) / G::kCols;
  __shared__ int64_t xrow[NRA];
  if (threadIdx.x < NRA) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  __syncthreads();

  // This thread's copies, fixed for the item (as mma::item_body): weight granule i = threadIdx.x + k *
  // kThreads is granule i % kWin of row i / kWin's window; x granule j is 8 halves of (row, level).
  const uint8_t* wrow[KW];
  int wdst[KW], wg16[KW];
#pragma unroll
  for (int k = 0; k < KW; ++k) {
    const int i = threadIdx.x + k * kThreads, r = i / G::kWin;
    wrow[k] = i < kRows * G::kWin && r < it.nrows ? it.w + static_cast<size_t>(r) * p.row_bytes : nullptr;
    wg16[k] = (i - r * G::kWin) * 16;
    wdst[k] = r * G::kSlot + wg16[k];
  }
  const __half* xsrc[KX];
  int xdst[KX];
#pragma unroll
  for (int k = 0; k < KX; ++k) {
    const int j = threadIdx.x + k * kThreads, r = j / (2 * XG), lv = (j / XG) & 1, q = j % XG;
    xsrc[k] = j < NRA * 2 * XG && r < it.nr ? (lv ? p.xp.lo : p.xp.hi) + xrow[r] * p.xp.stride + q * 8 : nullptr;
    xdst[k] = G::kXOff + (2 * r + lv) * G::kXS + q * 16;
  }
  auto load_w = [&](int st, int c) {
    uint8_t* base = smem + st * G::kStage;
    const size_t off = static_cast<size_t>(s0 + c) * G::kRaw;
#pragma unroll
    for (int k = 0; k < KW; ++k) {
      if (!wrow[k]) continue;
      const uint8_t* src = wrow[k] + off;
      const int o = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 15u);
      if (wg16[k] < o + G::kRaw) cp_async16(base + wdst[k], src - o + wg16[k]);
    }
  };
  auto load_x = [&](int st, int c) {
    uint8_t* base = smem + st * G::kStage;
#pragma unroll
    for (int k = 0; k < KX; ++k)
      if (xsrc[k]) cp_async16(base + xdst[k], xsrc[k] + static_cast<int64_t>(s0 + c) * G::kCols);
  };
  // Rows g and g + 8 of the tile: their windows' start offsets (row address mod 16).
  unsigned ra[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    ra[h] = static_cast<unsigned>(reinterpret_cast<uintptr_t>(it.w)) + static_cast<unsigned>((8 * h + g) * p.row_bytes);
  // ldmatrix rows: lane l gives matrix l >> 3 (k 0-7 / 8-15 of step 0, then of step 1) row n = l & 7,
  // which is n8 column n: activation row 4 j + n / 2 (a row past the group reads the group's last
  // row: its columns are discarded), level n & 1.
  int xa[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int n = lane & 7, r = min(4 * j + (n >> 1), it.nr - 1);
    xa[j] = G::kXOff + (2 * r + (n & 1)) * G::kXS + 16 * (lane >> 3);
  }

  // The prologue: the first S - 1 stages' weight bytes (one cp.async group each), which do not depend on
  // the kernel before this one; then, once that kernel (prep_x, launched with programmatic dependent
  // launch: launch_dependent) has finished, their x (one group each). In the loop a stage's weights and
  // x form one group. Either way stage c's bytes are in the first S + c groups committed, so the loop
  // waits for all but S - 2 groups.
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nst) load_w(s, s);
    cp_async_commit();
  }
  grid_dependency_wait();
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nst) load_x(s, s);
    cp_async_commit();
  }
  // 2^-k of this thread's activation row 4 j + t (its accumulator pairs' row), times the format's factor.
  float xinv[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) xinv[j] = 4 * j + t < it.nr ? p.xp.inv[xrow[4 * j + t]] * F::kXScale : 0.0f;
  float acc[NT][2];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = 0.0f;

  for (int c = 0; c < nst; ++c) {
    cp_async_wait<S - 2>();
    __syncthreads();
    if (c + S - 1 < nst) {
      load_w((c + S - 1) % S, c + S - 1);
      load_x((c + S - 1) % S, c + S - 1);
    }
    cp_async_commit();
    const uint8_t* base = smem + (c % S) * G::kStage;
    const unsigned so = static_cast<unsigned>(s0 + c) * G::kRaw;
#pragma unroll
    for (int i = 0; i < KB; ++i) {
      const int b = kWarps * i + warp;  // quant block of the stage: b % 4 == warp
      uint32_t af[2][2][2];             // [row g / g + 8][step][k lo / hi]
      float d[2];
#pragma unroll
      for (int h = 0; h < 2; ++h)
        d[h] = F::frag(base + (8 * h + g) * G::kSlot, static_cast<int>((ra[h] + so) & 15u), b, t, af[h]);
      uint32_t a[2][4];
#pragma unroll
      for (int s = 0; s < 2; ++s) a[s][0] = af[0][s][0], a[s][1] = af[1][s][0], a[s][2] = af[0][s][1], a[s][3] = af[1][s][1];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t bx[4];
        mma::ldmatrix_x4(bx, base + xa[j] + 64 * b);
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma::mma16816(sum, a[0], bx[0], bx[1], sum);
        mma::mma16816(sum, a[1], bx[2], bx[3], sum);
        acc[j][0] = fmaf((sum[0] + sum[1]) * xinv[j], d[0], acc[j][0]);
        acc[j][1] = fmaf((sum[2] + sum[3]) * xinv[j], d[1], acc[j][1]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: they hold the warps' sums now
  store_warp_sums<NT>(p, it, acc, reinterpret_cast<float*>(smem));
}

}  // namespace ferry::cuda::dec
