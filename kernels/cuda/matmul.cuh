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
// Measured on the H200 (tests/gpu MatmulBench: graph replays of 96 calls, weights rotated past L2;
// floor = bytes / 4.8 TB/s; device copy measured 4.25 TB/s), 2026-11-29, time in us (GB/s):
//   rows n                        1            2            4            8            16
//   mxfp4 3072x3584 (5.5 MB, floor 1.22 us)
//     before (generic path)   25.1 (233)   28.7 (204)   35.2 (166)   56.3 (104)   89.4 (65)
//     after (fast path)        6.9 (845)    8.9 (657)   12.4 (473)   17.5 (334)   28.4 (206)
//   q8_0 7168x7168 (54.6 MB, floor 11.4 us)
//     before (generic path)   43.0 (1270)  65.4 (835) 100.1 (545)  214.1 (255)  375.4 (145)
//     after (fast path)       27.9 (1959)  33.9 (1610) 40.1 (1362)  58.8 (929)   95.4 (572)
// The fast path is still instruction-bound at one row: more warps per SM (O = 1 in matmul_fast.cu)
// made it slower. Per weight it spends ~3 instructions on decode (nibble -> fp16 bits -> float, or
// byte -> float) besides the FMA, plus shared-memory loads, cp.async address arithmetic and one
// barrier per 512-column chunk. Next steps: cheaper decode and staging, then Nsight Compute on
// matmul_fast_kernel (not yet profiled).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.hpp"

namespace ferry::cuda {

// Rows per group (one weight read serves this many rows) for a weight type.
int matmul_group_rows(WType t);

// Whether the fast path takes this weight and x (type, cols % 512, alignment).
bool matmul_fast_supported(const Weight& w, const float* x);
// Benchmark knobs of the fast path (plain matmul and grouped expert matmul): spread (0 = default, 1 =
// one work item per thread block, 2 = a grid of resident blocks each walking a run of items) and stage
// depth (0 = default, 1 = deep, 2 = shallow). They change speed only, never results.
void matmul_fast_tune(int spread, int depth);
// The launchers' choices under the knobs: shallow stages? and the grid for nitems work items when
// per_sm blocks fit on an SM. q8: the weight type is q8_0 (else mxfp4).
bool fast_shallow(bool q8);
int64_t fast_grid(int64_t nitems, int per_sm, bool q8);
// The fast path (matmul_fast.cu); only for matmul_fast_supported(w, x).
void launch_matmul_fast(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t stream);

// Launch y = x @ W^T on `stream` (all pointers device memory).
void launch_matmul(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t stream);

// y[i] = decoded row ids[i] of the table; ids are device memory and already range-checked.
void launch_embed(const Weight& table, const int32_t* ids, int64_t n, float* y, cudaStream_t stream);

}  // namespace ferry::cuda
