// The chunked form of the gated delta rule on the GPU (prefill), the same equations and the same
// precision choices as kernels/cpu/kda_chunked.cpp (see its comment for the derivation): G summed in
// double, every exponential of G_i - G_j (j <= i) or of G_i, A and B accumulated in double.
//
// One thread block per (head, tile of 32 value columns) walks the chunks in order with its state tile
// S[K][32] in shared memory. Per chunk of n tokens it forms, in shared memory, G [n][K] (double),
// k e^G and q e^G [n][K], A and B [n][n] (the n^2 pairs spread over the block), then u by forward
// substitution (one thread per column), o, and the new state (one thread per state element). The
// token-parallel parts replace the recurrent kernel's T sequential steps per column. A and B's sums
// over K run per warp (lanes over K, then a butterfly): their order differs from the CPU's, within the
// GPU test's tolerance, and depends only on K, so passes of any length give the same bits.
//
// Two versions with the same operations in the same order (so the same bits; Ops.KdaChunked* compare
// them), chosen by kda_chunked_ilp (FERRY_KDA_ILP, on by default):
//   - kIlp = false, the first version (8 warps): every loop as the equations read, one pair (i, j) of A / B
//     per warp at a time, its 3 x K/32 loads of k and q per lane waiting one by one on L2 (the block's 188 KB
//     of shared memory leave L1 little room). The 1,024-token pass of the K3.1 slice spent 56.8 ms here
//     (H100, 2026-12-06; 48 ms on the H200 on 2026-12-01).
//   - kIlp = true (16 warps: 128 registers each, the whole register file): A / B's rows in items of 4 pairs
//     (i, j0 .. j0 + 3), handed to the warps in turn, a warp holding its row's k_i, q_i and G_i in
//     registers and loading its next item's k_j while this one's math runs; G, kg and qg load 8 tokens'
//     g, k, q at once; the forward substitution gets each beta by a shuffle (no dependent L2 load per
//     step) while the other 15 warps compute the state update's weights; the other loops are unrolled so
//     that their loads go out ahead of their chains. Each sum keeps its own order (the lane's d in
//     increasing order, then the butterfly; each chain over m or d in increasing order), so every value is
//     the first version's. 20.2 ms for the same pass (H100, 2026-12-06; Nsight of the 8-warp step of it:
//     issue-bound, 1.0 warp instruction per SM and cycle, a third of the stalls at barriers).
//   And when a head's column tiles fit a cluster (kda_chunked_cluster, FERRY_KDA_CLUSTER), the blocks of one
//   head are one cluster and split A / B's rows between them (row i on rank i % Q), then copy the other
//   ranks' rows from their shared memory: A and B depend on the head, not on the value columns, so the
//   first version computed each of them once per column tile (-1 to -3 ms of the pass).
// And with the prepass (kda_chunked_prepass, FERRY_KDA_PREPASS; on by default since 2026-12-07b: kda_chunked
//   17.6 -> 10.2 ms in a 1,024-token pass of the K3.1 slice, H100, same bits; =0 turns it off): the
//   parts of a chunk that do not depend on the state (G, kg, qg, A, B and the state update's weights) are
//   computed first for every (chunk, head) of a group of chunks at once (kda_prepass_kernel: one block each,
//   by the functions above), and the walk (kPre) reads them instead of computing them: the walk keeps only
//   u, o, the substitution and the state update, and its blocks no longer serialise the chunks' state-free
//   work (Nsight, 2026-12-06: the walk latency-bound at 12.5 % occupancy). The same values, so the same bits.
// Not kept (2026-12-06, H100, same bits): 32-bit index math instead of the 64-bit divisions by runtime K / n
// in the state weights' and the cluster copy's loops: kda_chunked 17.82 against 17.63 ms in one call.
#include <cooperative_groups.h>

#include <algorithm>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kda.cuh"
#include "kernels/cuda/switches.hpp"

namespace ferry::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kCT = kKdaCols;  // value columns per block
constexpr int kChunkThreads = 256;  // the first version's block
constexpr int kIlpThreads = 512;    // kIlp's: 16 warps (128 registers each, the whole register file)
constexpr int kIlpWarps = kIlpThreads / 32;
template <bool kIlp>
__host__ __device__ constexpr int chunk_threads() { return kIlp ? kIlpThreads : kChunkThreads; }
constexpr int kPairs = 4;       // kIlp: pairs (i, j) of A / B a warp sums at once
constexpr int kTokenBatch = 8;  // kIlp: tokens whose g, k, q a thread of G / kg / qg loads at once

struct KdaArgs {
  const float *q, *k, *v, *g, *beta;
  int64_t T, H, K, V, C;
  float* state;
  float* o;
  int tiles;    // column tiles per head: block x = head * tiles + tile
  int cluster;  // kIlp: 1, or tiles (the head's blocks are one cluster and share A / B's rows)
  const float* pre = nullptr;  // kPre: the prepass's slots of these T tokens (pre_slot_floats each)
};

// The prepass (kda_prepass_kernel) leaves per (chunk c, head h), at slot c * H + h: kg, qg and the state
// update's weights kw = k e^{G_n - G} ([C][K] each, rows < n), e^{G_n} [K], the substitution's weights ab
// (A x beta, transposed) and B ([C][C]).
// PreSlot is that layout, for the writer (T = float) and the walk (T = const float).
__host__ __device__ inline int64_t pre_slot_floats(int64_t K, int64_t C) { return 3 * C * K + K + 2 * C * C; }
template <class T>
struct PreSlot {
  T* base;
  int64_t K, C;
  __device__ PreSlot(T* pre, int64_t slot, int64_t k, int64_t c) : base(pre + slot * pre_slot_floats(k, c)), K(k), C(c) {}
  __device__ T* kg() const { return base; }
  __device__ T* qg() const { return base + C * K; }
  __device__ T* kw() const { return base + 2 * C * K; }
  __device__ T* egn() const { return base + 3 * C * K; }
  // Not A itself: the substitution's weights ab = A[i][m] * beta_i (the walk's product), transposed: [m][i],
  // zero where m >= i or i >= n.
  __device__ T* ab() const { return base + 3 * C * K + K; }
  __device__ T* B() const { return ab() + C * C; }
};

// kIlp's G, kg, qg of a chunk: thread d walks the n tokens in order (G's double sum), with kTokenBatch
// tokens' loads in flight; the first version's operations.
__device__ __forceinline__ void factors_ilp(const float* gc, const float* kc, const float* qc, int64_t HK, int64_t K,
                                            int64_t n, double* G, float* kg, float* qg) {
  for (int64_t d = threadIdx.x; d < K; d += kIlpThreads) {
    double prev = 0.0;
    for (int64_t i0 = 0; i0 < n; i0 += kTokenBatch) {
      float gv[kTokenBatch], kv[kTokenBatch], qv[kTokenBatch];
#pragma unroll
      for (int t = 0; t < kTokenBatch; ++t) {
        const int64_t i = min(i0 + t, n - 1);  // past the end: a valid token, never used
        gv[t] = gc[i * HK + d];
        kv[t] = kc[i * HK + d];
        qv[t] = qc[i * HK + d];
      }
#pragma unroll
      for (int t = 0; t < kTokenBatch; ++t) {
        const int64_t i = i0 + t;
        if (i >= n) break;
        prev += static_cast<double>(gv[t]);
        G[i * K + d] = prev;
        const float eg = expf(static_cast<float>(prev));
        kg[i * K + d] = kv[t] * eg;
        qg[i * K + d] = qv[t] * eg;
      }
    }
  }
}

// kIlp's A and B (K = 32 R). A row i of this rank has i / kPairs + 1 items, each kPairs pairs (i, j0 ..
// j0 + kPairs - 1); the items of the rank's rows, in row order, go to the warps in turn (rows are of every
// length, so whole rows per warp would leave most warps waiting for the longest). A warp holds its row's k,
// q and G of its lane's dimensions d = lane + 32 r in registers and sums an item's pairs at once, the k_j
// of its next item of the row (global memory, L2) loading meanwhile; G_j comes from shared memory. Each
// pair's sums are the first version's: the lane's d in increasing order, then the xor butterfly 16 .. 1.
template <int R>
struct PairLoads {
  float k[kPairs][R];
};

template <int R>
__device__ __forceinline__ void load_pairs(PairLoads<R>& p, const float* kc, int64_t HK, int64_t i, int64_t j0,
                                           int lane) {
#pragma unroll
  for (int jj = 0; jj < kPairs; ++jj) {
    const int64_t j = min(j0 + jj, i);  // past row i's last pair: a valid row, never stored
#pragma unroll
    for (int r = 0; r < R; ++r) p.k[jj][r] = kc[j * HK + lane + 32 * r];
  }
}

template <int R>
__device__ __forceinline__ void pair_items(const double* G, const float* kc, const float* qc, int64_t HK, int64_t K,
                                           int64_t n, int64_t C, float* A, float* B, int rank, int Q) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t q = 0;  // items (row, group of kPairs pairs) of this rank's rows before row i, in row order
  for (int64_t i = rank; i < n; i += Q) {
    const int64_t ng = i / kPairs + 1;  // groups j0 = 0, kPairs, ... <= i
    int64_t g = ((warp - q) % kIlpWarps + kIlpWarps) % kIlpWarps;  // item q + g is this warp's first of row i
    q += ng;
    if (g >= ng) continue;
    double gi[R];
    float ki[R], qi[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      gi[r] = G[i * K + lane + 32 * r];
      ki[r] = kc[i * HK + lane + 32 * r];
      qi[r] = qc[i * HK + lane + 32 * r];
    }
    PairLoads<R> cur, nxt;
    load_pairs<R>(cur, kc, HK, i, g * kPairs, lane);
    for (; g < ng; g += kIlpWarps) {
      const int64_t j0 = g * kPairs;
      if (g + kIlpWarps < ng) load_pairs<R>(nxt, kc, HK, i, j0 + kIlpWarps * kPairs, lane);
      double sa[kPairs], sb[kPairs];
#pragma unroll
      for (int jj = 0; jj < kPairs; ++jj) {
        const double* gj = G + min(j0 + jj, i) * K + lane;
        sa[jj] = 0.0;
        sb[jj] = 0.0;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const double e = static_cast<double>(expf(static_cast<float>(gi[r] - gj[32 * r])));
          const double kj = static_cast<double>(cur.k[jj][r]) * e;
          sa[jj] += static_cast<double>(ki[r]) * kj;
          sb[jj] += static_cast<double>(qi[r]) * kj;
        }
      }
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1)
#pragma unroll
        for (int jj = 0; jj < kPairs; ++jj) {
          sa[jj] += __shfl_xor_sync(0xffffffffu, sa[jj], o);
          sb[jj] += __shfl_xor_sync(0xffffffffu, sb[jj], o);
        }
#pragma unroll
      for (int jj = 0; jj < kPairs; ++jj) {
        const int64_t j = j0 + jj;
        if (lane == jj && j <= i) {  // every lane holds the sums: lane jj stores pair jj
          A[i * C + j] = j < i ? static_cast<float>(sa[jj]) : 0.0f;
          B[i * C + j] = static_cast<float>(sb[jj]);
        }
      }
      cur = nxt;
    }
  }
}

// Pair (i, j <= i) of A and B by one warp, the first version's order (every version's: pair_items keeps it
// with its loads hoisted): lane l sums dimensions l, l + 32, ... in double, then the xor butterfly 16 .. 1;
// lane 0 stores (A's diagonal is 0).
__device__ __forceinline__ void pair_sums(const double* G, const float* kc, const float* qc, int64_t HK, int64_t K,
                                          int64_t C, float* A, float* B, int64_t i, int64_t j, int lane) {
  double sa = 0.0, sb = 0.0;
  for (int64_t d = lane; d < K; d += 32) {
    const double e = static_cast<double>(expf(static_cast<float>(G[i * K + d] - G[j * K + d])));
    const double kj = static_cast<double>(kc[j * HK + d]) * e;
    sa += static_cast<double>(kc[i * HK + d]) * kj;
    sb += static_cast<double>(qc[i * HK + d]) * kj;
  }
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) {
    sa += __shfl_xor_sync(0xffffffffu, sa, o);
    sb += __shfl_xor_sync(0xffffffffu, sb, o);
  }
  if (lane == 0) {
    A[i * C + j] = j < i ? static_cast<float>(sa) : 0.0f;
    B[i * C + j] = static_cast<float>(sb);
  }
}

// kIlp's A and B of a chunk: rows on this block (all of them, or those i % Q == rank of a cluster of Q),
// R = K / 32 registers per lane for K of 32, 64 or 128 (the register sets of K = 256 spill), else the
// first version's loop over this block's rows.
__device__ __forceinline__ void pairs_ilp(const double* G, const float* kc, const float* qc, int64_t HK, int64_t K,
                                          int64_t n, int64_t C, float* A, float* B, int rank, int Q) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  switch (K) {
    case 32: return pair_items<1>(G, kc, qc, HK, K, n, C, A, B, rank, Q);
    case 64: return pair_items<2>(G, kc, qc, HK, K, n, C, A, B, rank, Q);
    case 128: return pair_items<4>(G, kc, qc, HK, K, n, C, A, B, rank, Q);
    default: break;
  }
  const int64_t first = rank + static_cast<int64_t>(Q) * warp, step = static_cast<int64_t>(Q) * kIlpWarps;
  for (int64_t i = first; i < n; i += step)
    for (int64_t j = 0; j <= i; ++j) pair_sums(G, kc, qc, HK, K, C, A, B, i, j, lane);
}

// kBlk (FERRY_KDA_BLOCK, on by default: 18.1 vs 20.3 ms on the H100, 2026-12-06): u / o = S0^T kg / qg with a thread on two rows i0, i0 + half
// of one column c (S's loads shared by the two, kg / qg read as float4), and the state update with a
// thread on 4 consecutive d of one column (u's load shared by the four, kg as float4); 32-bit indices.
// Every chain keeps its order (d, or m, increasing), so the same bits. Needs K % 4 == 0 and C % 4 == 0
// (float4 rows of kg / qg); the caller checks.
__device__ __forceinline__ void uo_blocked(const float* kg, const float* qg, const float* S, float* u, int K, int n,
                                           int64_t H, int64_t V, int64_t col0, const float* vc, const float* bc,
                                           float* oc, int tid, int nt) {
  const int half = (n + 1) / 2;
  for (int p = tid; p < half * kCT; p += nt) {
    const int i0 = p / kCT, c = p % kCT, i1 = i0 + half;
    const bool two = i1 < n;
    const float4* k0 = reinterpret_cast<const float4*>(kg + i0 * K);
    const float4* q0 = reinterpret_cast<const float4*>(qg + i0 * K);
    const float4* k1 = reinterpret_cast<const float4*>(kg + (two ? i1 : i0) * K);
    const float4* q1 = reinterpret_cast<const float4*>(qg + (two ? i1 : i0) * K);
    const float* sc = S + c;
    float su0 = 0.0f, so0 = 0.0f, su1 = 0.0f, so1 = 0.0f;
#pragma unroll 2
    for (int d4 = 0; d4 < K / 4; ++d4) {
      const float4 a0 = k0[d4], b0 = q0[d4], a1 = k1[d4], b1 = q1[d4];
      const float s0 = sc[(4 * d4) * kCT], s1 = sc[(4 * d4 + 1) * kCT], s2 = sc[(4 * d4 + 2) * kCT],
                  s3 = sc[(4 * d4 + 3) * kCT];
      su0 = fmaf(a0.x, s0, su0), so0 = fmaf(b0.x, s0, so0), su1 = fmaf(a1.x, s0, su1), so1 = fmaf(b1.x, s0, so1);
      su0 = fmaf(a0.y, s1, su0), so0 = fmaf(b0.y, s1, so0), su1 = fmaf(a1.y, s1, su1), so1 = fmaf(b1.y, s1, so1);
      su0 = fmaf(a0.z, s2, su0), so0 = fmaf(b0.z, s2, so0), su1 = fmaf(a1.z, s2, su1), so1 = fmaf(b1.z, s2, so1);
      su0 = fmaf(a0.w, s3, su0), so0 = fmaf(b0.w, s3, so0), su1 = fmaf(a1.w, s3, su1), so1 = fmaf(b1.w, s3, so1);
    }
    const bool live = col0 + c < V;
    u[i0 * kCT + c] = ((live ? vc[i0 * H * V + col0 + c] : 0.0f) - su0) * bc[i0 * H];
    if (live) oc[i0 * H * V + col0 + c] = so0;
    if (two) {
      u[i1 * kCT + c] = ((live ? vc[i1 * H * V + col0 + c] : 0.0f) - su1) * bc[i1 * H];
      if (live) oc[i1 * H * V + col0 + c] = so1;
    }
  }
}

__device__ __forceinline__ void state_blocked(const float* kg, const float* qg, const float* u, float* S, int K, int n,
                                              int tid, int nt) {
  for (int p = tid; p < (K / 4) * kCT; p += nt) {
    const int d = 4 * (p / kCT), c = p % kCT;
    float r0 = S[d * kCT + c] * qg[d], r1 = S[(d + 1) * kCT + c] * qg[d + 1];
    float r2 = S[(d + 2) * kCT + c] * qg[d + 2], r3 = S[(d + 3) * kCT + c] * qg[d + 3];
#pragma unroll 4
    for (int m = 0; m < n; ++m) {
      const float4 kk = *reinterpret_cast<const float4*>(kg + m * K + d);
      const float uu = u[m * kCT + c];
      r0 = fmaf(kk.x, uu, r0), r1 = fmaf(kk.y, uu, r1), r2 = fmaf(kk.z, uu, r2), r3 = fmaf(kk.w, uu, r3);
    }
    S[d * kCT + c] = r0, S[(d + 1) * kCT + c] = r1, S[(d + 2) * kCT + c] = r2, S[(d + 3) * kCT + c] = r3;
  }
}

// The walk's forward substitution (kPre) for chunks of kC tokens, column tid of u: row i's value in a
// register, then for m = 0 .. kC - 2 (u_m final once its terms are in) u_i = u_i - ab[m][i] * u_m for every
// i > m: each row's terms in increasing m, the row-by-row loop's operations. Rows past n compute garbage
// from ab's unwritten rows and are never stored.
constexpr int kKdaSubstC = 64;
template <int kC>
__device__ __forceinline__ void substitute_by_columns(const float* ab, float* u, int n, int tid) {
  float uu[kC];
#pragma unroll
  for (int i = 0; i < kC; ++i) uu[i] = u[i * kCT + tid];
#pragma unroll
  for (int m = 0; m < kC - 1; ++m) {
    const float um = uu[m];
#pragma unroll
    for (int i4 = (m + 1) & ~3; i4 < kC; i4 += 4) {
      const float4 f = *reinterpret_cast<const float4*>(ab + m * kC + i4);
      const float fv[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (i4 + q > m) uu[i4 + q] = uu[i4 + q] - fv[q] * um;
    }
  }
#pragma unroll
  for (int i = 1; i < kC; ++i)
    if (i < n) u[i * kCT + tid] = uu[i];
}

// kTwo (kPre only; FERRY_KDA_WALK2): the walk in blocks of kWalk2Threads that fit two a SM (the walk of 16
// warps held a SM alone, 188 KB of shared memory and the whole register file, and stalled half its cycles at
// its barriers: Nsight, 2026-12-07b). Without G (the prepass has used it), and with the substitution's
// weights in qg's rows after e^{G_n} (qg is free once u and o's first part are formed): kda_walk2_smem bytes.
// The same operations per value (no loop's order depends on the block's threads), so the same bits.
// (Its launch bounds ask 2 blocks a SM; the others ask none (0), as before: a minimum of 1 made ptxas spill
// 28 bytes in the default walk instead of 4.)
constexpr int kWalk2Threads = 256;

template <bool kIlp, bool kBlk = false, bool kPre = false, bool kTwo = false>
__global__ void __launch_bounds__(kTwo ? kWalk2Threads : chunk_threads<kIlp>(), kTwo ? 2 : 0)
    kda_chunked_kernel(KdaArgs a) {
  static_assert(!kPre || kIlp, "the prepass feeds the ILP version");
  static_assert(!kTwo || kPre, "the two-a-SM walk reads the prepass");
  constexpr int kNT = kTwo ? kWalk2Threads : chunk_threads<kIlp>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int64_t K = a.K, C = a.C, H = a.H, V = a.V, HK = H * K;
  double* G = reinterpret_cast<double*>(smem_raw);                         // [C][K] (not kTwo)
  float* S = kTwo ? reinterpret_cast<float*>(smem_raw)
                  : reinterpret_cast<float*>(G + C * K);                   // [K][kCT]
  float* kg = S + K * kCT;                                                 // [C][K]; later the state-update weights
  float* qg = kg + C * K;                                                  // [C][K]; later e^{G_n} [K]
  float* A = kTwo ? qg + K : qg + C * K;                                   // [C][C] (kTwo: after u and o's first part)
  float* B = kTwo ? qg + C * K : A + C * C;                                // [C][C]
  float* u = B + C * C;                                                    // [C][kCT]
  constexpr int kU = kIlp ? 8 : 1;  // unrolling of the loops below (kIlp: loads ahead of their chains)
  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t h = blockIdx.x / a.tiles;
  const int tile = static_cast<int>(blockIdx.x % a.tiles);
  const int64_t col0 = static_cast<int64_t>(tile) * kCT;
  const int Q = kIlp ? a.cluster : 1;
  float* Sg = a.state + h * K * V;
  for (int64_t p = tid; p < K * kCT; p += kNT) {
    const int64_t d = p / kCT, c = p % kCT;
    S[p] = col0 + c < V ? Sg[d * V + col0 + c] : 0.0f;
  }
  for (int64_t t0 = 0; t0 < a.T; t0 += C) {
    const int64_t n = min(C, a.T - t0);
    const int64_t tk = t0 * HK + h * K, tv = t0 * H * V + h * V;
    const float *kc = a.k + tk, *qc = a.q + tk, *gc = a.g + tk, *vc = a.v + tv, *bc = a.beta + t0 * H + h;
    float* oc = a.o + tv;
    __syncthreads();  // the previous chunk is done with every buffer
    const PreSlot<const float> slot(a.pre, kPre ? (t0 / C) * H + h : 0, K, C);
    if constexpr (kPre) {  // the prepass's kg, qg, A and B of this chunk (the same values: its functions)
      for (int64_t p = tid; p < n * K; p += kNT) {
        kg[p] = slot.kg()[p];
        qg[p] = slot.qg()[p];
      }
      for (int64_t p = tid; p < n * C; p += kNT) {
        if (!kTwo) A[p] = slot.ab()[p];  // with the prepass, A's buffer holds ab
        B[p] = slot.B()[p];
      }
    } else if constexpr (kIlp) {
      factors_ilp(gc, kc, qc, HK, K, n, G, kg, qg);
    } else {
      for (int64_t d = tid; d < K; d += kNT) {
        double prev = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          prev += static_cast<double>(gc[i * H * K + d]);
          G[i * K + d] = prev;
          const float eg = expf(static_cast<float>(prev));
          kg[i * K + d] = kc[i * H * K + d] * eg;
          qg[i * K + d] = qc[i * H * K + d] * eg;
        }
      }
    }
    __syncthreads();
    if constexpr (kPre) {
    } else if constexpr (kIlp) {
      pairs_ilp(G, kc, qc, HK, K, n, C, A, B, Q > 1 ? tile : 0, Q);
    } else {
      // A and B: one warp per pair (i, j <= i), lane l summing dimensions l, l + 32, ... then a fixed
      // xor butterfly, so a warp's loads of k and q rows are consecutive floats (a thread per pair made
      // every load of a warp touch 32 rows: ~25 MB of L2 traffic per chunk and block, 2026-12-01).
      for (int64_t p = tid >> 5; p < n * n; p += kNT / 32) {
        const int64_t i = p / n, j = p % n;
        if (j <= i) pair_sums(G, kc, qc, HK, K, C, A, B, i, j, lane);  // the same for the whole warp
      }
    }
    // u_i = beta_i (v_i - S0^T kg_i) before substitution; o_i = S0^T qg_i (kept in o until the end).
    const bool blk = kBlk && K % 4 == 0 && C % 4 == 0;
    if (blk)
      uo_blocked(kg, qg, S, u, static_cast<int>(K), static_cast<int>(n), H, V, col0, vc, bc, oc, tid, kNT);
    for (int64_t p = blk ? n * kCT : tid; p < n * kCT; p += kNT) {
      const int64_t i = p / kCT, c = p % kCT;
      float su = 0.0f, so = 0.0f;
#pragma unroll kU
      for (int64_t d = 0; d < K; ++d) {
        su = fmaf(kg[i * K + d], S[d * kCT + c], su);
        so = fmaf(qg[i * K + d], S[d * kCT + c], so);
      }
      const bool live = col0 + c < V;
      u[i * kCT + c] = ((live ? vc[i * H * V + col0 + c] : 0.0f) - su) * bc[i * H];
      if (live) oc[i * H * V + col0 + c] = so;
    }
    if (kIlp && Q > 1) {
      // A / B rows of the other ranks, from their shared memory; the second barrier keeps each rank's
      // rows in place until every rank has copied them (the next chunk overwrites them).
      cg::cluster_group cl = cg::this_cluster();
      cl.sync();
      for (int64_t p = tid; p < n * n; p += kNT) {
        const int64_t i = p / n, j = p % n;
        const int owner = static_cast<int>(i % Q);
        if (j > i || owner == tile) continue;
        A[i * C + j] = cl.map_shared_rank(A, owner)[i * C + j];
        B[i * C + j] = cl.map_shared_rank(B, owner)[i * C + j];
      }
      cl.sync();
    } else {
      __syncthreads();
    }
    // S_n = e^{G_n} S0 + sum_m (k_m e^{G_n - G_m}) u_m^T: its weights (kg, qg are free once u and o's first
    // part are formed) by the other warps while warp 0 substitutes (kIlp), else after o.
    const double* Gn = G + (n - 1) * K;
    if constexpr (kTwo) {  // the weights, and the substitution's into qg's rows, by every warp before it
      for (int64_t p = tid; p < n * K; p += kNT) kg[p] = slot.kw()[p];
      for (int64_t d = tid; d < K; d += kNT) qg[d] = slot.egn()[d];
      for (int64_t p = tid; p < n * C; p += kNT) A[p] = slot.ab()[p];
      __syncthreads();
    } else if (kPre && tid >= 32) {
      for (int64_t p = tid - 32; p < n * K; p += kNT - 32) kg[p] = slot.kw()[p];
      for (int64_t d = tid - 32; d < K; d += kNT - 32) qg[d] = slot.egn()[d];
    } else if (kIlp && tid >= 32) {
#pragma unroll kU
      for (int64_t p = tid - 32; p < n * K; p += kNT - 32) {
        const int64_t m = p / K, d = p % K;
        kg[p] = kc[m * H * K + d] * expf(static_cast<float>(Gn[d] - G[m * K + d]));
      }
      for (int64_t d = tid - 32; d < K; d += kNT - 32) qg[d] = expf(static_cast<float>(Gn[d]));
    }
    if (kPre && tid < kCT) {
      // Forward substitution from the prepass's weights ab[m][i] = A[i][m] * beta_i, one column per thread:
      // row i's terms in the same order (m = 0 .. i - 1) as below, but taken m by m over every row after m,
      // so the rows' chains run side by side instead of one after the other (the lone warp's chain of
      // n (n - 1) / 2 dependent steps held the other 15 at the barrier after it).
      if (C == kKdaSubstC)
        substitute_by_columns<kKdaSubstC>(A, u, static_cast<int>(n), tid);
      else
        for (int64_t i = 1; i < n; ++i) {
          float ui = u[i * kCT + tid];
          for (int64_t m = 0; m < i; ++m) ui = ui - A[m * C + i] * u[m * kCT + tid];
          u[i * kCT + tid] = ui;
        }
    } else if (tid < kCT) {  // forward substitution, one column per thread
      // kIlp: beta_i of 32 tokens at a time in the warp's lanes (one load each), handed out by a shuffle,
      // so no step waits for its beta from L2 (63 dependent loads a chunk in the first version).
      float bl = 0.0f;
      for (int64_t i = 1; i < n; ++i) {
        if (kIlp && (i == 1 || (i & 31) == 0)) bl = i - (i & 31) + lane < n ? bc[(i - (i & 31) + lane) * H] : 0.0f;
        const float b = kIlp ? __shfl_sync(0xffffffffu, bl, static_cast<int>(i & 31)) : bc[i * H];
        float ui = u[i * kCT + tid];
#pragma unroll kU
        for (int64_t m = 0; m < i; ++m) ui = ui - (A[i * C + m] * b) * u[m * kCT + tid];
        u[i * kCT + tid] = ui;
      }
    }
    __syncthreads();
    for (int64_t p = tid; p < n * kCT; p += kNT) {
      const int64_t i = p / kCT, c = p % kCT;
      if (col0 + c >= V) continue;
      float oi = oc[i * H * V + col0 + c];
#pragma unroll kU
      for (int64_t m = 0; m <= i; ++m) oi = fmaf(B[i * C + m], u[m * kCT + c], oi);
      oc[i * H * V + col0 + c] = oi;
    }
    if constexpr (!kIlp) {
      for (int64_t p = tid; p < n * K; p += kNT) {
        const int64_t m = p / K, d = p % K;
        kg[p] = kc[m * H * K + d] * expf(static_cast<float>(Gn[d] - G[m * K + d]));
      }
      for (int64_t d = tid; d < K; d += kNT) qg[d] = expf(static_cast<float>(Gn[d]));
      __syncthreads();
    }
    if (blk) state_blocked(kg, qg, u, S, static_cast<int>(K), static_cast<int>(n), tid, kNT);
    for (int64_t p = blk ? K * kCT : tid; p < K * kCT; p += kNT) {
      const int64_t d = p / kCT, c = p % kCT;
      float row = S[p] * qg[d];
#pragma unroll kU
      for (int64_t m = 0; m < n; ++m) row = fmaf(kg[m * K + d], u[m * kCT + c], row);
      S[p] = row;
    }
  }
  __syncthreads();
  for (int64_t p = tid; p < K * kCT; p += kNT) {
    const int64_t d = p / kCT, c = p % kCT;
    if (col0 + c < V) Sg[d * V + col0 + c] = S[p];
  }
}

// The prepass (FERRY_KDA_PREPASS): what a chunk needs that does not depend on the state, for every (chunk,
// head) of a group at once, one block each (H x chunks blocks where the walk has H x tiles walking the chunks
// in order: Nsight found the walk latency-bound, 12.5 % occupancy, 2026-12-06). G, kg and qg by
// factors_ilp, A and B by pairs_ilp (every row: a cluster's ranks compute the same pairs), the weights by the
// walk's own expressions: the same values, so the walk (kPre) gives the ILP version's bits.
__global__ void __launch_bounds__(kIlpThreads) kda_prepass_kernel(KdaArgs a, float* pre) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int64_t K = a.K, C = a.C, H = a.H, HK = H * K;
  double* G = reinterpret_cast<double*>(smem_raw);  // [C][K]
  float* kg = reinterpret_cast<float*>(G + C * K);  // [C][K]
  float* qg = kg + C * K;                           // [C][K]
  float* A = qg + C * K;                            // [C][C]
  float* B = A + C * C;                             // [C][C]
  const int tid = threadIdx.x;
  const int64_t h = blockIdx.x % H, c = blockIdx.x / H;
  const int64_t t0 = c * C, n = min(C, a.T - t0);
  const int64_t tk = t0 * HK + h * K;
  const float *kc = a.k + tk, *qc = a.q + tk, *gc = a.g + tk;
  factors_ilp(gc, kc, qc, HK, K, n, G, kg, qg);
  __syncthreads();
  pairs_ilp(G, kc, qc, HK, K, n, C, A, B, 0, 1);
  __syncthreads();
  const PreSlot<float> slot(pre, c * H + h, K, C);
  const double* Gn = G + (n - 1) * K;
  for (int64_t p = tid; p < n * K; p += kIlpThreads) {
    const int64_t m = p / K, d = p % K;
    slot.kg()[p] = kg[p];
    slot.qg()[p] = qg[p];
    slot.kw()[p] = kc[m * H * K + d] * expf(static_cast<float>(Gn[d] - G[m * K + d]));
  }
  for (int64_t d = tid; d < K; d += kIlpThreads) slot.egn()[d] = expf(static_cast<float>(Gn[d]));
  const float* bc = a.beta + t0 * H + h;
  for (int64_t p = tid; p < C * C; p += kIlpThreads) {
    const int64_t m = p / C, i = p % C;  // [m][i]: the walk's (A[i][m] * b) for row i's term m
    slot.ab()[p] = m < i && i < n ? A[i * C + m] * bc[i * H] : 0.0f;
    if (p < n * C) slot.B()[p] = B[p];
  }
}

size_t kda_prepass_smem(int64_t K, int64_t C) {
  return static_cast<size_t>(C * K) * sizeof(double) + static_cast<size_t>(2 * C * K + 2 * C * C) * sizeof(float);
}

int g_ilp = -1;      // kda_chunked_ilp_tune
int g_block = -1;    // kda_chunked_block_tune
int g_cluster = -1;  // kda_chunked_cluster_tune
int g_prepass = -1;  // kda_chunked_prepass_tune
int g_prepass_chunks = 0;  // its cap on the chunks of a group (0: the scratch's)
int g_walk2 = -1;    // kda_chunked_walk2_tune

// Whether a cluster of q blocks of `smem` bytes each can be resident at once (asked once per shape).
bool clusters_fit(int q, size_t smem) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(q));
  cfg.blockDim = dim3(kIlpThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute at{};
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = static_cast<unsigned>(q);
  at.val.clusterDim.y = at.val.clusterDim.z = 1;
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kda_chunked_kernel<true>, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

}  // namespace

void kda_chunked_ilp_tune(int on) { g_ilp = on; }
void kda_chunked_block_tune(int on) { g_block = on; }
void kda_chunked_cluster_tune(int on) { g_cluster = on; }
void kda_chunked_prepass_tune(int on, int max_chunks) {
  g_prepass = on;
  g_prepass_chunks = max_chunks;
}
bool kda_chunked_prepass() {
  static const bool env = env_switch("FERRY_KDA_PREPASS", true);
  return switch_on(g_prepass, env);
}
void kda_chunked_walk2_tune(int on) { g_walk2 = on; }
bool kda_chunked_walk2() {
  static const bool env = env_switch("FERRY_KDA_WALK2", false);
  return switch_on(g_walk2, env);
}
size_t kda_prepass_bytes(int64_t H, int64_t K, int64_t chunk) {
  return static_cast<size_t>(H * pre_slot_floats(K, chunk)) * sizeof(float);
}

size_t kda_chunked_smem(int64_t K, int64_t chunk) {
  return static_cast<size_t>(chunk * K) * sizeof(double) +
         static_cast<size_t>(K * kCT + 2 * chunk * K + 2 * chunk * chunk + chunk * kCT) * sizeof(float);
}
// The two-a-SM walk's (kTwo): S, kg, qg (e^{G_n} and then the substitution's weights in its rows), B, u.
size_t kda_walk2_smem(int64_t K, int64_t chunk) {
  return static_cast<size_t>(K * kCT + 2 * chunk * K + chunk * chunk + chunk * kCT) * sizeof(float);
}
// Whether it takes this shape: qg's rows hold e^{G_n} and the C x C weights (16-byte aligned after K floats),
// and two blocks fit a SM (227 KB of shared memory, 1 KB of it reserved per block).
bool walk2_fits(int64_t K, int64_t chunk) {
  return K % 4 == 0 && K + chunk * chunk <= chunk * K && 2 * (kda_walk2_smem(K, chunk) + 1024) <= 227 * 1024;
}

void launch_kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T,
                        int64_t H, int64_t K, int64_t V, int64_t chunk, float* state, float* o, float* pre,
                        size_t pre_bytes, cudaStream_t st) {
  const size_t smem = kda_chunked_smem(K, chunk);
  static const bool raised = [] {
    for (auto* kern : {kda_chunked_kernel<false>, kda_chunked_kernel<true>, kda_chunked_kernel<true, true>,
                       kda_chunked_kernel<true, false, true>, kda_chunked_kernel<true, true, true>})
      FERRY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(kKdaChunkedMaxSmem)));
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(kda_prepass_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kKdaChunkedMaxSmem)));
    for (auto* kern : {kda_chunked_kernel<true, false, true, true>, kda_chunked_kernel<true, true, true, true>})
      FERRY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(kKdaChunkedMaxSmem)));
    for (auto* kern : {kda_chunked_kernel<true>, kda_chunked_kernel<true, true>})
      FERRY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return true;
  }();
  (void)raised;
  static const bool ilp_env = env_switch("FERRY_KDA_ILP", true);
  static const bool cluster_env = env_switch("FERRY_KDA_CLUSTER", true);
  static const bool block_env = env_switch("FERRY_KDA_BLOCK", true);
  const bool ilp = switch_on(g_ilp, ilp_env);
  const int tiles = static_cast<int>((V + kCT - 1) / kCT);
  // The prepass: groups of chunks whose slots fit `pre` (a group's walk reads the state the last one left).
  const int64_t per_chunk = static_cast<int64_t>(kda_prepass_bytes(H, K, chunk));
  int64_t group = pre && ilp && kda_prepass_smem(K, chunk) <= kKdaChunkedMaxSmem
                      ? static_cast<int64_t>(pre_bytes) / per_chunk : 0;
  if (g_prepass_chunks > 0) group = std::min<int64_t>(group, g_prepass_chunks);
  if (group > 0) {
    // Groups of equal size (16 chunks in at most 5: 4 x 4, not 5 + 5 + 5 + 1, whose last prepass of 96 blocks
    // is a grid of one partial wave); the groups only split the launches, so the same bits.
    const int64_t chunks = (T + chunk - 1) / chunk, ngroups = (chunks + group - 1) / group;
    group = (chunks + ngroups - 1) / ngroups;
    const bool blk = switch_on(g_block, block_env);
    const bool two = kda_chunked_walk2() && walk2_fits(K, chunk);
    const size_t smem2 = kda_walk2_smem(K, chunk);
    const int64_t HK = H * K, HV = H * V;
    for (int64_t c0 = 0; c0 * chunk < T; c0 += group) {
      const int64_t t0 = c0 * chunk, tn = std::min(T - t0, group * chunk), nch = (tn + chunk - 1) / chunk;
      KdaArgs ga{q + t0 * HK, k + t0 * HK, v + t0 * HV, g + t0 * HK, beta + t0 * H, tn, H, K, V, chunk, state,
                 o + t0 * HV, tiles, 1, pre};
      kda_prepass_kernel<<<static_cast<unsigned>(H * nch), kIlpThreads, kda_prepass_smem(K, chunk), st>>>(ga, pre);
      FERRY_CUDA_LAUNCHED(kda_prepass_kernel);
      const auto walk_grid = static_cast<unsigned>(H * tiles);
      if (two && blk)
        kda_chunked_kernel<true, true, true, true><<<walk_grid, kWalk2Threads, smem2, st>>>(ga);
      else if (two)
        kda_chunked_kernel<true, false, true, true><<<walk_grid, kWalk2Threads, smem2, st>>>(ga);
      else if (blk)
        kda_chunked_kernel<true, true, true><<<walk_grid, kIlpThreads, smem, st>>>(ga);
      else
        kda_chunked_kernel<true, false, true><<<walk_grid, kIlpThreads, smem, st>>>(ga);
      FERRY_CUDA_LAUNCHED(kda_chunked_kernel);
    }
    return;
  }
  int cluster = 1;
  if (ilp && tiles > 1 && tiles <= 8 && switch_on(g_cluster, cluster_env)) {
    thread_local int fit_tiles = 0;  // the last shape asked (a model has one)
    thread_local size_t fit_smem = 0;
    thread_local bool fits = false;
    if (fit_tiles != tiles || fit_smem != smem) fits = clusters_fit(tiles, smem), fit_tiles = tiles, fit_smem = smem;
    if (fits) cluster = tiles;
  }
  const KdaArgs args{q, k, v, g, beta, T, H, K, V, chunk, state, o, tiles, cluster};
  const dim3 grid(static_cast<unsigned>(H * tiles));
  if (!ilp) {
    kda_chunked_kernel<false><<<grid, kChunkThreads, smem, st>>>(args);
    FERRY_CUDA_LAUNCHED(kda_chunked_kernel);
    return;
  }
  launch_kernel_in_clusters(false, static_cast<unsigned>(cluster),
                            switch_on(g_block, block_env) ? kda_chunked_kernel<true, true> : kda_chunked_kernel<true>,
                            grid, dim3(kIlpThreads),
                            smem, st, args);
}

}  // namespace ferry::cuda
