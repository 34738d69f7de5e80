// x's lo level as E4M3 for the mxfp4 weights' prompt kernels (x at "15 bits": mma_levels() 3, `--prompt-x-bits
// 15`; matmul_mma.cuh's L = 3): the pieces that are plain integer functions, so the host checks them
// (tests/kernels/cuda_host/lo8_bits_test.cpp emulates the mma fragments with them).
//
// Why: with x as hi + lo fp16 (22 bits) a quant block and n8 tile take 4 mma.m16n8k16; as hi alone (11 bits) 2,
// but then the kimi_linear-a fixture's greedy ids leave transformers' (docs/BENCHMARKS.md 2026-12-07f). E2M1
// weights are exact in E4M3, so lo can enter as E4M3 (4 significant bits): 1 mma.m16n8k32.e4m3 takes the whole
// block, 3 mma instead of 4, and x keeps ~15 bits (error ~2^-16 of each element against 2^-12 at one level).
//
// The weights: an E2M1 value v enters the fp16 kernels as the fp16 high byte of v * 2^-14, s 0 0 0 e1 e0 m 0
// (e2m1_bits.cuh). The E4M3 byte s 0 0 e1 e0 m 0 0 (exponent field 0 0 e1 e0, bias 7; e = 0 the E4M3 subnormals
// m * 2^-7) is v * 2^-6: one shift and one mask a word of four.
//
// The order: mma.m16n8k32's 8-bit A fragment gives lane (g, t) columns 4t .. 4t + 3 (register a0 / a1: rows g
// / g + 8) and 16 + 4t .. 19 + 4t (a2 / a3); its B fragment the same columns of x's row g. The fp16 fragments
// of the two k16 steps hold columns 16s + {2t, 2t + 1, 2t + 8, 2t + 9} of the block. A dot product does not
// care in which order its columns are numbered as long as A and B agree: the kernel feeds the E4M3 mma lane
// (g, t)'s own fp16 weights (step s's four bytes as logical columns 16s + 4t .. 16s + 4t + 3), and prep_x writes
// lo so that the same logical position holds the same column of x: lo8_pos. A lane never needs another lane's
// weights.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda::lo8 {

// Four fp16 high bytes of E2M1 weights (value * 2^-14) -> the E4M3 bytes of value * 2^-6, byte by byte.
__host__ __device__ constexpr uint32_t e4m3_of_high(uint32_t h) { return ((h << 1) & 0x1C1C1C1Cu) | (h & 0x80808080u); }

// The E4M3 A register of one row and k16 step from its two fp16 fragment registers: f0 holds columns 2t, 2t + 1
// (fp16 pairs: value in the high byte of each half), f2 columns 2t + 8, 2t + 9; the result's bytes are those
// four columns in that order (logical columns 4t .. 4t + 3 of the step), as E4M3.
__host__ __device__ inline uint32_t a_word(uint32_t f0, uint32_t f2) {
#if defined(__CUDA_ARCH__)
  return e4m3_of_high(__byte_perm(f0, f2, 0x7531u));
#else
  return e4m3_of_high(((f0 >> 8) & 0xFFu) | ((f0 >> 16) & 0xFF00u) | ((f2 << 8) & 0xFF0000u) | (f2 & 0xFF000000u));
#endif
}

// Where column c of a row sits in its lo8 row: within each 16 columns, 8h + 2t + i (h, i in {0, 1}, t < 4)
// goes to 4t + 2h + i (the inverse of xprep's mx order). Even columns go to even places, and c + 1 follows c.
__host__ __device__ constexpr int64_t lo8_pos(int64_t c) {
  const int r = static_cast<int>(c & 15);
  return (c & ~int64_t{15}) + 4 * ((r >> 1) & 3) + 2 * (r >> 3) + (r & 1);
}

// lo (x * 2^k - hi: at most 8 in magnitude, half an ulp of hi's [2^14, 2^15)) enters as E4M3 of lo * 2^5 (at most
// 256 < 448: never saturates); the products with the weights' v * 2^-6 are then v * lo * 2^-1, and the
// kernel's block sum takes them times 2^-13 to match hi's v * 2^-14 * hi.
constexpr float kUp = 32.0f;
constexpr float kDown = 1.0f / 8192.0f;

}  // namespace ferry::cuda::lo8
