// KDA kernels of the CUDA back-end: the short causal convolution (one thread per channel, serial over
// tokens), the decay gate (element-wise) and the gated delta rule.
//
// The delta rule runs one thread per value column j of one head: column j of the state S[K, V] is
// independent of every other column (u_j, the update and o_j read only column j and the shared q, k,
// g of the token), so a thread carries its column through all T tokens with the CPU's exact sequence
// of separately rounded products and sums over d; only exp() differs (CUDA's expf).
//
// kda_chunked (prefill) is the chunked form of kda_chunked.cu, the CPU's equations and precision
// (results equal the chunked CPU form up to float rounding). Shapes whose chunk buffers exceed
// kKdaChunkedMaxSmem of shared memory (K * chunk beyond ~128 * 64) run the recurrent kernel instead.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ferry::cuda {
constexpr int kKdaCols = 32;   // value columns per thread block of the delta rule
constexpr int kMaxConvWidth = 16;
constexpr size_t kKdaChunkedMaxSmem = 200 * 1024;

// Shared memory of the chunked kernel for key dim K and chunk length `chunk`.
size_t kda_chunked_smem(int64_t K, int64_t chunk);
// The chunked delta rule on `st`; only when kda_chunked_smem(K, chunk) <= kKdaChunkedMaxSmem. With `pre`
// (device scratch of pre_bytes, at least kda_prepass_bytes(H, K, chunk)) and the ILP version, the prepass
// runs first for groups of chunks that fit it (kda_chunked_prepass).
void launch_kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T,
                        int64_t H, int64_t K, int64_t V, int64_t chunk, float* state, float* o, float* pre,
                        size_t pre_bytes, cudaStream_t st);
// The prepass's scratch for one chunk of every head, and the most a call takes (its groups of chunks fit it).
size_t kda_prepass_bytes(int64_t H, int64_t K, int64_t chunk);
constexpr size_t kKdaPrepassMaxBytes = size_t{64} << 20;
// The chunked kernel's prepass (kda_chunked.cu kda_prepass_kernel, same bits): the chunks' state-free parts
// (G, kg, qg, A, B and the state update's weights) for every (chunk, head) at once, before the walk over the
// chunks; on by default (measured 2026-12-07b: 17.6 -> 10.2 ms of a 1,024-token pass, H100). FERRY_KDA_PREPASS=0
// or kda_chunked_prepass_tune(0) turns it off; max_chunks > 0 caps a group's chunks (tests: several groups in
// one call).
bool kda_chunked_prepass();
void kda_chunked_prepass_tune(int on, int max_chunks = 0);
// The prepass's walk in blocks of 8 warps that fit two a SM (kda_chunked.cu kTwo: without G, the substitution's
// weights in qg's rows; same bits) where the shape allows (K a multiple of 4, K + chunk^2 <= chunk * K): off by
// default until measured (built 2026-12-07b, not run on a GPU). FERRY_KDA_WALK2=1 or kda_chunked_walk2_tune(1).
bool kda_chunked_walk2();
void kda_chunked_walk2_tune(int on);
// The decode delta rule with each thread's column of the state in registers (K 64 or 128; same bits as
// the shared-memory kernel): on by default; FERRY_KDA_REG=0 or kda_recurrent_reg_tune(0) (tests,
// benchmarks; -1 restores the environment's choice) selects the shared-memory kernel.
void kda_recurrent_reg_tune(int on);
// KDA's decode rows in fewer launches (same bits), a bit each: 1, Backend::kda_decode (the gate inputs, the delta
// rule and the gated output norm of one layer; kda.cu kda_decode_kernel, a block per head, the state's columns
// in registers) in one launch instead of 4 (K 64 or 128, V a multiple of 32 up to 256: KDA's 128 x 128); 2,
// Backend::kda_conv_l2norm (the q, k and v convolutions and q's and k's l2 norms; kda.cu kda_conv_l2norm_kernel,
// a warp per (input, head)) in one instead of 2 (K a multiple of 32 up to 256). Built 2026-12-08, not yet run on
// a GPU: off until measured; FERRY_KDA_FUSE=1|2|3 or kda_fuse_tune(1|2|3) turns them on (while fused_ops()
// holds); 0 off.
int kda_fuse();
void kda_fuse_tune(int on);
// How many kda_decode / kda_conv_l2norm calls ran as one launch in this process (tests: the path ran).
int64_t kda_decode_fused_calls();
int64_t kda_conv_fused_calls();
// The chunked kernel's versions (kda_chunked.cu; the same bits): loads in flight ahead of their sums
// (FERRY_KDA_ILP, on by default) and, with it, a head's column tiles as one cluster that shares A / B's
// rows (FERRY_KDA_CLUSTER, on by default). The tune functions set them for tests and benchmarks (1 on,
// 0 off, -1 the environment's choice).
void kda_chunked_ilp_tune(int on);
// Prompt passes' convolutions in chunks of 16 tokens, a thread per (chunk, channel) (kda.cu, same bits):
// on by default; FERRY_CONV_CHUNKS=0 or conv1d_chunks_tune(0) walks each channel's tokens in one thread.
void conv1d_chunks_tune(int on);
void kda_chunked_cluster_tune(int on);
// With the ILP version, u / o and the state update with register blocks (two rows, four dimensions) and
// float4 loads (on by default; FERRY_KDA_BLOCK=0 turns it off; the same bits).
void kda_chunked_block_tune(int on);
}  // namespace ferry::cuda
