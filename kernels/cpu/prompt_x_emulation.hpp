// The CUDA back-end's prompt-pass precision, reproduced on the CPU: x rounded as the tensor-core prompt kernels
// see it (kernels/cuda/matmul_mma.cuh: per row x' = x * 2^k with max |x'| in [2^14, 2^15), hi = fp16(x'); lo =
// x' - hi as fp16 (22 bits), as E4M3 of lo * 2^5 (15 bits, kernels/cuda/lo8_bits.cuh) or dropped (11 bits)).
// With emulate_prompt_x_bits set, the CPU back-end's matmuls inside a prompt pass round x so before they multiply,
// for the weights the CUDA back-end runs on its prompt kernels (q8_0 and mxfp4 with cols % 128 == 0): a CPU run
// then shows, on any machine, what a precision mode does to a checkpoint's logits and greedy ids (the tensor
// cores' own summation order aside, ~2^-24 of each sum). q8_0 weights take 22 bits unless bits is 11, as on the
// GPU (int8 is not exact in E4M3). A measuring tool (tests/kernels/model/prompt_x_emulation_test.cpp), off by
// default: the CPU back-end's arithmetic is otherwise untouched.
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"

namespace ferry::cpu {

// The nearest fp16 value of v (ties to even; subnormals; infinity from 65520), as a float.
float round_to_fp16(float v);
// The nearest E4M3 value of v (OCP FP8: ties to even, subnormals down to 2^-9, saturating at +-448), as a float.
float round_to_e4m3(float v);
// n rows of cols of x as the prompt kernels take them at `bits` (11, 15 or 22): each row's hi (+ lo) times 2^-k.
void round_prompt_x(const float* x, int64_t n, int64_t cols, int bits, float* out);

// 0 (off, the default) or 11 / 15 / 22: what the CPU back-end's prompt-pass matmuls round x to (process-wide).
void emulate_prompt_x_bits(int bits);
int emulated_prompt_x_bits();
// The bits x of a weight of this type and shape gets from emulation (0: none; the CUDA back-end keeps it exact).
int emulated_bits_for(const Weight& w);

}  // namespace ferry::cpu
