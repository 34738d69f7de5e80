// Matmul and embedding kernels of the CUDA back-end.
//
// y[r, o] = dot(x[r, :], W[o, :]) with a FIXED reduction order per output element that depends only
// on the weight (type, shape, alignment), never on the row count n, so a row's result is bit-identical
// alone or in a block of 16. Two paths, chosen by matmul_fast_supported():
//
// 1. Fast path (matmul_fast.cu: q8_0 and mxfp4, cols % 512 == 0, 16-byte aligned weight and x; every
//    spine and expert matrix of the real models). K runs in chunks of 512 columns = 16 quant blocks;
//    lane l of the warp that owns a weight row takes half (l & 1) of block (l >> 1) of every chunk.
//    Per chunk and row the lane forms s = sum of its 16 products x*q in index order (one FMA chain; q
//    the block's exact small integers / E2M1 values * 2^-14), then acc = fma(s, block scale, acc);
//    chunks in increasing K; finally a fixed xor butterfly (16, 8, 4, 2, 1) over the 32 lanes.
//    Weights are read once per group of up to 16 rows (mxfp4) / 8 rows (q8_0): a thread block of 4
//    warps x 4 weight rows stages each chunk's weight bytes and the group's x columns in shared memory
//    with cp.async (several chunks in flight), decodes each weight once and applies it to every row.
//    This order differs from the CPU back-end's, so results agree with it to ~1e-6 relative, not bits.
//
// 2. Generic path (below, f32 weights and other shapes): kernels/cpu/dot.hpp's order (lane l
//    accumulates columns l, l+32, ... with separately rounded multiply and add, then the lanes fold
//    pairwise), bit-identical to the CPU back-end. A block of 4 warps stages chunks of 1024 columns of
//    the group's x rows in shared memory, each warp stages its 2 weight rows' bytes.
//
// Measured on the H200 (tests/gpu MatmulBench, graph replays, weights rotated past L2):
//   before (generic path for everything, 2026-11-29):
//     mxfp4 3072x3584 (5.5 MB, floor 1.22 us at 4.8 TB/s): n=1 25 us (233 GB/s), n=16 89 us
//     q8_0 7168x7168 (54.6 MB, floor 11.4 us):             n=1 43 us (1270 GB/s), n=16 375 us
//   Nsight Compute then: instruction-issue bound (one warp per weight row, byte decode per lane,
//   separate multiply and add), 18% occupancy. The fast path's numbers: docs/BENCHMARKS.md and the
//   cudaperf report (MatmulBench prints them).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.hpp"

namespace ferry::cuda {

// Rows per group (one weight read serves this many rows) for a weight type.
int matmul_group_rows(WType t);

// Whether the fast path takes this weight and x (type, cols % 512, alignment).
bool matmul_fast_supported(const Weight& w, const float* x);
// Benchmark knob of the fast path: weight rows per warp (1, 2 or 4; 0 = the default per row count).
// It changes speed only, never results.
void matmul_fast_tune(int rows_per_warp);
// The fast path (matmul_fast.cu); only for matmul_fast_supported(w, x).
void launch_matmul_fast(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t stream);

// Launch y = x @ W^T on `stream` (all pointers device memory).
void launch_matmul(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t stream);

// y[i] = decoded row ids[i] of the table; ids are device memory and already range-checked.
void launch_embed(const Weight& table, const int32_t* ids, int64_t n, float* y, cudaStream_t stream);

}  // namespace ferry::cuda
