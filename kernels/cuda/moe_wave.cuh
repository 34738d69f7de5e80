// The grouped expert matmuls' work items (moe_grouped.cu), shared with the sm_90a wave kernel
// (sm90a/mxt_wave_wgmma.cuh): a table's items, their x and output rows, and a prompt pass's wave of tables
// in one launch (WaveTc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/moe.cuh"

namespace ferry::cuda {

constexpr int kMmaBN = 32;  // a prompt pass's row groups: 1,024 rows give each of 896 experts ~18 rows

// Item j of table t (nb row groups, tiles of bm rows: ntiles a matrix of `rows` x `cols`): (z, row group of
// `group` rows of a piece, weight tile), z-major, then the pieces' row groups, then tiles, so a block's
// contiguous run of items walks neighbouring tiles of one expert's weight; the weight of z is
// t.w[piece][which + z]. It: fast::Item (the CUDA-core kernel) or mma::Item (the tensor-core kernels).
// 32-bit indices: a launch has fewer than 2^31 items (its grid's x size).
template <class It>
__device__ __forceinline__ It table_item(const GroupTable& t, int j, int nb, int ntiles, int group, int bm, int rows,
                                         int cols, int which, size_t row_bytes) {
  It it;
  const int per_z = nb * ntiles;
  it.z = j / per_z;
  const int rem = j - it.z * per_z;
  const int yb = rem / ntiles, tile = rem - yb * ntiles;
  const int c = t.piece[yb];
  it.c = c;
  it.r0 = (yb - t.bstart[c]) * group;
  it.nr = min(group, t.m[c] - it.r0);  // >= 1: piece c has ceil(m / group) row groups
  it.row0 = tile * bm;
  it.nrows = min(bm, rows - it.row0);
  it.w = t.w[c][which + it.z] + static_cast<size_t>(it.row0) * row_bytes;
  it.k0 = 0;
  it.k1 = cols;
  it.part = 0;
  it.parts = 1;  // expert weights are never split (moe.cu runs a batch with a split weight per expert)
  return it;
}

// Row r of item it of table t: x rows are prepared rows (gate / up: the layer input's, t.src; down: the
// wave's intermediate, base + i); outputs go to g / u at base + i (gate / up) or to y at t.dst (down).
template <class It>
__device__ __forceinline__ int64_t table_xrow(const GroupTable& t, int which, const It& it, int r) {
  const int i = t.loc[it.c] + it.r0 + r;
  return which == 0 ? static_cast<int64_t>(t.src[i]) : static_cast<int64_t>(t.base) + i;
}
template <class It>
__device__ __forceinline__ float* table_yrow(const GroupTable& t, int which, float* const y[2], int rows, const It& it,
                                             int r) {
  const int i = t.loc[it.c] + it.r0 + r;
  return which == 0 ? y[it.z] + (static_cast<int64_t>(t.base) + i) * rows : y[0] + static_cast<int64_t>(t.dst[i]) * rows;
}

// ---- a prompt pass's wave in one launch per step (moe.cuh WaveLaunch) ----------------------------------
// Item j of the wave: table k with start[k] <= j < start[k + 1], then that table's item j - start[k]
// (table_item, as GroupTc). The tables are read from device memory.
struct WaveTc {
  const GroupTable* tabs;
  int ntab;
  int start[kWaveTables + 1];  // first item of each table
  int which;
  size_t row_bytes;
  int rows, cols;
  mma::XPrep xp;
  float* y[2];
  int ntiles;
  int group;
  int bm;
  __device__ mma::Item item(int64_t j) const {
    int lo = 0, hi = ntab;  // the last k with start[k] <= j
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (start[mid] <= j) lo = mid; else hi = mid;
    }
    const GroupTable& t = tabs[lo];
    mma::Item it = table_item<mma::Item>(t, static_cast<int>(j - start[lo]), t.bstart[t.ncalls], ntiles, group, bm,
                                         rows, cols, which, row_bytes);
    it.tab = lo;
    return it;
  }
  __device__ int64_t xrow(const mma::Item& it, int r) const { return table_xrow(tabs[it.tab], which, it, r); }
  __device__ float* yrow(const mma::Item& it, int r) const { return table_yrow(tabs[it.tab], which, y, rows, it, r); }
};

}  // namespace ferry::cuda
