// The prompt pass's matmul on the tensor cores (fp16 mma.sync, fp32 accumulate), for q8_0 and mxfp4
// weights. Used only inside a prompt pass (Backend::set_prompt_pass): decode steps and verify blocks
// keep the CUDA-core path of matmul.cuh, whose order makes a row alone equal the row in a block of 16.
//
// Exactness, and why a row's bits depend only on the row (the prompt pass's rule: a pass of 64 rows
// gives every row the bits of the whole prompt in one pass):
// - Weights enter the tensor cores exactly. A q8_0 quant is an integer in [-128, 127]; an mxfp4 E2M1
//   value (0, ±0.5 … ±6) enters as value * 2^-14 (e2m1_bits.cuh; 2^-15 is an fp16 subnormal). Both are
//   exact fp16 values. The block scale (fp16 d, or 2^(e-127) * 2^14) is applied after the block's
//   products, in fp32: acc = fma(block_sum, scale, acc), blocks in K order.
// - x is prepared per row (prep_x): x' = x * 2^k with k chosen from the row's own max |x| so that
//   max |x'| lies in [2^14, 2^15) (inside fp16's range), then rounded to hi = fp16(x') (11 significant
//   bits: the template's L = 1, `--prompt-x-bits 11`, mma_levels() in matmul_mma_launch.cuh) or, at L = 2
//   (the default; decode kernels always), split into hi and lo = fp16(x' - hi): hi + lo
//   carries 22 of x's 24 significant bits for twice the tensor-core work. Every product of an fp16 weight
//   value (<= 8 significant bits) and hi or lo is exact in fp32. The output is multiplied by 2^-k at the end.
//   L = 3 (mxfp4 only; FERRY_MMA_LEVELS=3, off: slower, matmul_mma_launch.cuh): hi in fp16 and lo as E4M3
//   (lo8_bits.cuh), x to ~15 bits for 3 mma a block instead of 4.
// - One quant block (32 columns) is 2 k16 steps x L levels (hi, then lo) = 2 L mma into a fresh accumulator (L = 3:
//   lo's one E4M3 k32 mma first, its sum times 2^-13, then hi's two steps onto it); the
//   hardware's order of additions inside an mma depends only on the output element's own row and
//   column, and the kernel's loop order depends only on the weight's shape. So every output element
//   is computed by the same operations whatever the number of rows in the call, and where its row sits.
// Results differ from the CUDA-core path's and the CPU's (x rounded to 11 or 22 bits, the tensor core's own
// summation): at L = 2 2e-7 to 7e-7 of the largest output on the H200, at L = 1 up to 2.2e-4 on the H100
// (tests/gpu PromptPassMatmul*). The accumulator holds y * 2^k, so an output must stay below 2^(128 - k) where the
// CPU's limit is 2^128: only rows with a tiny max |x| against huge mxfp4 block exponents (e > ~200,
// 2^73 and up; real checkpoints use ~2^-20 .. 2^5) can overflow where the CPU would not, and exponents
// from 241 (2^114) give infinite scales (e2m1::scale14_bits).
//
// Tiling: a thread block of 8 warps computes a weight tile of 16 MW rows per warp (128 rows; 256 with
// MW = 2) against a group of BN activation rows, K in stages of 128 columns (4 quant blocks): cp.async copies, in 16-byte
// granules, the 16-aligned window over each tile row's raw quant bytes (q8_0: 136 bytes at an 8-aligned
// start, 9 granules; mxfp4: 68 at a 4-aligned start, 5) and the group's hi / lo rows (fp16, rows padded
// to 272 bytes so ldmatrix is conflict-free; L = 3: hi, then lo's E4M3 rows of 128 bytes padded to 144) into one of
// S stages. Each warp decodes its rows' A fragments
// straight from the raw bytes (q8_0: int8 -> fp16 by the 0x6400 magic; mxfp4: shifts and masks),
// loads B fragments with ldmatrix, and runs 4 mma per 8 activation rows and quant block.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/e2m1_bits.cuh"
#include "kernels/cuda/lo8_bits.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"

namespace ferry::cuda::mma {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Weight rows per tile: MW m16 tiles per warp. 1 (128 rows) for both launchers; the grouped expert
// matmul takes 2 (256 rows: each row group's x, re-read by every tile, then costs half as much per
// weight byte) under FERRY_MMA_GROUP_MW=2, measured no faster on the H200.
__host__ __device__ constexpr int tile_rows(int mw) { return 16 * mw * kWarps; }
constexpr int kK = 128;           // columns per stage: 4 quant blocks
constexpr int kXStride = kK * 2 + 16;  // bytes per activation row in a stage (fp16, padded)
// L = 3 (x as hi fp16 + lo E4M3, lo8_bits.cuh; mxfp4 weights only): lo's bytes per activation row in a stage,
// padded so that ldmatrix's 8 rows of 16 bytes fall in 8 distinct groups of 4 banks.
constexpr int kX8Stride = kK + 16;
// Bytes of x per stage: L fp16 levels, or (L = 3) hi in fp16 and lo in E4M3.
template <int BN, int L>
__host__ __device__ constexpr int x_stage_bytes() {
  return L == 3 ? BN * (kXStride + kX8Stride) : L * BN * kXStride;
}
// fp16 levels of x in a stage (hi, and lo unless L is 1 or 3).
__host__ __device__ constexpr int half_levels(int l) { return l == 3 ? 1 : l; }


__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// d = a (16x16, row) * b (16x8, col) + c, fp16 inputs, fp32 accumulate.
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// d = a (16x32, row) * b (32x8, col) + c, E4M3 inputs, fp32 accumulate (sm_89 and later).
__device__ __forceinline__ void mma16832_e4m3(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// Two int8 (the low 16 bits of v) -> two exact fp16: the bytes with their sign bit flipped (q + 128)
// under fp16's 2^10 exponent are 1024 + q + 128; subtracting 1152 leaves q.
__device__ __forceinline__ uint32_t i8x2_to_h2(uint32_t v) {
  const uint32_t p = __byte_perm(v, 0x64646464u, 0x5140u) ^ 0x00800080u;
  __half2 h = *reinterpret_cast<const __half2*>(&p);
  h = __hsub2(h, __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480)));  // 1152
  return *reinterpret_cast<const uint32_t*>(&h);
}

// q8_0 (ggml: fp16 d, 32 int8). The thread's A fragments for quant block b of a stage row: step s
// (k 16s..16s+15) needs k = 2t, 2t+1 (a0 / a1) and 2t+8, 2t+9 (a2 / a3) of rows g and g+8.
struct Q8 {
  static constexpr bool kTiled = false;  // rows of blocks (matmul_mxt.cuh's MxT: 16-row tiles)
  static constexpr int kBlockBytes = 34;
  static constexpr int kRaw = 4 * kBlockBytes;  // bytes per row per stage
  static constexpr int kWin = 9;                // 16-byte granules covering them (they start 8-aligned)
  // slot: the row's window in the stage; o: where the stage's bytes start in it (0 or 8).
  __device__ static float frag(const uint8_t* slot, int o, int b, int t, uint32_t a[2][2]) {
    const uint8_t* blk = slot + o + b * kBlockBytes;
    const uint16_t* q = reinterpret_cast<const uint16_t*>(blk + 2);  // even offset: aligned
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      a[s][0] = i8x2_to_h2(q[8 * s + t]);
      a[s][1] = i8x2_to_h2(q[8 * s + t + 4]);
    }
    return __half2float(*reinterpret_cast<const __half*>(blk));
  }
};

// Four fp16 high bytes (lo: a block's elements at k, hi: at k + 16; bytes 0, 1, 2, 3 in k order of a
// thread's fragment) -> the A fragments a[step][k lo / hi] of fp16 pairs: step 0 from lo, step 1 from hi,
// each pair two bytes with zero low bytes (e2m1_bits.cuh).
__device__ __forceinline__ void e2m1_frags(uint32_t lo, uint32_t hi, uint32_t a[2][2]) {
  a[0][0] = __byte_perm(lo, 0u, 0x1404u);
  a[0][1] = __byte_perm(lo, 0u, 0x3424u);
  a[1][0] = __byte_perm(hi, 0u, 0x1404u);
  a[1][1] = __byte_perm(hi, 0u, 0x3424u);
}

// mxfp4 (ggml: e8m0 e, 16 bytes; byte j holds element j (low nibble) and j+16 (high nibble)). Step 0
// is the low nibbles, step 1 the high ones, of bytes 2t, 2t+1 and 2t+8, 2t+9: one word of the four
// (a byte permute of two unaligned 16-bit reads), decoded by e2m1::row_lo / row_hi as value * 2^-14
// with 2^14 in the block's scale (scale below), 14 instructions per 8 weights where the byte-permute
// table of the magnitudes (true values) took 18 until 2026-12-07. The products are the same values times
// 2^-14, yet the bits changed in the last places (H100, 2026-12-07: a 1,024-token pass's logits differ
// from the table's, the same greedy tokens; docs/results/2026-12-07b-e2m1). The likely cause, not
// isolated: the tensor core aligns an mma's products to the largest one's exponent before it truncates,
// and a weight of 0.5 is now an fp16 subnormal (0.1b x 2^-14) whose raw exponent is one above its value's.
// The decode kernels (matmul_dec.cuh dec::Mx) have decoded this way from the start. Rows and tiles
// (matmul_mxt.cuh MxT) decode the same values: the same bits as each other (tests/gpu Ops.MxTiles*).
struct Mx {
  static constexpr bool kTiled = false;
  static constexpr int kBlockBytes = 17;
  static constexpr int kRaw = 4 * kBlockBytes;  // 68
  static constexpr int kWin = 5;                // 16-byte granules covering them (they start 4-aligned)
  // 2^(e-127) * 2^14 from an e8m0 byte (e2m1::scale14_bits: infinity from e = 241).
  __device__ static float scale(unsigned e) { return __uint_as_float(e2m1::scale14_bits(e)); }
  // The 16 bits at any byte offset of a 4-aligned buffer, in the low half (the high half is the next two
  // bytes: callers take the low half by a byte permute).
  __device__ static uint32_t u16_at(const uint8_t* base, int off) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(base) + (off >> 2);
    return __funnelshift_r(w[0], w[1], (off & 3) * 8);
  }
  __device__ static float frag(const uint8_t* slot, int o, int b, int t, uint32_t a[2][2]) {
    const int off = o + b * kBlockBytes;
    const uint32_t q = __byte_perm(u16_at(slot, off + 1 + 2 * t), u16_at(slot, off + 9 + 2 * t), 0x5410u);
    e2m1_frags(e2m1::row_lo(q), e2m1::row_hi(q), a);
    return scale(slot[off]);
  }
};

// A stage's 16-byte weight granules per row (its window) or, F::kTiled (matmul_mxt.cuh's MxT), per 16-row
// tile (its unit); and a stage's weight bytes.
template <class F>
__host__ __device__ constexpr int stage_granules() {
  if constexpr (F::kTiled)
    return F::kTileBytes / 16;
  else
    return F::kWin;
}
template <class F, int MW>
__host__ __device__ constexpr int stage_weight_bytes() {
  if constexpr (F::kTiled)
    return tile_rows(MW) / 16 * F::kTileBytes;
  else
    return tile_rows(MW) * F::kWin * 16;
}

template <class F, int BN, int L, int MW>
__host__ __device__ constexpr int stage_bytes() {
  return stage_weight_bytes<F, MW>() + 16 + x_stage_bytes<BN, L>();  // +16: u16_at's read past the last row
}

// One work item: a 128-row weight tile against a group of nr (<= BN) activation rows.
struct Item {
  const uint8_t* w;  // the tile's first weight row
  int row0;          // its first output column
  int nrows;         // valid weight rows (tile_rows(MW) but at the matrix's end)
  int nr;            // activation rows in the group
  int c, r0, z;      // the problem's coordinates
  int k0, k1;        // columns [k0, k1): all of them, or a part of a split K (decode kernel only: splitk.cuh)
  int part, parts;   // which part (parts == 1: no split)
  int tab = 0;       // the table of a prompt pass's wave launch (moe_grouped.cu WaveTc)
};

// The tensor-core paths' plain matmul (the prompt kernel, matmul_dec.cuh, matmul_q8t.cuh): item j = (row group j / ntiles, weight tile of bm rows j % ntiles),
// x prepared as [n, cols]. Prompt passes: bm = tile_rows(kPlainMW), groups of kPlainBN rows; decode
// steps and verify blocks: bm = 16, groups of NRA rows.
struct PlainTc {
  const uint8_t* w;
  size_t row_bytes;
  int rows, cols;
  XPrep xp;
  float* y;
  int64_t n;
  int ntiles, group, bm;
  int parts = 1, unit = 1024;  // the split of K (decode steps only: matmul_kparts, splitk.cuh)
  splitk::Bufs sk;
  // Item order (speed only): tiles before row groups (false), or a tile's row groups next to each other
  // (true: the q8_0 tiles' prompt passes, whose row groups then read each weight tile while it is in L2).
  bool groups_fastest = false;
  // Item j = (row group, tile, part), parts fastest.
  __device__ Item item(int64_t j) const {
    Item it;
    const int64_t q = j / parts;
    it.part = static_cast<int>(j - q * parts);
    it.parts = parts;
    splitk::range(cols, unit, it.part, parts, it.k0, it.k1);
    const int64_t ngroups = (n + group - 1) / group;
    const int64_t grp = groups_fastest ? q % ngroups : q / ntiles;
    const int tile = static_cast<int>(groups_fastest ? q / ngroups : q - grp * ntiles);
    it.c = static_cast<int>(q);  // the counter of a split item
    it.z = 0;
    it.r0 = static_cast<int>(grp * group);
    it.row0 = tile * bm;
    it.w = w + static_cast<size_t>(it.row0) * row_bytes;
    it.nrows = min(bm, rows - it.row0);
    it.nr = static_cast<int>(min(static_cast<int64_t>(group), n - it.r0));
    return it;
  }
  __device__ int64_t xrow(const Item& it, int r) const { return it.r0 + r; }
  __device__ float* yrow(const Item& it, int r) const { return y + static_cast<int64_t>(it.r0 + r) * rows; }
  __device__ int64_t part_stride() const { return n * rows; }
  __device__ float* part_row(const Item& it, int q, int r) const {
    return sk.part + q * part_stride() + static_cast<int64_t>(it.r0 + r) * rows;
  }
  __device__ int* counter(const Item& it) const { return sk.cnt + it.c; }
};

// One quant block b of a stage against the group's first NT n8 tiles (x rows 8 j .. 8 j + 7 of the group
// in the stage at xs): per level every B fragment is loaded first (ldmatrix x4 per pair jp of n8 tiles:
// (rows 16jp..+7, k lo 8), (same rows, k hi 8), (rows 16jp+8.., k lo), (.., k hi)), then the mma run k16
// step by step, each step over all (m, n8) tiles: the MW x NT accumulators' chains are independent, so
// their mma issue back to back instead of each waiting on its predecessor's result. Each chain keeps its
// order (hi's steps 0, 1, then lo's), and its block sum enters acc by one fma, blocks in K order: the
// bits do not depend on NT (a tail group's n8 tiles past its rows are not computed).
// L = 3 (mxfp4 only: lo8_bits.cuh): lo first, as E4M3, one mma.m16n8k32 per (m, n8) tile into the fresh sum
// (A: the lane's own fp16 weights of both steps as E4M3, lo8::a_word; B: ldmatrix x4 over the lo8 rows gives a
// pair of n8 tiles' two registers each), the sum times 2^-13 (lo8::kDown), then hi's two steps onto it.
template <int L, int MW, int NT, int BN>
__device__ __forceinline__ void block_math(const uint32_t (&a)[MW][2][4], const float (&d)[MW][2], const uint8_t* xs,
                                           int b, int lane, float (&acc)[MW][BN / 8][4]) {
  const int q = lane >> 3;
  constexpr int NJ = (NT + 1) / 2;  // pairs of n8 tiles to load
  float sum[MW][NT][4];
#pragma unroll
  for (int m = 0; m < MW; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) sum[m][j][i] = 0.0f;
  if constexpr (L == 3) {
    uint32_t b8[NJ][4];
#pragma unroll
    for (int jp = 0; jp < NJ; ++jp) {
      const int row = 16 * jp + 8 * (q >> 1) + (lane & 7);
      ldmatrix_x4(b8[jp], xs + BN * kXStride + row * kX8Stride + 32 * b + 16 * (q & 1));
    }
    uint32_t a8[MW][4];
#pragma unroll
    for (int m = 0; m < MW; ++m)
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        a8[m][2 * s] = lo8::a_word(a[m][s][0], a[m][s][2]);      // row g
        a8[m][2 * s + 1] = lo8::a_word(a[m][s][1], a[m][s][3]);  // row g + 8
      }
#pragma unroll
    for (int m = 0; m < MW; ++m)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        mma16832_e4m3(sum[m][j], a8[m], b8[j >> 1][2 * (j & 1)], b8[j >> 1][2 * (j & 1) + 1], sum[m][j]);
#pragma unroll
        for (int i = 0; i < 4; ++i) sum[m][j][i] *= lo8::kDown;
      }
  }
#pragma unroll
  for (int lv = 0; lv < half_levels(L); ++lv) {
    uint32_t bx[NJ][2][4];
#pragma unroll
    for (int jp = 0; jp < NJ; ++jp) {
      const int row = 16 * jp + 8 * (q >> 1) + (lane & 7);
#pragma unroll
      for (int s = 0; s < 2; ++s)
        ldmatrix_x4(bx[jp][s], xs + lv * BN * kXStride + row * kXStride + (32 * b + 16 * s + 8 * (q & 1)) * 2);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int m = 0; m < MW; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          mma16816(sum[m][j], a[m][s], bx[j >> 1][s][2 * (j & 1)], bx[j >> 1][s][2 * (j & 1) + 1], sum[m][j]);
  }
#pragma unroll
  for (int m = 0; m < MW; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      acc[m][j][0] = fmaf(sum[m][j][0], d[m][0], acc[m][j][0]);
      acc[m][j][1] = fmaf(sum[m][j][1], d[m][0], acc[m][j][1]);
      acc[m][j][2] = fmaf(sum[m][j][2], d[m][1], acc[m][j][2]);
      acc[m][j][3] = fmaf(sum[m][j][3], d[m][1], acc[m][j][3]);
    }
}

// This thread's x granules of a level (BN rows of prepared x, a stage of kK columns): granule j = threadIdx.x
// + k * kThreads is row row(k) = j / 16, columns 8 q .. 8 q + 7 of the stage (q = j % 16, the same for every
// k); src[k] its hi half's first column of the item (null past the item's rows). The prompt kernels' copies
// of x (item_body, the q8_0 tiles' prompt_body and their wgmma versions) start from it.
template <int BN>
struct XSources {
  static_assert((BN * (kK / 8)) % kThreads == 0 && kThreads % (kK / 8) == 0, "x granules per level");
  static constexpr int kXR = BN * (kK / 8) / kThreads;  // granules per thread and level
  static constexpr int kRowStep = kThreads / (kK / 8);
  int q, r0;
  const __half* src[kXR];
  template <class P>
  __device__ XSources(const P& p, const Item& it, const int64_t* xrow) : q(threadIdx.x % (kK / 8)), r0(threadIdx.x / (kK / 8)) {
#pragma unroll
    for (int k = 0; k < kXR; ++k) {
      const int r = row(k);
      src[k] = r < it.nr ? p.xp.hi + xrow[r] * p.xp.stride + q * 8 : nullptr;
    }
  }
  __device__ int row(int k) const { return r0 + k * kRowStep; }
};

// The warp's sums (acc[m][j]: mma.sync's C fragment of its 16-row tile m and n8 tile j; warp w's tiles are
// MW w .. MW w + MW - 1) times each row's 2^-k, into the item's output rows that exist.
template <int MW, int BN, class P>
__device__ __forceinline__ void store_sums(const P& p, const Item& it, const int64_t* xrow, int warp, int lane,
                                           const float (&acc)[MW][BN / 8][4]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int m = 0; m < MW; ++m)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 8 * j + 2 * t + (i & 1), row = (warp * MW + m) * 16 + g + 8 * (i >> 1);
        if (r < it.nr && row < it.nrows) p.yrow(it, r)[it.row0 + row] = acc[m][j][i] * p.xp.inv[xrow[r]];
      }
}

// Item it of problem p: out[r][row0 + i] for i < nrows, r < nr. The problem gives the prepared rows
// (p.xp, p.xrow(it, r): a row index into it) and the output rows (p.yrow(it, r)).
// Tried 2026-12-06 (seventh session) and not kept: the tiled format's stages as bulk copies (cp.async.bulk, one
// per 16-row tile unit and one per x row and level, each issued by a thread of its own, completing on an
// mbarrier per stage that every warp waits on) instead of ~6 cp.async of 16 bytes a thread with their
// address math: the same bits, but the experts of a 1,024-token pass 17.4 against 15.1-15.4 ms
// (MoeBenchPromptPassExpertWave) and the pass 130.4-130.9 against 123.5-125.4 ms (H100, one call).
template <class F, int BN, int S, int L, int MW, class P>
__device__ __forceinline__ void item_body(const P& p, const Item& it, uint8_t* smem) {
  static_assert(L != 3 || !std::is_same_v<F, Q8>, "x's lo as E4M3 needs E2M1 weights (q8_0's int8 are not exact in E4M3)");
  constexpr int kBM = tile_rows(MW);
  constexpr int SB = stage_bytes<F, BN, L, MW>();
  constexpr int kWB = stage_weight_bytes<F, MW>();
  // Weight granules of a stage: per row a window of kWin (rows), or per 16-row tile a unit (tiled).
  constexpr int kGPer = stage_granules<F>();
  constexpr int kGRows = F::kTiled ? kBM / 16 : kBM;
  constexpr int kSlot = kGPer * 16;                               // bytes per weight row / tile in a stage
  constexpr int KW = (kGRows * kGPer + kThreads - 1) / kThreads;  // weight granules per thread
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int nst = p.cols / kK;
  __shared__ int64_t xrow[BN];
  if (threadIdx.x < BN) xrow[threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : -1;
  __syncthreads();

  // This thread's copies, fixed for the item: weight granule i = threadIdx.x + k * kThreads is granule
  // i % kWin of the 16-aligned window over row i / kWin's stage bytes; only granules holding some of
  // those bytes are copied (the window never reaches past the matrix: matmul_mma_supported). x granule
  // j is 8 halves of row (j / 16) % BN of level j / (16 BN).
  // Tiled: granule i is granule i % kGPer of tile i / kGPer's unit (the tile at 16 rows' bytes).
  // (32-bit offsets from it.w, kNone: nothing to copy; the granule's place is recomputed per stage, which
  // keeps registers for the mma.)
  constexpr uint32_t kNone = 0xffffffffu;
  uint32_t woff[KW];
#pragma unroll
  for (int k = 0; k < KW; ++k) {
    const int i = threadIdx.x + k * kThreads, r = i / kGPer;
    const int row = F::kTiled ? 16 * r : r;
    woff[k] = i < kGRows * kGPer && row < it.nrows ? static_cast<uint32_t>(row * p.row_bytes) : kNone;
  }
  // x granules (XSources: the row and level repeat every BN * 16 / kThreads granules, the lo level at lo_off
  // from hi).
  const XSources<BN> xsrc(p, it, xrow);
  constexpr int kXR = XSources<BN>::kXR;
  const int64_t lo_off = L == 2 ? p.xp.lo - p.xp.hi : 0;
  const int xdst0 = xsrc.r0 * kXStride + xsrc.q * 16;
  // L = 3: lo's E4M3 rows, 8 granules a row and stage: granule j = threadIdx.x + k * kThreads is granule j % 8 of
  // row j / 8 (null past the item's rows).
  static_assert(L != 3 || (BN * (kK / 16)) % kThreads == 0, "lo8 granules per thread");
  constexpr int kX8R = L == 3 ? BN * (kK / 16) / kThreads : 0;
  const uint8_t* x8src[kX8R > 0 ? kX8R : 1];
#pragma unroll
  for (int k = 0; k < kX8R; ++k) {
    const int j = threadIdx.x + k * kThreads, r = j / (kK / 16);
    x8src[k] = r < it.nr ? p.xp.lo8 + xrow[r] * p.xp.stride + (j % (kK / 16)) * 16 : nullptr;
  }
  auto load = [&](int st, int c) {
    uint8_t* base = smem + st * SB;
    if constexpr (F::kTiled) {
      const size_t off = static_cast<size_t>(c) * F::kTileBytes;
#pragma unroll
      for (int k = 0; k < KW; ++k) {
        if (woff[k] == kNone) continue;
        const int i = threadIdx.x + k * kThreads, r = i / kGPer, g16 = (i - r * kGPer) * 16;
        cp_async16(base + r * kSlot + g16, it.w + woff[k] + off + g16);
      }
    } else {
      const size_t off = static_cast<size_t>(c) * F::kRaw;
#pragma unroll
      for (int k = 0; k < KW; ++k) {
        if (woff[k] == kNone) continue;
        const int i = threadIdx.x + k * kThreads, r = i / kGPer, g16 = (i - r * kGPer) * 16;
        const uint8_t* src = it.w + woff[k] + off;
        const int o = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 15u);
        if (g16 < o + F::kRaw) cp_async16(base + r * kSlot + g16, src - o + g16);
      }
    }
    uint8_t* xs = base + kWB + 16 + xdst0;
#pragma unroll
    for (int lv = 0; lv < half_levels(L); ++lv)
#pragma unroll
      for (int k = 0; k < kXR; ++k)
        if (xsrc.src[k])
          cp_async16(xs + (lv * BN + k * XSources<BN>::kRowStep) * kXStride,
                     xsrc.src[k] + lv * lo_off + static_cast<int64_t>(c) * kK);
    uint8_t* x8 = base + kWB + 16 + BN * kXStride;
#pragma unroll
    for (int k = 0; k < kX8R; ++k) {
      const int j = threadIdx.x + k * kThreads;
      if (x8src[k]) cp_async16(x8 + (j / (kK / 16)) * kX8Stride + (j % (kK / 16)) * 16, x8src[k] + static_cast<int64_t>(c) * kK);
    }
  };
  // Where this warp's rows g and g + 8 of its m16 tile m start in their windows: (row address + stage
  // offset) & 15. Warp w holds rows 16 MW w + 16 m + (g, g + 8).
  const int wr0 = warp * 16 * MW;
  unsigned ra[MW][2];
#pragma unroll
  for (int m = 0; m < MW; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      ra[m][h] = static_cast<unsigned>(reinterpret_cast<uintptr_t>(it.w)) +
                 static_cast<unsigned>((wr0 + 16 * m + 8 * h + g) * p.row_bytes);

  float acc[MW][BN / 8][4];
#pragma unroll
  for (int m = 0; m < MW; ++m)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][j][i] = 0.0f;
  const int ntiles = (it.nr + 7) / 8;   // n8 tiles with rows
  const bool active = wr0 < it.nrows;   // this warp's weight rows hold any
  static_assert(BN % 16 == 0 && BN / 8 <= 8, "block_math's dispatch takes 1 .. 8 n8 tiles");

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
    const uint8_t* xs = base + kWB + 16;
    const unsigned so = F::kTiled ? 0u : static_cast<unsigned>(c) * F::kBlockBytes * 4;
    // The stage's 4 quant blocks against NT n8 tiles (one basic block: the next block's A fragments
    // decode while this one's mma run).
    auto stage = [&](auto nt) {
      constexpr int NT = decltype(nt)::value;
      // MW = 2: one quant block at a time (unrolled, the compiler keeps several blocks' A fragments live
      // and spills).
#pragma unroll(MW == 1 ? 4 : 1)
      for (int b = 0; b < 4; ++b) {
        // A fragments of the warp's MW m16 tiles for quant block b, and their rows' block scales.
        uint32_t a[MW][2][4];
        float d[MW][2];
#pragma unroll
        for (int m = 0; m < MW; ++m) {
          uint32_t af[2][2][2];  // [row g / g + 8][step][k lo / hi]
          if constexpr (F::kTiled) {
            F::frags_tile(base + (MW * warp + m) * kSlot, g, b, t, af, d[m]);
          } else {
#pragma unroll
            for (int h = 0; h < 2; ++h)
              d[m][h] = F::frag(base + (wr0 + 16 * m + 8 * h + g) * kSlot, static_cast<int>((ra[m][h] + so) & 15u), b,
                                t, af[h]);
          }
#pragma unroll
          for (int s = 0; s < 2; ++s)
            a[m][s][0] = af[0][s][0], a[m][s][1] = af[1][s][0], a[m][s][2] = af[0][s][1], a[m][s][3] = af[1][s][1];
        }
        block_math<L, MW, NT, BN>(a, d, xs, b, lane, acc);
      }
    };
    switch (ntiles) {  // the item's n8 tiles with rows: uniform over the block
      case 1: stage(std::integral_constant<int, 1>{}); break;
      case 2: stage(std::integral_constant<int, 2>{}); break;
      case 3: if constexpr (BN >= 24) stage(std::integral_constant<int, 3>{}); break;
      case 4: if constexpr (BN >= 32) stage(std::integral_constant<int, 4>{}); break;
      case 5: if constexpr (BN >= 40) stage(std::integral_constant<int, 5>{}); break;
      case 6: if constexpr (BN >= 48) stage(std::integral_constant<int, 6>{}); break;
      case 7: if constexpr (BN >= 56) stage(std::integral_constant<int, 7>{}); break;
      case 8: if constexpr (BN >= 64) stage(std::integral_constant<int, 8>{}); break;
      default: break;
    }
  }
  cp_async_wait<0>();
  if (active) store_sums<MW, BN>(p, it, xrow, warp, lane, acc);
  __syncthreads();  // xrow and the stages are free for the next item
}

}  // namespace ferry::cuda::mma
