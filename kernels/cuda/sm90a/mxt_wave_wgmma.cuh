// The routed experts' prompt-pass kernel on wgmma (sm_90a): mma::item_body<mxt::MxT, kMmaBN, S, 2, 1> (a
// wave's items: a 128-row tile of one expert's mxfp4-tiles weight against a row group of up to 32 prepared
// rows, x as hi + lo) with its per-block mma.sync chains replaced by one wgmma.m64nNk16 chain per warpgroup
// (N = 8 x the item's n8 tiles with rows: 8 .. 32). A, the decoded E2M1 fragments, comes from registers as
// before (mma::Mx's natural k order: k16 step 0 = a block's elements 0-15, step 1 = 16-31); x from shared
// memory as K-major core matrices (8 rows x 16 bytes), the same 16-byte copies as item_body, other places.
// The same bits as item_body: each output's chain (hi's two k16 steps, then lo's, into a fresh sum, then
// one fma by the block scale, blocks in K order) is the same, and a wgmma chain gives the bits of the
// mma.sync chain over the same fragments (GPU test Ops.WgmmaProbe*, H100 2026-12-06). Block b's chain
// runs while block b - 1's sums are scaled (wgmma.wait_group 1); a stage's last chain is waited for
// before its shared memory is refilled. Switch: FERRY_MXT_PROMPT_WGMMA=1 / moe_wave_wgmma_tune (moe.cuh),
// off: measured on the H200 (2026-12-06) faster in its benchmark (MoeBenchPromptPassExpertWave, 896 experts x
// 18 rows of 32 distinct 3072x3584 weights: 14.51 / 14.55 ms against 15.10 / 15.14 for item_body; 4 stages,
// FERRY_MXT_WGMMA_STAGES=4, 14.89) but slower in the K3.1 slice's 1,024-token pass (expert_ffn 47.2 against
// 45.9 ms, the pass 119.9-120.4 against 118.6-118.7), whose 2,688 distinct experts have uneven rows
// (router statistics of K3): unexplained, next to profile. The same logits either way. Measurement arms:
// FERRY_MXT_WGMMA_STAGES=4; FERRY_MXT_WGMMA_MIN_NT=n (mxt_wave_wgmma_min_nt_tune, moe.cuh): items with fewer
// than n n8 tiles of rows run item_body in the same launch (built after the session's device time: not yet
// run on a GPU; the GPU test MxTilesExperts* compares its bits with n = 3).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_wave.cuh"

namespace ferry::cuda {

// The wave's items (a.group = kMmaBN, a.bm = 128, a.ntiles set, `items` of them) on st.
void launch_wave_mxt_wgmma(const WaveTc& a, int64_t items, cudaStream_t st);

}  // namespace ferry::cuda
