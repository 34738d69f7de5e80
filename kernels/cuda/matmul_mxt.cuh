// mxfp4 weights repacked for the tensor cores ("mxfp4 tiles": Weight::layout == WLayout::mx_tiles): the
// resident routed experts (Backend::prepare_expert_weights), with the bits of the row layout's kernels.
//
// Why: the decode kernel on the row layout (matmul_dec.cuh) stages every byte through shared memory with
// cp.async and realigns each 17-byte block with a funnel shift; its 16-expert batches ran at 1.8 TB/s on
// the H200 (Nsight Compute, 2026-12-02: latency-bound, 0.53 instructions issued per scheduler and cycle).
// Here a lane's bytes of a quant block are one 8-byte load straight into registers, no shared memory.
//
// Why the same bits: resident and streamed experts must give the same logits (the device cache holds
// the row layout: an expert lands there as the store wrote it). So the layout only moves bytes: every
// kernel on the tiles issues the mma of the row layout's kernel, with the same fragments, in the same
// order. Decode steps and verify blocks (item_body below) reproduce dec::item_body<dec::Mx>: warp w takes
// the quant blocks b with b % 4 == w in increasing b, one fresh accumulator per block, acc = fma((c0 + c1)
// * 2^-k * 2^14, 2^(e-127), acc), the warps' sums in warp order. Prompt passes run mma::item_body with the
// format MxT below, whose fragments are mma::Mx's. Tests: tests/gpu Ops.MxTiles* compare the bits.
//
// Layout. A weight of R rows (R % 16 == 0) and C columns (C % 128 == 0) keeps its size (17 bytes per 32
// weights) and each 16-row tile its place: tile T is bytes [T * 16 * RB, (T + 1) * 16 * RB), RB = C / 32 *
// 17. Inside a tile, unit u (columns 128u .. 128u + 127: quant blocks 4u + b, b < 4) is the 1,088 bytes
// at u * 1088:
//   - quants, 4 x 256 bytes: block 4u + b's are the 32 lanes' 8 bytes at b * 256 + l * 8 (lane l: g =
//     l / 4, t = l % 4): quant bytes 4t .. 4t + 3 of row g, then of row g + 8, each re-ordered by
//     e2m1::tile_byte (the row layout's byte j holds elements j, low nibble, and j + 16; here the same two
//     nibbles' bits in the order that decodes in 5 logic ops a word instead of 7: e2m1_bits.cuh);
//   - scales, 64 bytes at 1024: the e8m0 of (row g + 8h, block 4u + b) at 1024 + b * 16 + g * 2 + h.
// Decode: warp w of a block loads per unit its 8 bytes at w * 256 + l * 8 and the 2 scale bytes at
// 1024 + w * 16 + g * 2. A prompt pass's stage of 128 columns is one unit per 16-row tile, contiguous.
// x for the decode kernel is prep_x's XOrder::mxt: a lane's 8 halves of a block (its B fragments of
// both k16 steps, elements 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3) are one 16-byte load.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/matmul_dec.cuh"
#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/matmul_q8t.cuh"

namespace ferry::cuda::mxt {

constexpr int kUnitCols = 128;
constexpr int kUnitBytes = 1088;  // 16 rows x 4 blocks x 17 bytes
constexpr int kScaleOff = 1024;
constexpr int kWarps = dec::kWarps;
constexpr int kThreads = dec::kThreads;
constexpr int kRows = dec::kRows;

__device__ __forceinline__ uint2 ld_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t ld_stream16(const void* p) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];\n" : "=h"(v) : "l"(p));
  return v;
}

// The prompt kernel's format (mma::item_body with F::kTiled): a stage's weights are one unit per 16-row
// tile; frag_tile gives mma::Mx::frag's fragments and scale of (row g + 8h, block b of the stage) from the
// tile's unit in shared memory: the two quant bytes 2t, 2t + 1 (lane (g, t / 2)'s word, byte 2 (t % 2))
// and 2t + 8, 2t + 9 (lane (g, 2 + t / 2)'s), one word by a byte permute, decoded by e2m1::tile_lo / hi.
struct MxT {
  static constexpr bool kTiled = true;
  static constexpr int kBlockBytes = 17;
  static constexpr int kTileBytes = kUnitBytes;
  __device__ static float frag_tile(const uint8_t* unit, int h, int g, int b, int t, uint32_t a[2][2]) {
    const uint8_t* q = unit + b * 256 + h * 4 + 2 * (t & 1);
    const uint32_t v0 = *reinterpret_cast<const uint16_t*>(q + (g * 4 + (t >> 1)) * 8);
    const uint32_t v1 = *reinterpret_cast<const uint16_t*>(q + (g * 4 + 2 + (t >> 1)) * 8);
    const uint32_t w = __byte_perm(v0, v1, 0x5410u);
    mma::e2m1_frags(e2m1::tile_lo(w), e2m1::tile_hi(w), a);
    return mma::Mx::scale(unit[kScaleOff + b * 16 + g * 2 + h]);
  }
  // frag_tile of rows g (h = 0) and g + 8 (h = 1) at once: lane (g, t / 2)'s 8 bytes hold row g's word and
  // row g + 8's, so two 8-byte loads replace four 2-byte ones; the same words, fragments and scales.
  __device__ static void frags_tile(const uint8_t* unit, int g, int b, int t, uint32_t a[2][2][2], float d[2]) {
    const uint8_t* q = unit + b * 256 + (g * 4 + (t >> 1)) * 8;
    const uint2 v0 = *reinterpret_cast<const uint2*>(q);       // lane (g, t / 2): rows g, g + 8
    const uint2 v1 = *reinterpret_cast<const uint2*>(q + 16);  // lane (g, 2 + t / 2)
    const uint32_t sel = (t & 1) ? 0x7632u : 0x5410u;          // the 2 bytes at 2 (t % 2) of each word
    const uint32_t w0 = __byte_perm(v0.x, v1.x, sel), w1 = __byte_perm(v0.y, v1.y, sel);
    mma::e2m1_frags(e2m1::tile_lo(w0), e2m1::tile_hi(w0), a[0]);
    mma::e2m1_frags(e2m1::tile_lo(w1), e2m1::tile_hi(w1), a[1]);
    d[0] = mma::Mx::scale(unit[kScaleOff + b * 16 + g * 2]);
    d[1] = mma::Mx::scale(unit[kScaleOff + b * 16 + g * 2 + 1]);
  }
};

// Units per load set of the decode kernel: 4 at one activation row (H200, 16-expert batch: 120.7 us against
// 137.4 with 8 and 149.5 with 14, MoeBenchExpertBatchMxTiles), 8 up to 4 rows, 4 above (registers). Speed
// only (matmul_mxt_set_tune sweeps it at one row).
__host__ __device__ constexpr int set_units(int nra) { return nra == 1 ? 4 : nra <= 4 ? 8 : 4; }

// U units of one warp's blocks as lane l loads them: q[i] = (row g, row g + 8) quant words, e[i] = the
// two rows' scale bytes (row g low).
template <int U>
struct Set {
  uint2 q[U];
  uint32_t e[U];
};

// Loads the set of U units starting at unit u (qp / ep: this lane's bytes of unit 0). Full: all U units
// are before u1 (no per-unit test; the addresses one base and immediate offsets).
template <int U, bool Full = false>
__device__ __forceinline__ void load_set(Set<U>& s, const uint8_t* qp, const uint8_t* ep, int u, int u1) {
  const size_t base = static_cast<size_t>(u) * kUnitBytes;
#pragma unroll
  for (int i = 0; i < U; ++i) {
    if (Full || u + i < u1) {
      s.q[i] = ld_stream8(qp + base + i * kUnitBytes);
      s.e[i] = ld_stream16(ep + base + i * kUnitBytes);
    }
  }
}

// 2^(e - 127) as a float for the e8m0 byte e (e = 0: 2^-127, the subnormal 0x00400000), from the scale
// bits at [8h, 8h + 8) of s: the shifted byte is 0 or at least 0x00800000, so an unsigned max replaces the
// test and select (fewer instructions in the issue-bound one-row kernel; the same values).
template <int H>
__device__ __forceinline__ float e8m0_at(uint32_t s) {
  return __uint_as_float(max((s << (23 - 8 * H)) & 0x7f800000u, 0x00400000u));
}

// The set's blocks against NT n8 tiles of x (x[j] + col: this lane's B column's 8 halves of the set's
// first unit's block, XOrder::mxt; xinv[j] = 2^-k * 2^14 of accumulator row 4j + t).
// XB: the set's x loads go out together before its math, so a set waits for x once, not once per unit
// (each ld_x is volatile: in program order with the mma). It costs registers (16 more at one row: 94, 5
// blocks per SM instead of 6), so it is for the down projections only, whose x differs per expert and
// misses L1 more: H200 slice 2026-12-02, down 43-44 us against 47-49, gate / up 80 against 68.
// XS: x[j] points into shared memory (item_body's staged row), read with plain loads.
template <int U, int NT, bool XB, bool XS, bool Full = false>
__device__ __forceinline__ void set_math(const Set<U>& s, const __half* const x[NT], int64_t col, int u, int u1,
                                         const float xinv[NT], float acc[NT][2]) {
  auto ldx = [](const __half* a) -> uint4 {
    if constexpr (XS)
      return *reinterpret_cast<const uint4*>(a);
    else
      return q8t::ld_x(a);
  };
  // This set's x: one pointer per n8 tile, the units at immediate offsets of 4 blocks of 32 halves.
  const __half* xu[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) xu[j] = x[j] + col;
  uint4 xb[XB ? U : 1][NT];
  if constexpr (XB) {
#pragma unroll
    for (int i = 0; i < U; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
        if (Full || u + i < u1) xb[i][j] = ldx(xu[j] + i * 4 * 32);
  }
#pragma unroll
  for (int i = 0; i < U; ++i) {
    if (!Full && u + i >= u1) break;
    uint32_t af[2][2][2];  // [row g / g + 8][step][k lo / hi], dec::Mx::frag's fragments
    mma::e2m1_frags(e2m1::tile_lo(s.q[i].x), e2m1::tile_hi(s.q[i].x), af[0]);
    mma::e2m1_frags(e2m1::tile_lo(s.q[i].y), e2m1::tile_hi(s.q[i].y), af[1]);
    uint32_t a[2][4];
#pragma unroll
    for (int st = 0; st < 2; ++st) a[st][0] = af[0][st][0], a[st][1] = af[1][st][0], a[st][2] = af[0][st][1], a[st][3] = af[1][st][1];
    const float d0 = e8m0_at<0>(s.e[i]), d1 = e8m0_at<1>(s.e[i]);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint4 b = XB ? xb[XB ? i : 0][j] : ldx(xu[j] + i * 4 * 32);
      float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma::mma16816(sum, a[0], b.x, b.y, sum);
      mma::mma16816(sum, a[1], b.z, b.w, sum);
      acc[j][0] = fmaf((sum[0] + sum[1]) * xinv[j], d0, acc[j][0]);
      acc[j][1] = fmaf((sum[2] + sum[3]) * xinv[j], d1, acc[j][1]);
    }
  }
}

// Item it of a problem (mma::PlainTc, or the grouped experts' GroupTc, with bm = 16 and K unsplit):
// out[r][row0 + i] for i < 16, r < nr. Warp w streams its blocks of every unit, U units per load, two
// sets in flight (the next loads while the current computes).
// Tried 2026-12-02 and not kept: bulk copies (cp.async.bulk, an mbarrier per stage) of each item's units
// into 2-6 stages of 17 KB of shared memory, read from there with item_body's fragments and order: 127.8
// us for a 16-expert batch with 2 stages, 143.9 with 3, 167.1 with 4, against 119.3 for this, and decode
// 489.6 against 490.6 tok/s (the same for the q8_0 tiles: a KDA group 113.3 us against 100.8).
// Tried 2026-12-02 and not kept: one thread of each block asking L2 for the whole item first
// (cp.async.bulk.prefetch.L2, 30 KB), and the q8_0 tiles' blocks 12 units ahead of their loads: a 16-expert
// batch 118.6 against 116.3 us, slice decode 471.7 / 463.0 against 524.3 / 522.5 tok/s (H200, same call).
// Tried 2026-12-02 and not kept: persistent blocks streaming several items each through a ring of sets
// (loads never drain between items): 152-208 us for a 16-expert batch against 139 us for this (H200,
// MoeBenchExpertBatchMxTiles; more registers, 4 blocks per SM instead of 5, two barriers per item).
// Tried 2026-12-06 and not kept: 2-4 consecutive items per block, each warp's loads streaming from one item
// into the next (the next item's first set issued while the current one's last set computes; the items'
// warp sums reduced after the last, one barrier): a 16-expert batch 145-156 us against 121.7 for this, slice
// decode 484 / 480 against 504 tok/s (H100, MoeBenchExpertBatchMxTiles and gpu-decode arms items2 / items4).
// Tried 2026-12-06 and not kept: every block of this kernel and of the q8_0 tiles' one-row kernels asking L2
// for its item's next 35-140 KB (cp.async.bulk.prefetch.L2) before it waits for the kernel before it, so that
// HBM streams them while a short kernel (a norm, prep_x) runs: slice decode 593.6 (all blocks, 35 KB), 595.2
// (first wave's blocks, 70 KB), 588.1 (first wave, 140 KB) against 610.1 tok/s (H200, same call;
// docs/results/2026-12-06i-l2pf).
// XS (one activation row): after the wait, the block copies its row of prepared x (hi then lo, p.cols halves
// each: x_smem_bytes) into dynamic shared memory, and the warps read x there. For the down projections,
// whose x differs per expert: consecutive blocks, which share an expert, go to different SMs, so each block
// finds its expert's x missing from L1 and waits for L2 unit by unit (Nsight Compute, 2026-12-02: L1 hit
// rate 15 % against 30 % for gate / up, which share one x). Where x comes from only: the same bits.
// Lean (matmul_mxt_lean): the sets of a step are tested against u1 once, not unit by unit, where both and
// the next step's first are whole (a branch per step; the addresses one base and immediate offsets). Fewer
// instructions in a kernel that Nsight finds issue-bound (0.6 IPC, 40 % of cycles with no eligible warp); the
// same loads, math and order, so the same bits. Its kernels are capped at 80 registers (6 blocks a SM).
template <int NRA, int U, bool XB, bool XS = false, bool Lean = false, class P>
__device__ __forceinline__ void item_body(const P& p, const mma::Item& it) {
  static_assert(!XS || NRA == 1, "x in shared memory: one activation row per item");
  constexpr int NT = (NRA + 3) / 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  const int u0 = it.k0 / kUnitCols, u1 = it.k1 / kUnitCols;
  __shared__ int64_t xrow[NRA];
  __shared__ float red[kWarps * NT * 2 * 32];
  if (threadIdx.x < NRA) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  const uint8_t* qp = it.w + warp * 256 + lane * 8;
  const uint8_t* ep = it.w + kScaleOff + warp * 16 + g * 2;
  Set<U> A, B;
  // The first set's weights do not depend on the kernel before this one (prep_x): load them first.
  load_set<U>(A, qp, ep, u0, u1);
  __syncthreads();
  dec::grid_dependency_wait();
  // x[j]: this lane's halves 8t .. 8t + 7 of warp w's block of unit 0.
  const __half* x[NT];
  float xinv[NT];
  dec::lane_x<NT>(p, it, xrow, warp * 32, dec::Mx::kXScale, x, xinv);
  if constexpr (XS) {
    extern __shared__ __align__(16) uint8_t xsm[];
    __half* xs = reinterpret_cast<__half*>(xsm);
    const int n16 = p.cols / 8;  // 16-byte granules per level
    for (int i = threadIdx.x; i < 2 * n16; i += kThreads) {
      const int lv = i >= n16 ? 1 : 0, q = i - lv * n16;
      const __half* src = (lv ? p.xp.lo : p.xp.hi) + xrow[0] * p.xp.stride + q * 8;
      *reinterpret_cast<uint4*>(xs + lv * p.cols + q * 8) = __ldcg(reinterpret_cast<const uint4*>(src));
    }
    __syncthreads();
    x[0] = xs + (g & 1) * p.cols + warp * 32 + 8 * (lane & 3);  // lane_x's halves, from the copy
  }
  float acc[NT][2];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = 0.0f;
  for (int u = u0; u < u1; u += 2 * U) {
    if (Lean && u + 3 * U <= u1) {  // both sets of this step and the next one's first are whole
      load_set<U, true>(B, qp, ep, u + U, u1);
      set_math<U, NT, XB, XS, true>(A, x, static_cast<int64_t>(u) * kUnitCols, u, u1, xinv, acc);
      load_set<U, true>(A, qp, ep, u + 2 * U, u1);
      set_math<U, NT, XB, XS, true>(B, x, static_cast<int64_t>(u + U) * kUnitCols, u + U, u1, xinv, acc);
      continue;
    }
    load_set<U>(B, qp, ep, u + U, u1);
    set_math<U, NT, XB, XS>(A, x, static_cast<int64_t>(u) * kUnitCols, u, u1, xinv, acc);
    if (u + U >= u1) break;
    load_set<U>(A, qp, ep, u + 2 * U, u1);
    set_math<U, NT, XB, XS>(B, x, static_cast<int64_t>(u + U) * kUnitCols, u + U, u1, xinv, acc);
  }
  dec::store_warp_sums<NT>(p, it, acc, red);
}

// Dynamic shared memory of item_body<..., XS = true> for rows of `cols` columns.
inline size_t x_smem_bytes(int cols) { return static_cast<size_t>(cols) * 2 * sizeof(__half); }

}  // namespace ferry::cuda::mxt
