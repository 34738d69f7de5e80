// q8_0 weights repacked for the tensor cores ("q8_0 tiles": Weight::layout == WLayout::q8_tiles) and
// their matmul, one kernel for every row count: decode steps, verify blocks and prompt passes.
//
// Why a layout: a q8_0 row is 34-byte blocks (fp16 scale, 32 int8), so no 16-byte load lines up with a
// block, and the decode kernels (matmul_fast.cuh, matmul_dec.cuh) stage every byte through shared
// memory with cp.async, realign it and decode it there. At one activation row that costs more issue
// slots than the HBM bytes allow (Nsight Compute, 2026-12-02: 0.5 instructions issued per scheduler
// and cycle at 40 % of the DRAM rate). The spine is resident and loaded once, so it can be laid out
// for the kernel: each lane's A fragments of a quant block become one 16-byte load straight into
// registers, with no shared memory, no barrier and no realignment.
//
// Layout. A weight of R rows (R % 16 == 0) and C columns (C % 256 == 0) keeps its size (34 bytes per 32
// weights) and keeps each 16-row tile in its place: tile T is bytes [T * 16 * RB, (T + 1) * 16 * RB)
// (RB = C / 32 * 34), so a range of whole tiles is still a weight of its own. Inside a tile, unit u
// (columns 256u .. 256u + 255: 8 quant blocks) is the 4,352 bytes at u * 4352:
//   - quants, 8 x 512 bytes: block i's 512 bytes are the 32 lanes' 16-byte A fragments of both k16 steps
//     of an m16n8k16 mma (lane l: g = l / 4, t = l % 4): word 2s + h of lane l holds the bytes
//     (q[g][c], q[g][c + 1], q[g + 8][c], q[g + 8][c + 1]), c = 8t + 4s + 2h, each stored as q + 128;
//   - scales, 256 bytes: the fp16 d of (tile row g + 8h, block i) at ((g * 8 + i) * 2 + h) * 2, so lane
//     l's 32 bytes are its two rows' scales of the 8 blocks.
// The mma thus sees a block's 32 columns in the order k = 2t + e (step s) <- column 8t + 4s + e and
// k = 2t + 8 + e <- column 8t + 4s + 2 + e: the same permutation of A's k and B's k, so the products are
// those of the natural order, and a lane's B fragments of a block are x's 8 halves [8t, 8t + 8): one
// 16-byte load of x in its natural order.
//
// Arithmetic and order (as matmul_dec.cuh): x prepared per row by prep_x (hi + lo fp16 halves of a
// power-of-two scaling 2^k); per quant block, 2 mma into a fresh accumulator whose n8 columns are
// (row, level) pairs, then acc = fma((hi_sum + lo_sum) * 2^-k, d, acc). A thread block of 4 warps owns a
// 16-row tile; warp w takes the units u with u % 4 == w in increasing u (blocks in order inside a unit);
// the 4 warps' sums are added in warp order; a split K (splitk.cuh, parts from matmul_q8t_split) adds
// its parts in part order. None of it depends on the number of rows in the call or on a row's place
// among them: a row alone has the bits of the same row in a verify block or in a prompt pass, and the
// split is a function of the weight's shape.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/matmul_dec.cuh"
#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/splitk.cuh"

namespace ferry::cuda::q8t {

constexpr int kUnitCols = 256;
constexpr int kUnitBytes = 4352;  // 16 rows x 8 blocks x 34 bytes
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;
static_assert(kWarps == dec::kWarps && kRows == dec::kRows, "the end of an item is dec::store_warp_sums");

// Read-once weight bytes: a 16-byte load that bypasses L1. volatile keeps the loads where they are
// written (issued a unit ahead of their use), not sunk next to the mma that needs them.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// x's 16 bytes for one block's B fragments (L1-cached: every warp of the SM reads the same x). A coherent
// load, not the read-only path (ld.global.nc): prep_x wrote x, and these kernels are its programmatic
// dependents (common.cuh pdl_begin's rule). volatile: in program order with the mma, so the compiler does
// not hoist a unit's loads of every n8 tile at once.
__device__ __forceinline__ uint4 ld_x(const void* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Two stored bytes (q + 128) -> the fp16 pair (q0, q1): under fp16's 2^10 exponent they are 1024 + q + 128.
__device__ __forceinline__ uint32_t biased_pair(uint32_t w, unsigned sel) {
  const uint32_t p = __byte_perm(w, 0x64646464u, sel);
  __half2 h = *reinterpret_cast<const __half2*>(&p);
  h = __hsub2(h, __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480)));  // 1152
  return *reinterpret_cast<const uint32_t*>(&h);
}

// One unit of a tile as lane l loads it: block i's A fragments, and the scales of rows g, g + 8.
struct Unit {
  uint4 q[8];
  uint4 s[2];
};

__device__ __forceinline__ void load_unit(Unit& u, const uint8_t* p, int lane, int g) {
#pragma unroll
  for (int i = 0; i < 8; ++i) u.q[i] = ld_stream(p + i * 512 + lane * 16);
  u.s[0] = ld_stream(p + 4096 + g * 32);
  u.s[1] = ld_stream(p + 4096 + g * 32 + 16);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// The unit's 8 blocks against NT n8 tiles of x (x[j] + col: this lane's B column's row at the unit's first
// column, plus 8t; xinv[j]: 2^-k of this lane's accumulator row 4j + t).
template <int NT>
__device__ __forceinline__ void unit_math(const Unit& u, const __half* const x[NT], int col, const float xinv[NT],
                                          float acc[NT][2]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t a[2][4];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const uint32_t w0 = word(u.q[i], 2 * s), w1 = word(u.q[i], 2 * s + 1);
      a[s][0] = biased_pair(w0, 0x5140u);  // row g, columns c, c + 1
      a[s][1] = biased_pair(w0, 0x7362u);  // row g + 8
      a[s][2] = biased_pair(w1, 0x5140u);  // row g, columns c + 2, c + 3
      a[s][3] = biased_pair(w1, 0x7362u);
    }
    const uint32_t sw = word(u.s[i >> 2], i & 3);
    const float2 d = __half22float2(*reinterpret_cast<const __half2*>(&sw));  // rows g, g + 8
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint4 b = ld_x(x[j] + col + i * 32);
      float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma::mma16816(sum, a[0], b.x, b.y, sum);
      mma::mma16816(sum, a[1], b.z, b.w, sum);
      acc[j][0] = fmaf((sum[0] + sum[1]) * xinv[j], d.x, acc[j][0]);
      acc[j][1] = fmaf((sum[2] + sum[3]) * xinv[j], d.y, acc[j][1]);
    }
  }
}

// Item it of a plain problem (mma::PlainTc with bm = 16): out[r][row0 + i] for i < 16, r < nr, over the
// item's columns [k0, k1) (multiples of 256).
// A warp's units u, u + 4, ... below u1 of the tile at w into acc (zeroed first), unit u already loading in A:
// two register sets, the next unit of this warp loading while the current one computes.
template <int NT>
__device__ __forceinline__ void units_loop(Unit& A, Unit& B, const uint8_t* w, int u, int u1, const __half* const x[NT],
                                           const float xinv[NT], float acc[NT][2], int lane, int g) {
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = 0.0f;
  while (u < u1) {
    const int v = u + kWarps;
    if (v < u1) load_unit(B, w + static_cast<size_t>(v) * kUnitBytes, lane, g);
    unit_math<NT>(A, x, u * kUnitCols, xinv, acc);
    if (v >= u1) break;
    u = v + kWarps;
    if (u < u1) load_unit(A, w + static_cast<size_t>(u) * kUnitBytes, lane, g);
    unit_math<NT>(B, x, v * kUnitCols, xinv, acc);
  }
}

template <int NRA, class P>
__device__ __forceinline__ void item_body(const P& p, const mma::Item& it) {
  constexpr int NT = (NRA + 3) / 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  const int u0 = it.k0 / kUnitCols, u1 = it.k1 / kUnitCols;
  __shared__ int64_t xrow[NRA];
  __shared__ float red[kWarps * NT * 2 * 32];
  if (threadIdx.x < NRA) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  Unit A, B;
  int u = u0 + warp;
  // The first unit's weights do not depend on the kernel before this one (prep_x): load them first.
  if (u < u1) load_unit(A, it.w + static_cast<size_t>(u) * kUnitBytes, lane, g);
  __syncthreads();
  dec::grid_dependency_wait();
  const __half* x[NT];
  float xinv[NT];
  dec::lane_x<NT>(p, it, xrow, 0, 1.0f, x, xinv);
  float acc[NT][2];
  units_loop<NT>(A, B, it.w, u, u1, x, xinv, acc, lane, g);
  dec::store_warp_sums<NT>(p, it, acc, red);
}

// ---- the stream split (splitk.cuh) -----------------------------------------------------------------------
// Worker blockIdx.x of p.sk.stream, row group blockIdx.y: its run of the tiles' units as one item per tile the
// run touches (the tile's part; splitk.cuh numbers the parts). Each item is item_body's loop and order over the
// part's columns (units_loop), so the sums are those of item_body on that item; between items the next item's
// first unit is loaded before this item's sums are reduced, so a worker's stream does not drain at a tile boundary.
// stream_item: the item of worker b starting at unit x of its run [x, end) (false past the run); x moves to its end.
template <class P>
__device__ __forceinline__ bool stream_item(const P& p, int64_t b, int64_t& x, int64_t end, mma::Item& it) {
  const int64_t U = p.cols / kUnitCols, L = static_cast<int64_t>(p.ntiles) * U, W = p.sk.stream;
  if (x >= end) return false;
  const int64_t t = x / U, t0 = t * U, e = min(end, t0 + U);
  const int64_t first = splitk::stream_worker(t0, L, W);  // the worker of the tile's part 0
  it.part = static_cast<int>(b - first);
  it.parts = static_cast<int>(splitk::stream_worker(t0 + U - 1, L, W) - first + 1);
  it.c = static_cast<int>(blockIdx.y * p.ntiles + t);  // the tile's counter in this row group
  it.row0 = static_cast<int>(t) * kRows;
  it.w = p.w + static_cast<size_t>(it.row0) * p.row_bytes;
  it.k0 = static_cast<int>((x - t0) * kUnitCols);
  it.k1 = static_cast<int>((e - t0) * kUnitCols);
  x = e;
  return true;
}

template <int NRA, class P>
__device__ __forceinline__ void stream_body(const P& p) {
  constexpr int NT = (NRA + 3) / 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  const int64_t U = p.cols / kUnitCols, L = static_cast<int64_t>(p.ntiles) * U, W = p.sk.stream, b = blockIdx.x;
  const int64_t end = splitk::stream_start(b + 1, L, W);
  int64_t x = splitk::stream_start(b, L, W);
  __shared__ int64_t xrow[NRA];
  __shared__ float red[kWarps * NT * 2 * 32];
  mma::Item it;
  it.z = 0;
  it.r0 = static_cast<int>(blockIdx.y) * NRA;
  it.nr = static_cast<int>(min(static_cast<int64_t>(NRA), p.n - it.r0));
  it.nrows = kRows;
  if (!stream_item(p, b, x, end, it)) return;
  if (threadIdx.x < NRA) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  Unit A, B;
  int u = it.k0 / kUnitCols + warp, u1 = it.k1 / kUnitCols;
  // The first unit's weights do not depend on the kernel before this one (prep_x): load them first.
  if (u < u1) load_unit(A, it.w + static_cast<size_t>(u) * kUnitBytes, lane, g);
  __syncthreads();
  dec::grid_dependency_wait();
  const __half* xs[NT];
  float xinv[NT];
  dec::lane_x<NT>(p, it, xrow, 0, 1.0f, xs, xinv);  // the row group's: the same for every item of the run
  for (;;) {
    float acc[NT][2];
    units_loop<NT>(A, B, it.w, u, u1, xs, xinv, acc, lane, g);
    // The next item's first unit loads while this one's sums are reduced and stored.
    mma::Item next = it;
    const bool more = stream_item(p, b, x, end, next);
    if (more) {
      u = next.k0 / kUnitCols + warp;
      u1 = next.k1 / kUnitCols;
      if (u < u1) load_unit(A, next.w + static_cast<size_t>(u) * kUnitBytes, lane, g);
    }
    dec::store_warp_sums<NT>(p, it, acc, red);
    if (!more) return;
    __syncthreads();  // every warp has read `red` (an unsplit item's store has no barrier after its reads)
    it = next;
  }
}

// ---- prompt passes ------------------------------------------------------------------------------------
// A prompt pass's rows are many, so the weights are read once per group of kPromptRows activation rows
// and the kernel is bound by the tensor cores, not by HBM: as the prompt kernel of matmul_mma.cuh (whose
// loop this follows), a thread block of 8 warps computes 8 MW consecutive 16-row tiles (MW = 1 or 2 a
// warp: 128 or 256 weight rows) against a group of kPromptRows rows, in stages of 128 columns (half a
// unit: 4 quant blocks) that cp.async copies into shared memory: each tile's 4 blocks of A fragments
// (2,048 bytes, contiguous in the tile) and their scales (8 x 16 bytes), and the group's hi / lo x columns
// (rows padded to 320 bytes, or 256-byte rows with swizzled chunks (SW): a lane's 16-byte read of row g at
// column 8t is then free of bank conflicts). Per quant block a lane
// reads its A fragments (one 16-byte read), and per n8 tile of 8 activation rows and level its B
// fragments of both k16 steps (one 16-byte read: x's natural columns 8t .. 8t + 7, the layout's
// permutation of k).
// Order (a prompt pass's own, as matmul_mma.cuh's): per quant block, hi then lo, each 2 k16 steps, into
// a fresh accumulator; acc = fma(sum, d, acc) with blocks in increasing order; y = acc * 2^-k. It depends
// only on the weight's shape, so a row's bits are the same alone or anywhere in a pass.
constexpr int kPromptRows = 64;  // activation rows per group
constexpr int kPromptK = mma::kK;  // 128 columns per stage
constexpr int kPromptWarpBytes = 4 * 512 + 8 * 16;  // a warp's 16-row tile per stage: quants, scales
constexpr int kPromptXStride = kPromptK * 2 + 64;  // bytes per (level, row) of x in a stage
// SW: x rows of 256 bytes (no pad) with their 16-byte chunks swizzled: chunk c of row r at c ^ 4 (r & 1), so
// a quarter warp's reads (rows g, g + 1 at chunks 4b + t) still hit 8 different 16-byte bank groups. Its
// stages are 50 KB (MW = 1): two blocks a SM with 2 stages each (`FERRY_Q8T_PROMPT_SWZ=1`; off: measured slower, matmul_q8t.cu).
template <bool SW>
__host__ __device__ constexpr int prompt_x_stride() {
  return SW ? kPromptK * 2 : kPromptXStride;
}

// MW: 16-row tiles per warp (1: 128 weight rows a block; 2: 256, each B fragment read from shared memory
// then serves two tiles' mma). The order of every output's operations is the same for both.
template <int L, int MW, bool SW = false>
__host__ __device__ constexpr int prompt_stage_bytes() {
  return mma::kWarps * MW * kPromptWarpBytes + L * kPromptRows * prompt_x_stride<SW>();
}

// The pieces prompt_body shares with its wgmma version (sm90a/q8t_prompt_wgmma.cu): a thread's weight copies
// of a stage and a quant block's A fragments and scales (the x granules' sources and the store of the sums
// are matmul_mma.cuh's mma::XSources and mma::store_sums).

// This thread's weight copies (MW 16-row tiles a warp): granule i = threadIdx.x + k * kThreads is granule
// i % kWG of 16-row tile i / kWG (warp w's tiles are MW w .. MW w + MW - 1): a quant granule (< 128) or the
// scales of row pair g = i % kWG - 128. Its source in stage c is w + woff[k] + (c / 2) * kUnitBytes + (c % 2) *
// (quant ? 2048 : 16); woff's bit 0 marks a quant granule, kNone a granule with nothing to copy. 32-bit offsets
// and destinations recomputed per stage keep the registers for the mma (two tiles a warp need them).
template <int MW>
struct PromptWeightCopies {
  static constexpr int kTiles = mma::kWarps * MW;                                 // 16-row tiles a block
  static constexpr int kWG = kPromptWarpBytes / 16;                               // 136 granules per tile
  static constexpr int KW = (kTiles * kWG + mma::kThreads - 1) / mma::kThreads;  // granules per thread
  static constexpr uint32_t kNone = 0xffffffffu;
  uint32_t woff[KW];
  __device__ PromptWeightCopies(size_t row_bytes, int nrows) {
    const size_t tile_bytes = row_bytes * kRows;
#pragma unroll
    for (int k = 0; k < KW; ++k) {
      const int i = threadIdx.x + k * mma::kThreads, w = i / kWG, r = i - w * kWG;
      woff[k] = i < kTiles * kWG && w * kRows < nrows
                    ? static_cast<uint32_t>(w * tile_bytes) + (r < 128 ? r * 16 + 1u : 4096u + (r - 128) * 32)
                    : kNone;
    }
  }
  // Stage c's weights (of the tiles starting at w) into the stage at base: tile j at j * kPromptWarpBytes.
  __device__ void copy(uint8_t* base, const uint8_t* w, int c) const {
    const size_t unit = static_cast<size_t>(c >> 1) * kUnitBytes;
#pragma unroll
    for (int k = 0; k < KW; ++k) {
      if (woff[k] == kNone) continue;
      const int i = threadIdx.x + k * mma::kThreads, t = i / kWG, r = i - t * kWG;
      const uint32_t o = woff[k];
      cp_async16(base + t * kPromptWarpBytes + r * 16, w + (o & ~1u) + unit + (c & 1) * (o & 1u ? 2048 : 16));
    }
  }
};

// Quant block b's A fragments (both k16 steps, rows g and g + 8) and scales of the warp's MW tiles, whose
// stage bytes start at ws.
template <int MW>
__device__ __forceinline__ void prompt_block_frags(const uint8_t* ws, int b, int lane, int g, uint32_t (&a)[MW][2][4],
                                                   float2 (&d)[MW]) {
#pragma unroll
  for (int m = 0; m < MW; ++m) {
    const uint8_t* wm = ws + m * kPromptWarpBytes;
    const uint4 q = *reinterpret_cast<const uint4*>(wm + b * 512 + lane * 16);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const uint32_t w0 = word(q, 2 * s), w1 = word(q, 2 * s + 1);
      a[m][s][0] = biased_pair(w0, 0x5140u);
      a[m][s][1] = biased_pair(w0, 0x7362u);
      a[m][s][2] = biased_pair(w1, 0x5140u);
      a[m][s][3] = biased_pair(w1, 0x7362u);
    }
    const uint32_t sw = *reinterpret_cast<const uint32_t*>(wm + 2048 + g * 16 + b * 4);
    d[m] = __half22float2(*reinterpret_cast<const __half2*>(&sw));  // rows g, g + 8
  }
}

// Tried 2026-12-06 (seventh session) and not kept: with two tiles a warp (the block loop not unrolled), block
// b + 1's A fragments and scales read from shared memory while block b's mma run (232 registers against 226):
// the same bits and the same time (12288x7168 at 1,024 rows 1,143.8 against 1,142.6 us, 7168x12288 1,317.9
// against 1,298.0; a 1,024-token pass 125.5-126.7 against 123.5-125.4 ms; H100, one call).
template <int S, int L, int MW, bool SW, class P>
__device__ __forceinline__ void prompt_body(const P& p, const mma::Item& it, uint8_t* smem) {
  constexpr int BN = kPromptRows;
  constexpr int SB = prompt_stage_bytes<L, MW, SW>();
  constexpr int XS = prompt_x_stride<SW>();
  constexpr int kTiles = mma::kWarps * MW;  // 16-row tiles a block
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int nst = p.cols / kPromptK;
  __shared__ int64_t xrow[BN];
  if (threadIdx.x < BN) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  __syncthreads();
  const PromptWeightCopies<MW> wc(p.row_bytes, it.nrows);
  // x granules: level lv's granule k of this thread is row xs.row(k), columns 8 xs.q ..: the row and level
  // repeat every BN * 16 / kThreads granules.
  const mma::XSources<BN> xsrc(p, it, xrow);
  constexpr int kXR = mma::XSources<BN>::kXR;
  const int64_t lo_off = L == 2 ? p.xp.lo - p.xp.hi : 0;  // elements from a row's hi to its lo
  // (SW: rows r0 + 16 k and BN + those all have row r0's parity.)
  const int xdst0 = xsrc.r0 * XS + (SW ? xsrc.q ^ (4 * (xsrc.r0 & 1)) : xsrc.q) * 16;
  auto load = [&](int st, int c) {
    uint8_t* base = smem + st * SB;
    wc.copy(base, it.w, c);
    uint8_t* xs = base + kTiles * kPromptWarpBytes + xdst0;
#pragma unroll
    for (int lv = 0; lv < L; ++lv)
#pragma unroll
      for (int k = 0; k < kXR; ++k)
        if (xsrc.src[k])
          cp_async16(xs + (lv * BN + k * mma::XSources<BN>::kRowStep) * XS,
                     xsrc.src[k] + lv * lo_off + static_cast<int64_t>(c) * kPromptK);
  };
  float acc[MW][BN / 8][4];
#pragma unroll
  for (int m = 0; m < MW; ++m)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][j][i] = 0.0f;
  const int ntiles = (it.nr + 7) / 8;
  const bool active = warp * MW * kRows < it.nrows;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nst) load(s, s);
    cp_async_commit();
  }
  for (int c = 0; c < nst; ++c) {
    cp_async_wait<S - 2>();
    __syncthreads();
    if (c + S - 1 < nst) load((c + S - 1) % S, c + S - 1);
    cp_async_commit();
    if (!active) continue;
    const uint8_t* base = smem + (c % S) * SB;
    const uint8_t* ws = base + warp * MW * kPromptWarpBytes;
    const uint8_t* xs = base + kTiles * kPromptWarpBytes + g * XS + 16 * t;
    const int xb = SW ? g & 1 : 0;  // block b's chunks are at 64 (b ^ xb) + 16 t of the row
    // The stage against NJ n8 tiles: per quant block every B fragment is read first, then the mma run
    // level by level and k16 step by step over all NJ tiles, so the NJ accumulators' chains issue back to
    // back instead of each mma waiting on its predecessor's result (one tile a warp: the whole stage is one
    // basic block). Each chain keeps its order (hi's steps 0, 1, then lo's): the bits depend neither on NJ
    // nor on MW.
    auto stage = [&](auto nj) {
      constexpr int NJ = decltype(nj)::value;
      // Two tiles a warp: one quant block at a time (unrolled, the compiler keeps several blocks' A
      // fragments live and spills).
#pragma unroll(MW == 1 && !SW ? 4 : 1)
      for (int b = 0; b < 4; ++b) {
        uint32_t a[MW][2][4];
        float2 d[MW];
        prompt_block_frags<MW>(ws, b, lane, g, a, d);
        float sum[MW][NJ][4];
#pragma unroll
        for (int m = 0; m < MW; ++m)
#pragma unroll
          for (int j = 0; j < NJ; ++j) sum[m][j][0] = sum[m][j][1] = sum[m][j][2] = sum[m][j][3] = 0.0f;
#pragma unroll
        for (int lv = 0; lv < L; ++lv) {
          uint4 bx[NJ];
#pragma unroll
          for (int j = 0; j < NJ; ++j)
            bx[j] = *reinterpret_cast<const uint4*>(xs + (lv * BN + 8 * j) * XS + (b ^ xb) * 64);
#pragma unroll
          for (int m = 0; m < MW; ++m)
#pragma unroll
            for (int j = 0; j < NJ; ++j) mma::mma16816(sum[m][j], a[m][0], bx[j].x, bx[j].y, sum[m][j]);
#pragma unroll
          for (int m = 0; m < MW; ++m)
#pragma unroll
            for (int j = 0; j < NJ; ++j) mma::mma16816(sum[m][j], a[m][1], bx[j].z, bx[j].w, sum[m][j]);
        }
#pragma unroll
        for (int m = 0; m < MW; ++m)
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
            acc[m][j][0] = fmaf(sum[m][j][0], d[m].x, acc[m][j][0]);
            acc[m][j][1] = fmaf(sum[m][j][1], d[m].x, acc[m][j][1]);
            acc[m][j][2] = fmaf(sum[m][j][2], d[m].y, acc[m][j][2]);
            acc[m][j][3] = fmaf(sum[m][j][3], d[m].y, acc[m][j][3]);
          }
      }
    };
    static_assert(BN == 64, "the dispatch below takes 1 .. 8 n8 tiles");
    switch (ntiles) {  // the item's n8 tiles with rows: uniform over the block
      case 1: stage(std::integral_constant<int, 1>{}); break;
      case 2: stage(std::integral_constant<int, 2>{}); break;
      case 3: stage(std::integral_constant<int, 3>{}); break;
      case 4: stage(std::integral_constant<int, 4>{}); break;
      case 5: stage(std::integral_constant<int, 5>{}); break;
      case 6: stage(std::integral_constant<int, 6>{}); break;
      case 7: stage(std::integral_constant<int, 7>{}); break;
      default: stage(std::integral_constant<int, 8>{}); break;
    }
  }
  cp_async_wait<0>();
  if (active) mma::store_sums<MW, BN>(p, it, xrow, warp, lane, acc);
  __syncthreads();
}

}  // namespace ferry::cuda::q8t
