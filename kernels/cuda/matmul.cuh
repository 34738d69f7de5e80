// Matmul and embedding kernels of the CUDA back-end.
//
// y[r, o] = dot(x[r, :], W[o, :]) in kernels/cpu/dot.hpp's order: lane l of one warp accumulates
// columns l, l+32, ... in increasing order (separately rounded multiply and add), then the 32 lanes
// fold pairwise. Each output element is computed by one warp lane set whatever the row count, so a row's
// result is bit-identical alone or in a block -- and equal to the CPU back-end's bits, because weights
// decode exactly (q8_0: int8 x fp16; mxfp4: small integer x 2^k) on both.
//
// Weights are read once per group of rows: a thread block of 4 warps stages a chunk of 1024 columns of
// the group's x rows in shared memory; each warp copies the chunk's bytes of its 2 weight rows into
// shared memory with 16-byte loads and applies every decoded element to all rows of the group (up to
// 16 rows for mxfp4 experts, 8 for q8_0 and f32; larger calls run further groups as grid rows).
//
// Measured on the H200 (2026-11-29, tests/gpu MatmulBench, graph replays, weights rotated past L2):
//   mxfp4 3072x3584 (5.5 MB, floor 1.22 us at 4.8 TB/s): n=1 25 us (233 GB/s), n=16 89 us (65 GB/s)
//   q8_0 7168x7168 (54.6 MB, floor 11.4 us):             n=1 43 us (1270 GB/s), n=16 375 us (145 GB/s)
// Nsight Compute: instruction-issue bound, not memory bound (DRAM 5% / 27% busy). Keeping the CPU's
// lane order (lane l owns columns l mod 32) gives one warp per weight row at most -- 1536 warps for
// the expert, 0.3 waves -- and ~35 instructions per 32 weights (byte decode from shared memory, one
// multiply and one add per row). The next step is a different fixed order (each lane owning 16-32
// contiguous weights from 16-byte loads, a fixed shuffle tree, FMA): still row-invariant, no longer
// bit-identical to the CPU back-end.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.hpp"

namespace ferry::cuda {

// Rows per group (one weight read serves this many rows) for a weight type.
int matmul_group_rows(WType t);

// Launch y = x @ W^T on `stream` (all pointers device memory).
void launch_matmul(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t stream);

// y[i] = decoded row ids[i] of the table; ids are device memory and already range-checked.
void launch_embed(const Weight& table, const int32_t* ids, int64_t n, float* y, cudaStream_t stream);

}  // namespace ferry::cuda
