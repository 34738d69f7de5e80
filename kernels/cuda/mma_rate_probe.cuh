// mma.sync's rate for the two instruction shapes of the prompt kernels' x levels (matmul_mma.cuh): fp16
// m16n8k16 (hi, and lo at two levels) and E4M3 m16n8k32 (lo at level 3, lo8_bits.cuh). lo8 saves tensor time
// only if a k32 E4M3 mma (twice the multiply-adds) issues as fast as a k16 fp16 one, as FP8's dense rate is
// twice FP16's for wgmma; whether mma.sync gets there on Hopper is not in the manuals. A measuring tool for
// the GPU benchmark Ops.MmaSyncRateBenchE4m3VersusFp16.
#pragma once

namespace ferry::cuda {

struct MmaRates {
  double fp16_tflops = 0;  // m16n8k16, f32 accumulate: 2 x 2,048 flops an mma
  double e4m3_tflops = 0;  // m16n8k32, f32 accumulate: 2 x 4,096 flops an mma
};
// Every SM full of warps running 8 independent accumulator chains of `iters` mma each; the best of `reps`
// timed launches of each shape.
MmaRates mma_sync_rates(int iters = 4096, int reps = 3);

}  // namespace ferry::cuda
