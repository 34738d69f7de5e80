// Shared by the two tile layouts' in-place repacks (matmul_q8t.cuh's q8_0 tiles, matmul_mxt.cuh's
// mxfp4 tiles): both keep each 16-row tile in its place, so a weight is repacked a run of whole tiles at a
// time through a scratch copy of that run.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "io/errors.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace ferry::cuda {

constexpr int kPackTileRows = 16;

// Scratch bytes for repacking weights of up to `need` bytes whose tiles are at most `tile` bytes: whole
// tiles, at least one, at most 64 MB (inside the memory plan's margin) and no more than needed.
inline size_t tile_pack_scratch_bytes(size_t need, size_t tile) {
  return std::min(need, std::max(tile, size_t{64} << 20) / tile * tile);
}

// Repacks w's tiles in place: copies up to scratch_bytes of whole tiles at a time to scratch on st, then
// pack(src, dst, tiles) launches the layout's kernel writing those tiles from src (raw rows) to dst (their
// place in w). what names the layout in the error for a scratch smaller than one tile.
template <class Pack>
void repack_tiles(const Weight& w, void* scratch, size_t scratch_bytes, cudaStream_t st, const char* what, Pack pack) {
  const size_t tile_bytes = w.row_bytes() * kPackTileRows;
  if (scratch_bytes < tile_bytes)
    throw LimitError(std::string(what) + ": a scratch of " + std::to_string(scratch_bytes) + " bytes");
  const int64_t ntiles = w.rows / kPackTileRows;
  const int64_t per = static_cast<int64_t>(scratch_bytes / tile_bytes);
  auto* base = static_cast<uint8_t*>(const_cast<void*>(w.data));
  for (int64_t t0 = 0; t0 < ntiles; t0 += per) {
    const int64_t n = std::min(per, ntiles - t0);
    uint8_t* at = base + static_cast<size_t>(t0) * tile_bytes;
    copy_async(scratch, at, static_cast<size_t>(n) * tile_bytes, cudaMemcpyDeviceToDevice, st);
    pack(static_cast<const uint8_t*>(scratch), at, n);
  }
}

#ifdef __CUDACC__
// The frame of a layout's pack kernel, one thread per 16-byte granule of the packed tiles [0, tiles): src
// holds those tiles' raw rows, dst their place in the weight. Granule gr of unit u of a tile is at
// u * kUnitBytes + gr * 16 inside the tile; fill(rows, gr, u, out) writes its 16 bytes from the tile's raw
// rows (kPackTileRows of row_bytes each).
template <int kGranules, int kUnitBytes, class Fill>
__device__ __forceinline__ void pack_granule(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                                             int64_t tiles, int units, size_t row_bytes, Fill fill) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tiles * units * kGranules) return;
  const int gr = static_cast<int>(idx % kGranules);
  const int64_t tu = idx / kGranules;
  const int u = static_cast<int>(tu % units);
  const int64_t tile = tu / units;
  uint8_t out[16];
  fill(src + static_cast<size_t>(tile) * kPackTileRows * row_bytes, gr, u, out);
  uint4 v;
  memcpy(&v, out, 16);
  *reinterpret_cast<uint4*>(dst + static_cast<size_t>(tile) * kPackTileRows * row_bytes +
                             static_cast<size_t>(u) * kUnitBytes + gr * 16) = v;
}
#endif

}  // namespace ferry::cuda
