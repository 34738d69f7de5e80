// A matmul's K dimension split over several thread blocks, with a fixed order (both decode-step
// matmuls: the CUDA-core kernel of matmul_fast.cuh and the tensor-core one of matmul_dec.cuh).
//
// Why: a decode step's matmul has one activation row, so its work is the weight tiles alone. A matrix
// of few rows gives few tiles (128x7168: 8 tiles of 16 rows for 132 SMs, 15-17 us for a 1 MB read on
// the H200), and a 7,168-row one gives 448 (3.4 per SM: the SMs with 4 finish last). Cutting each tile's
// columns into P parts gives P times the items, each streaming 1/P of the row.
//
// Order, and why a row's bits still depend only on the row: part p of a tile covers the columns
// [p * u / P, (p + 1) * u / P) units of `unit` columns (u = cols / unit), computes its partial sums with
// the kernel's own order over those columns and stores them; the last of the P blocks to finish
// (a per-(tile, row group) counter) adds the partials in part order, v = ((p0 + p1) + p2) ..., and writes
// y. P and the unit are functions of the weight alone (matmul_kparts, matmul.cu), never of the row count
// or of which block finishes last, so a row alone has the bits of the row in a block of 16; P = 1 is the
// kernel without a split, bit for bit. The unit (1,024 columns where cols % 1024 == 0, else 512) is a
// multiple of every stage width of both kernels, so a part starts on a stage boundary of each.
//
// The partials live in a scratch buffer [P][n][rows]; the counters in a zeroed buffer of one int per
// (tile, row group), which the last block resets to 0, so they are zero again for the next launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda::splitk {

// The split of one matmul call: its parts and their unit (matmul_ksplit), and with more than one part
// the scratch (device memory, from the back-end): partials [parts][n][rows] and counters, one per
// (16-row tile, row group), all zero between launches.
struct Bufs {
  int parts = 1;
  int unit = 1024;
  float* part = nullptr;
  int* cnt = nullptr;
  int stream = 0;  // the stream split's workers (below), 0 for the uniform split above
};

// The stream split (q8_0 tiles' decode kernel, matmul_q8t.cu q8t_stream_kernel). A matrix of T 16-row tiles
// of U units each (256 columns) is L = T x U units in tile-major order, dealt to W workers (thread blocks)
// as equal runs: worker b takes units [b L / W, (b + 1) L / W). A worker's run covers parts of one or more
// tiles; a tile's parts are the pieces the workers' boundaries cut it into, numbered in column order, and are
// added in that order as any split's (finish below). Why: a matrix of 448 tiles (7,168 rows) is one partial
// wave of 528 block slots (4 a SM on 132 SMs): 52 SMs stream 4 tiles while 80 stream 3, and the 4-tile SMs
// decide the time. With W = 528 every slot streams the same bytes. W is a constant (kStreamWorkers), not the
// GPU's SM count, so the parts, and the bits, are a function of the weight's shape alone.
constexpr int kStreamWorkers = 528;
// The worker whose run holds unit x (the largest b with b L / W <= x).
__host__ __device__ inline int64_t stream_worker(int64_t x, int64_t L, int64_t W) { return ((x + 1) * W - 1) / L; }
__host__ __device__ inline int64_t stream_start(int64_t b, int64_t L, int64_t W) { return b * L / W; }
// The most parts any tile of U units gets when L units are dealt to W workers.
inline int stream_max_parts(int64_t L, int64_t U, int64_t W) { return static_cast<int>((U + L / W - 1) / (L / W)) + 1; }

// Columns [k0, k1) of part `part` of `parts` for a row of `cols` columns cut in units of `unit` (the
// last part ends at cols; one part is the whole row).
__host__ __device__ inline void range(int cols, int unit, int part, int parts, int& k0, int& k1) {
  const int u = cols / unit;
  k0 = part * u / parts * unit;
  k1 = part == parts - 1 ? cols : (part + 1) * u / parts * unit;
}

#ifdef __CUDACC__  // the device side (this header is also read by host code for Bufs)
// Called by every thread of the block after it stored its partials: true in the block that finishes
// the item's parts (its partials and all others are then visible to it). That block resets the counter.
__device__ __forceinline__ bool last_part(int* cnt, int parts) {
  __shared__ int last;
  __threadfence();  // this thread's partials are visible device-wide before the count says so
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(cnt, 1);
    last = done == parts - 1;
    if (last) *cnt = 0;  // every part has arrived: nothing in this launch touches it again
  }
  __syncthreads();
  const bool l = last;
  if (l) __threadfence();
  __syncthreads();  // `last` may be written again by this block's next item
  return l;
}

// Output (r, row) of item it of problem p (p.yrow, p.part_row, p.counter): y itself, or
// this part's partial when K is split.
template <class P, class I>
__device__ __forceinline__ void store(const P& p, const I& it, int r, int row, float v) {
  if (it.parts == 1)
    p.yrow(it, r)[it.row0 + row] = v;
  else
    __stcg(p.part_row(it, it.part, r) + it.row0 + row, v);
}

// Called by every thread of the block after the item's outputs were stored: where K is split, the block
// that finishes the item's parts writes y, each output the sum of its parts' partials in part order
// (read past L1: other blocks wrote them). kTile: weight rows per item.
template <int kTile, class P, class I>
__device__ __forceinline__ void finish(const P& p, const I& it) {
  if (it.parts == 1 || !last_part(p.counter(it), it.parts)) return;
  for (int e = threadIdx.x; e < it.nr * kTile; e += blockDim.x) {
    const int r = e / kTile, row = e - r * kTile;
    if (row >= it.nrows) continue;
    float v = __ldcg(p.part_row(it, 0, r) + it.row0 + row);
    for (int q = 1; q < it.parts; ++q) v = __fadd_rn(v, __ldcg(p.part_row(it, q, r) + it.row0 + row));
    p.yrow(it, r)[it.row0 + row] = v;
  }
}
#endif

}  // namespace ferry::cuda::splitk
