// A probe of the warpgroup tensor-core instruction (wgmma, sm_90a) for the prompt kernels' next step
// (docs/wip/next-steps.md, "wgmma for the spine"): before a kernel is built on it, two facts need the
// hardware, not the manual:
//   1. the shared-memory layout of B (x's rows, K-major, no swizzle: 8-row x 16-byte core matrices) and
//      which descriptor field strides K and which strides N;
//   2. whether a chain of wgmma.m64nNk16 with A from registers (the fragments mma.sync takes: the prompt
//      kernels' decoded weights) gives the bits of the same chain of mma.sync.m16n8k16, as the prompt
//      kernels issue it (hi's two k16 steps, then lo's, into a fresh accumulator). If it does, moving the
//      prompt kernels to wgmma keeps every logit; if not, a prompt pass gets new bits (still a function of
//      the row alone).
// Answers (H100, 2026-12-06, GPU test Ops.WgmmaProbe*, docs/BENCHMARKS.md): 1. the leading byte offset is the
// step between a row group's two K core matrices (128 with the layout below), the stride byte offset the
// step between 8-row groups (256); 2. every one of 4,096 sums (N = 8 and 24, E2M1 and int8 weights, x
// hi-sized then lo-sized) has the bits of the mma.sync chain: wgmma prompt kernels can keep every logit.
// This file is compiled for sm_90a only (kernels/CMakeLists.txt: ferry_cuda_sm90a); it runs on H100 / H200.
#pragma once

#include <cstdint>

namespace ferry::cuda {

// The probe's shape: A 64 x 64 and x N x 64 (fp16 bit patterns, row-major), 4 k16 steps; N = 8 or 24.
constexpr int kWgmmaProbeK = 64;
// One run on the current device: dw (64 x N) by a chain of 4 wgmma.m64nNk16 (A in registers, x in
// shared memory written with K core matrices kstride bytes apart and N groups nstride apart, the
// descriptor's leading / stride byte offsets lbo / sbo), dm by each warp's chains of mma.sync.m16n8k16
// over the same fragments and order. Returns false when the build has no sm_90a code for it.
bool wgmma_probe(int n, const uint16_t* a, const uint16_t* x, int kstride, int nstride, int lbo, int sbo, float* dw,
                 float* dm);

}  // namespace ferry::cuda
