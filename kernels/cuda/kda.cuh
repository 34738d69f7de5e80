// KDA kernels of the CUDA back-end: the short causal convolution (one thread per channel, serial over
// tokens), the decay gate (element-wise) and the gated delta rule.
//
// The delta rule runs one thread per value column j of one head: column j of the state S[K, V] is
// independent of every other column (u_j, the update and o_j read only column j and the shared q, k,
// g of the token), so a thread carries its column through all T tokens with the CPU's exact sequence
// of separately rounded products and sums over d; only exp() differs (CUDA's expf). kda_chunked runs
// this same recurrent kernel: the chunked form is an optimisation for long prompts that this back-end
// does not have yet (its results equal the chunked CPU form up to float rounding, as the interface asks).
#pragma once

namespace ferry::cuda {
constexpr int kKdaCols = 32;   // value columns per thread block of the delta rule
constexpr int kMaxConvWidth = 16;
}  // namespace ferry::cuda
