// The q8_0 tiles' prompt kernel on wgmma (sm_90a): matmul_q8t.cuh's prompt_body with two 16-row tiles a
// warp and x as hi + lo, its per-block mma.sync chains replaced by one wgmma.m64n64k16 chain per warpgroup
// and tile (A, the decoded weights, from registers as before; x from shared memory through a descriptor).
// The same bits as prompt_body: each output's chain (hi's two k16 steps, then lo's, into a fresh sum) is
// the same, and the H100 gives a wgmma chain the bits of the mma.sync chain over the same fragments
// (GPU test Ops.WgmmaProbe*, 2026-12-06). Off until measured (FERRY_Q8T_PROMPT_WGMMA=1,
// matmul_q8t_prompt_wgmma_tune(1)). NOT RUN ON A GPU YET: built after the 2026-12-06 session's device time
// was spent; the GPU test Ops.Q8TilesMatmulMatchesCpuForEverySplitAndKeepsRowBits (its "wgmma, 2 tiles a
// warp" case) compares its bits with the mma.sync kernel's, and AllSameBitsSwitches turns it on in the model
// tests. First order (no overlap yet): per quant block, both tiles' 4 wgmma of a warpgroup, wait, then the
// scale fmas; x copied in 4-byte pieces into the tiles' k order (a prep_x order for it would make them 16).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/matmul_mma.cuh"

namespace ferry::cuda {

// p as launch_matmul_q8t_prompt builds it (x with hi and lo); sets the item grouping (256-row tiles, row
// groups of 64) and launches on st; overlap: the two tiles' batches take turns (one runs while the other's
// sums are scaled), else both are waited for each quant block.
void launch_q8t_prompt_wgmma(mma::PlainTc p, cudaStream_t st, bool overlap);

}  // namespace ferry::cuda
