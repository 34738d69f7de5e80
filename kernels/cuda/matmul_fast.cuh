// The thread-block body of the fast (q8_0 / mxfp4) matmul, shared by the plain matmul
// (matmul_fast.cu) and the grouped expert matmul (moe_grouped.cu), so both compute every output
// element with the same instructions in the same order (see matmul.cuh for that order).
//
// Thread block: a 16-row weight tile (16/O warps x O rows) against a group of NR activation rows. The K
// dimension runs in chunks of 512 columns = 16 quant blocks; lane l owns half h = l & 1 of block
// b = l >> 1 of every chunk (16 consecutive weights). Per chunk, cp.async copies the tile's weight
// bytes and the group's x columns into one of S shared-memory stages (S - 1 chunks in flight, so
// every SM keeps tens of KB of HBM reads outstanding), then each warp decodes its lane's 16 weights
// of its O rows into registers once and applies them to all NR rows of x. O changes which warp
// computes which row, never the arithmetic of an output. Where the NR activation rows are read from
// and the outputs written to is a policy (contiguous rows, or gathered / scattered ones): addresses
// only, never arithmetic.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/splitk.cuh"

namespace ferry::cuda::fast {

constexpr int kTileRows = 16;  // weight rows per thread block: O rows per warp, 16 / O warps
constexpr int kChunk = 512;  // columns per chunk: 32 lanes x 16 weights
constexpr size_t kStageBudget = 88 * 1024;  // shared memory aimed at per block (2 blocks per SM)

__device__ __forceinline__ float2 half2_bits_to_float2(uint32_t u) {
  return __half22float2(__halves2half2(__ushort_as_half(static_cast<unsigned short>(u & 0xffffu)),
                                       __ushort_as_half(static_cast<unsigned short>(u >> 16))));
}

// Lane constants of one format: where its 16 weights sit in a row chunk, the byte-permute selector
// that realigns them, and the x offsets (floats, within one x row of a stage) of its 4 groups of 4.
struct Lane {
  int blk;      // byte offset of the lane's quant block in the row chunk
  int word;     // 4-aligned byte offset of its first quant byte
  unsigned sel; // __byte_perm selector taking bytes sh..sh+3 of a word pair
  int xo[4];
};

__device__ __forceinline__ unsigned realign_sel(int sh) {
  return static_cast<unsigned>(sh | (sh + 1) << 4 | (sh + 2) << 8 | (sh + 3) << 12);
}

// mxfp4 (ggml block: e8m0 scale byte, 16 bytes of E2M1 nibbles; byte j holds elements j (low nibble)
// and j+16 (high nibble)). Lane half h takes quant bytes 8h..8h+7: elements 8h..8h+7, 16+8h..16+8h+7.
struct Mx {
  static constexpr int kChunkBytes = 16 * 17;  // 272
  // x granule (4 floats) of group g in a 32-column block, and the bank swizzle of block b: the 8
  // lanes of a quarter warp then read 8 different 16-byte bank groups.
  __device__ static int granule(int g, int h) { return (g & 1) + 2 * h + 4 * (g >> 1); }
  __device__ static int swz(int b) { return (b & 1) | ((b & 2) << 1); }
  __device__ static Lane lane(int b, int h) {
    Lane l;
    l.blk = 17 * b;
    const int off = 17 * b + 1 + 8 * h;
    l.word = off & ~3;
    l.sel = realign_sel(off & 3);
#pragma unroll
    for (int g = 0; g < 4; ++g) l.xo[g] = 32 * b + 4 * (granule(g, h) ^ swz(b));
    return l;
  }
  // Nibbles of one word to fp16 bit patterns: an E2M1 nibble s|ee|m placed as fp16 sign, exponent
  // bits 1..0 and mantissa bit 9 is exactly value * 2^-14, subnormals included (ee = 0 is the fp16
  // subnormal range). L: the low nibbles' high bytes; H: the high nibbles'.
  __device__ static void word(uint32_t q, float* lo, float* hi) {
    const uint32_t L = ((q << 1) & 0x0E0E0E0Eu) | ((q << 4) & 0x80808080u);
    const uint32_t H = ((q >> 3) & 0x0E0E0E0Eu) | (q & 0x80808080u);
    const float2 a = half2_bits_to_float2(__byte_perm(L, 0u, 0x1404u));
    const float2 b = half2_bits_to_float2(__byte_perm(L, 0u, 0x3424u));
    const float2 c = half2_bits_to_float2(__byte_perm(H, 0u, 0x1404u));
    const float2 d = half2_bits_to_float2(__byte_perm(H, 0u, 0x3424u));
    lo[0] = a.x, lo[1] = a.y, lo[2] = b.x, lo[3] = b.y;
    hi[0] = c.x, hi[1] = c.y, hi[2] = d.x, hi[3] = d.y;
  }
  // wv[0..15]: elements 8h+0..7 then 16+8h+0..7 (value * 2^-14); returns the factor that makes a sum
  // of them weight-scaled: weight = value * 2^(e-127) = wv * 2^(e-113).
  __device__ static float decode(const uint8_t* row, const Lane& l, float* wv) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(row + l.word);
    const uint32_t u0 = p[0], u1 = p[1], u2 = p[2];
    const unsigned e = row[l.blk];
    word(__byte_perm(u0, u1, l.sel), wv, wv + 8);
    word(__byte_perm(u1, u2, l.sel), wv + 4, wv + 12);
    if (e <= 240u) return __uint_as_float((e + 14u) << 23);
    // 2^(e-113) would overflow a float: move 2^(e-240) into the (exact) decoded values instead.
    const float k = __uint_as_float((e - 240u + 127u) << 23);
#pragma unroll
    for (int i = 0; i < 16; ++i) wv[i] *= k;
    return __uint_as_float(254u << 23);  // 2^127
  }
};

// q8_0 (ggml block: fp16 scale d, 32 int8). Lane half h takes quants 16h..16h+15.
struct Q8 {
  static constexpr int kChunkBytes = 16 * 34;  // 544
  __device__ static int granule(int g, int h) { return 4 * h + g; }
  __device__ static int swz(int b) { return b & 3; }
  __device__ static Lane lane(int b, int h) {
    Lane l;
    l.blk = 34 * b;
    const int off = 34 * b + 2 + 16 * h;
    l.word = off & ~3;
    l.sel = realign_sel(off & 3);
#pragma unroll
    for (int g = 0; g < 4; ++g) l.xo[g] = 32 * b + 4 * (granule(g, h) ^ swz(b));
    return l;
  }
  // int8 -> float exactly: the byte with its sign bit flipped (q + 128) under the exponent of 2^23
  // is the float 2^23 + q + 128.
  __device__ static float decode(const uint8_t* row, const Lane& l, float* wv) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(row + l.word);
    uint32_t u[5];
#pragma unroll
    for (int i = 0; i < 5; ++i) u[i] = p[i];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t q = __byte_perm(u[j], u[j + 1], l.sel) ^ 0x80808080u;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        wv[4 * j + i] = __uint_as_float(__byte_perm(q, 0x4B000000u, 0x7650u + static_cast<unsigned>(i))) - 8388736.0f;
    }
    return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(row + l.blk)));
  }
};

template <class F, int NR>
__host__ __device__ constexpr size_t stage_bytes() {
  return size_t{kTileRows} * F::kChunkBytes + 16 + sizeof(float) * NR * kChunk;  // +16: realign over-read
}
// Stages of a block whose stage memory aims at `budget` bytes (3 to 8 stages).
template <class F, int NR>
__host__ __device__ constexpr int stages(size_t budget = kStageBudget) {
  const size_t s = budget / stage_bytes<F, NR>();
  return s < 3 ? 3 : s > 8 ? 8 : static_cast<int>(s);
}

// Blocks per SM the one-row kernel is compiled for (register cap 65536 / (128 x this)):
// it is bound by instruction issue, so more resident warps help. mxfp4 at one row needed 123-141
// registers (3 blocks per SM); 4 blocks (128 registers) cost no spills, 5 would (ptxas -v); two rows
// would spill at 4.
template <class F, int NR>
constexpr int min_blocks() {
  return NR == 1 ? 4 : 1;
}

// One work item: a 16-row weight tile against a group of nr (<= NR) activation rows, over the columns
// [k0, k1) (all of them, or part `part` of a split K: splitk.cuh). Which rows and which weight is the
// problem's business (PlainProblem, the grouped expert problem of moe_grouped.cu): c, r0 and z are its
// coordinates; w points at the tile's first weight row. A split item stores partials where the problem
// says (p.part_row, p.counter) and the last of its parts writes y.
struct Item {
  const uint8_t* w;
  int row0;   // the tile's first weight row (output column)
  int nrows;  // valid weight rows in the tile (16 but at the matrix's end)
  int nr;     // activation rows in the group
  int c, r0, z;
  int k0, k1;     // columns (multiples of kChunk)
  int part, parts;  // which part of the split K (parts == 1: no split)
};

// This thread's share of the copies into a stage: fixed 16-byte granules of the weight tile (granule
// i = threadIdx.x + k * kThreads of the 16 x kChunkBytes chunk) and granule threadIdx.x of every x row.
// The granules' stage offsets are set once per block and their source addresses once per item, so a
// chunk costs a few adds and cp.async per thread (the plain loop divided by the granule count and built
// 64-bit addresses per granule: dropping it cut the executed instructions at one row by 12 %, Nsight
// Compute, 2026-12-01).
template <class F, int NR, int kThreads>
struct Loader {
  static_assert(kThreads == kChunk / 4, "one x granule per thread and row");
  static constexpr int G = F::kChunkBytes / 16;
  static constexpr int KW = (kTileRows * G + kThreads - 1) / kThreads;
  const uint8_t* src[KW];  // granule k of chunk 0 of the current item, nullptr: none
  int dst[KW];             // its offset in a stage
  int xdst;                // offset (floats) of this thread's x granule in a stage's x row
  const float** xtab;      // shared: two tables of the x rows of an item (the current one: xcur)
  int xcur = 0;

  __device__ void init() {
#pragma unroll
    for (int k = 0; k < KW; ++k) {
      const int i = threadIdx.x + k * kThreads, rr = i / G;
      dst[k] = rr * F::kChunkBytes + (i - rr * G) * 16;
    }
    const int g = threadIdx.x, b = g >> 3;
    xdst = 32 * b + 4 * ((g & 7) ^ F::swz(b));
  }
  // The loader moves to item `it` (all threads together: it synchronises the block). Its x row
  // pointers go to the other table, so threads still copying from the last item are not disturbed.
  template <class P>
  __device__ void set(const P& p, const Item& it) {
    xcur ^= 1;
    if (threadIdx.x < NR) xtab[xcur * NR + threadIdx.x] = threadIdx.x < it.nr ? p.xrow(it, threadIdx.x) : nullptr;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < KW; ++k) {
      const int i = threadIdx.x + k * kThreads, rr = i / G;
      src[k] = i < kTileRows * G && rr < it.nrows ? it.w + static_cast<size_t>(rr) * p.row_bytes + (i - rr * G) * 16
                                                  : nullptr;
    }
  }
  // Chunk c of item it into stage st.
  template <class P>
  __device__ void load(const P& p, const Item& it, uint8_t* st, int c) const {
    const size_t off = static_cast<size_t>(c) * F::kChunkBytes;
#pragma unroll
    for (int k = 0; k < KW; ++k)
      if (src[k]) cp_async16(st + dst[k], src[k] + off);
    float* xs = reinterpret_cast<float*>(st + kTileRows * F::kChunkBytes + 16);
#pragma unroll
    for (int r = 0; r < NR; ++r)
      if (r < it.nr)
        cp_async16(xs + r * kChunk + xdst, xtab[xcur * NR + r] + static_cast<int64_t>(c) * kChunk + 4 * threadIdx.x);
  }
};

// The block's work: items first..last-1 in order, as one stream of chunks through S shared-memory
// stages (S - 1 chunks in flight), so the copies of the next item overlap the arithmetic of this one
// and the pipeline never drains between tiles. Per item, weight rows warp * O + o of the tile against
// the item's nr activation rows; each output's arithmetic is the fixed order of matmul.cuh, whichever
// block or position in the stream computes it.
template <class F, int NR, int O, int S, class P>
__device__ __forceinline__ void items_body(const P& p, int first, int last, uint8_t* smem) {
  constexpr int kThreads = kTileRows / O * 32;
  constexpr int SB = static_cast<int>(stage_bytes<F, NR>());
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const Lane ln = F::lane(lane >> 1, lane & 1);

  __shared__ const float* xtab[2 * NR];
  Loader<F, NR, kThreads> ld;
  ld.init();
  ld.xtab = xtab;
  int lj = first, lc = 0, ls = 0;  // the loader: item, chunk (of the row), stage
  Item li = lj < last ? p.item(lj) : Item{};
  if (lj < last) {
    ld.set(p, li);
    lc = li.k0 / kChunk;
  }
  auto load_next = [&] {
    if (lj < last) {
      ld.load(p, li, smem + ls * SB, lc);
      if (++lc == li.k1 / kChunk) {
        if (++lj < last) {
          li = p.item(lj);
          ld.set(p, li);
          lc = li.k0 / kChunk;
        }
      }
      if (++ls == S) ls = 0;
    }
    cp_async_commit();
  };
  for (int s = 0; s < S - 1; ++s) load_next();

  int cs = 0;  // the stage being computed
  for (int j = first; j < last; ++j) {
    const Item it = p.item(j);
    float acc[O][NR];
#pragma unroll
    for (int o = 0; o < O; ++o)
#pragma unroll
      for (int r = 0; r < NR; ++r) acc[o][r] = 0.0f;

    for (int c = it.k0 / kChunk; c < it.k1 / kChunk; ++c) {
      cp_async_wait<S - 2>();  // this thread's copies of this chunk are done
      __syncthreads();         // everyone's are; everyone is done with the previous chunk's stage
      load_next();
      const uint8_t* st = smem + cs * SB;
      if (++cs == S) cs = 0;
      const float* xs = reinterpret_cast<const float*>(st + kTileRows * F::kChunkBytes + 16);
      float wv[O][16], sc[O];
#pragma unroll
      for (int o = 0; o < O; ++o) sc[o] = F::decode(st + (warp * O + o) * F::kChunkBytes, ln, wv[o]);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        float xv[16];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const float4 q = *reinterpret_cast<const float4*>(xs + r * kChunk + ln.xo[g]);
          xv[4 * g] = q.x, xv[4 * g + 1] = q.y, xv[4 * g + 2] = q.z, xv[4 * g + 3] = q.w;
        }
        // The fixed order: 16 products of this lane's half block in index order, then one scaled add.
#pragma unroll
        for (int o = 0; o < O; ++o) {
          float s = 0.0f;
#pragma unroll
          for (int k = 0; k < 16; ++k) s = fmaf(xv[k], wv[o][k], s);
          acc[o][r] = fmaf(s, sc[o], acc[o][r]);
        }
      }
    }

    // Fixed butterfly over the 32 lanes (every lane ends with the same bits: IEEE addition commutes).
    // A part of a split K stores its partial; the last part to finish adds them (splitk.cuh).
#pragma unroll
    for (int o = 0; o < O; ++o) {
      const int row = warp * O + o;
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        float v = acc[o][r];
#pragma unroll
        for (int m = 16; m >= 1; m >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
        if (lane == ((o * NR + r) & 31) && r < it.nr && row < it.nrows) splitk::store(p, it, r, row, v);
      }
    }
    splitk::finish<kTileRows>(p, it);
  }
  cp_async_wait<0>();
}

// Items [first, last) of block b when nitems items are spread over nblocks blocks in contiguous runs
// (neighbouring tiles of one matrix stay in one block).
// One item per block (the default grid) skips the 64-bit divisions: a few hundred instructions per
// block, a tenth of a 7-chunk tile's work at one row.
__device__ __forceinline__ void block_items(int64_t nitems, int64_t nblocks, int& first, int& last) {
  const int64_t b = blockIdx.x;
  if (nblocks == nitems) {
    first = static_cast<int>(b);
    last = first + 1;
    return;
  }
  first = static_cast<int>(b * nitems / nblocks);
  last = static_cast<int>((b + 1) * nitems / nblocks);
}

// The plain matmul's problem: item j = (row group, weight tile, part of K) of a contiguous x [n, cols]
// and y [n, rows], parts fastest (a tile's parts run in neighbouring blocks), then tiles.
struct PlainProblem {
  const uint8_t* w;
  size_t row_bytes;
  int rows, cols;
  const float* x;
  float* y;
  int64_t n;
  int group;   // NR
  int ntiles;  // ceil(rows / 16)
  int parts = 1, unit = kChunk;  // the split of K (matmul_kparts)
  splitk::Bufs sk;
  __device__ Item item(int j) const {
    Item it;
    const int q = j / parts;
    it.part = j - q * parts;
    it.parts = parts;
    splitk::range(cols, unit, it.part, parts, it.k0, it.k1);
    const int grp = q / ntiles, tile = q - grp * ntiles;
    it.c = grp * ntiles + tile;  // the counter of a split item
    it.z = 0;
    it.r0 = grp * group;
    it.row0 = tile * kTileRows;
    it.w = w + static_cast<size_t>(it.row0) * row_bytes;
    it.nrows = min(kTileRows, rows - it.row0);
    it.nr = static_cast<int>(min(static_cast<int64_t>(group), n - it.r0));
    return it;
  }
  __device__ const float* xrow(const Item& it, int r) const { return x + static_cast<int64_t>(it.r0 + r) * cols; }
  __device__ float* yrow(const Item& it, int r) const { return y + static_cast<int64_t>(it.r0 + r) * rows; }
  __device__ int64_t part_stride() const { return n * rows; }
  __device__ float* part_row(const Item& it, int q, int r) const {
    return sk.part + q * part_stride() + static_cast<int64_t>(it.r0 + r) * rows;
  }
  __device__ int* counter(const Item& it) const { return sk.cnt + it.c; }
};

}  // namespace ferry::cuda::fast
