// RoPE, attention, the DSA indexer and attention residuals of the CUDA back-end.
//
// attention: one thread block per (query, head). Scores use the CPU's dot order (common.cuh warp_dot,
// bit-identical to kernels/cpu/dot.hpp) times the scale; the softmax max is exact; then each thread
// owns output dims and sums p_i = exp(s_i - max) and p_i * v_i in increasing key order, as the CPU
// does: a query's result depends only on the keys it sees, never on T or L beyond them. Only expf
// differs from the CPU's std::exp. Dense causal attention of several queries (no selection, or one of
// every visible key) runs 8 (or 16) queries of a head per block, each key row and value loaded once for
// them, every (query, key) with the same operations in the same order (attention.cu
// attention_multi_kernel, switches.hpp attention_multi_queries).
//
// indexer_topk: the scores are computed on the GPU in the CPU's exact order (bit-identical: dots in
// dot.hpp order, heads summed in increasing h, separately rounded), copied to the host, and selected
// by kernels/cpu/indexer_select.hpp, the CPU back-end's own code, so both back-ends pick the same keys
// in both tie modes.
#pragma once

namespace ferry::cuda {
constexpr int kAttnThreads = 128;
// Scores scratch per attention launch is bounded by launching groups of queries.
constexpr int64_t kAttnScratchFloats = int64_t{1} << 26;
}  // namespace ferry::cuda
