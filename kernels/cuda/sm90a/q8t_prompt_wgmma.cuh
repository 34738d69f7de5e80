// The q8_0 tiles' prompt kernel on wgmma (sm_90a): matmul_q8t.cuh's prompt_body with two 16-row tiles a
// warp and x as hi + lo (or hi only, mma_levels() 1), its per-block mma.sync chains replaced by one wgmma.m64n64k16 chain per warpgroup
// and tile (A, the decoded weights, from registers as before; x from shared memory through a descriptor).
// The same bits as prompt_body: each output's chain (hi's two k16 steps, then lo's, into a fresh sum) is
// the same, and a wgmma chain gives the bits of the mma.sync chain over the same fragments (GPU test
// Ops.WgmmaProbe*; the GPU test Ops.Q8TilesMatmulMatchesCpuForEverySplitAndKeepsRowBits compares this
// kernel's bits with the mma.sync kernel's, and AllSameBitsSwitches turns it on in the model tests; logits
// of the K3.1 slice's 1,024-token pass identical, H100 and H200, 2026-12-06). Two orders: per quant block both
// tiles' 4 wgmma, wait, then the scale fmas; or (overlap, the default) the tiles take turns, one tile's batch
// running while the other's sums are scaled and the next block's fragments decoded. x is copied in 4-byte
// pieces into the tiles' k order (a prep_x order for it would make them 16). Where it is taken and what it
// measured: matmul_q8t.cu (q8t_prompt_wgmma).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/matmul_mma.cuh"

namespace ferry::cuda {

// p as launch_matmul_q8t_prompt builds it (x with hi and lo, or hi only: lo == nullptr); sets the item grouping (256-row tiles, row
// groups of 64) and launches on st; overlap: the two tiles' batches take turns (one runs while the other's
// sums are scaled), else both are waited for each quant block.
void launch_q8t_prompt_wgmma(mma::PlainTc p, cudaStream_t st, bool overlap);

}  // namespace ferry::cuda
