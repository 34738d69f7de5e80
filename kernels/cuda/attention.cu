// rope, attention, indexer_topk, attn_res (see attention.cuh).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/indexer_select.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/select_bits.cuh"
#include "kernels/cuda/switches.hpp"
#include "kernels/cuda/xprep.cuh"

namespace ferry::cuda {

namespace {

__global__ void rope_kernel(float* x, int64_t n_heads, int64_t tok_stride, int64_t head_stride, int64_t offset,
                            const int32_t* pos, const float* freq, int64_t half, float factor, bool interleaved) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
    const int64_t h = idx / half, i = idx % half;
    const double angle = static_cast<double>(pos[t]) * static_cast<double>(freq[i]);
    const float cs = mul(static_cast<float>(cos(angle)), factor);
    const float sn = mul(static_cast<float>(sin(angle)), factor);
    float* p = x + t * tok_stride + h * head_stride + offset;
    float* pa = interleaved ? p + 2 * i : p + i;
    float* pb = interleaved ? p + 2 * i + 1 : p + i + half;
    const float a0 = *pa, b0 = *pb;
    *pa = __fsub_rn(mul(a0, cs), mul(b0, sn));
    *pb = add(mul(b0, cs), mul(a0, sn));
  }
}

// AttentionArgs with device pointers and the compacted selection.
struct AttnParams {
  AttentionArgs a;
  const int32_t* keys = nullptr;    // [T, sel_k] compacted selected positions (ascending), or null
  const int32_t* counts = nullptr;  // [T] number of valid keys per query
  int64_t maxk = 0;                 // score slots per (query, head)
};

__device__ __forceinline__ float block_max(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int s = 16; s >= 1; s >>= 1) v = fmaxf(v, __shfl_down_sync(kFullMask, v, s));
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float m = sh[0];
  for (int i = 1; i < nw; ++i) m = fmaxf(m, sh[i]);
  return m;
}

// The number of selected keys of a row of indexer_topk's device selection (AttentionArgs::sel_ascending: the
// positions first, then -1): the first -1, by bisection.
__device__ __forceinline__ int64_t leading_keys(const int32_t* keys, int64_t n) {
  int64_t lo = 0, hi = n;  // keys[0, lo) are positions, keys[hi, n) are -1
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (keys[mid] >= 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// KEYS: keys a warp scores at once; COLS: value columns a thread sums at once. Each score is still its key's
// warp_dot and each output column its sum over the keys in key order, so every (KEYS, COLS) gives the same
// bits; <1, 1> is the kernel of one key and one column at a time, <4, 4> keeps more loads in flight for
// MLA's 576-wide decode rows (attention_ilp(), off until measured on the GPU).
template <int KEYS, int COLS>
__global__ void attention_kernel(AttnParams P, int64_t t0, float* sc) {
  pdl_begin();
  __shared__ float sh[32];
  const AttentionArgs& a = P.a;
  const int64_t h = blockIdx.x, t = t0 + blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int64_t last = min(a.L - 1, a.q_pos0 + t);
  const int32_t* keys = P.keys ? P.keys + t * a.sel_k : nullptr;
  const int64_t nkeys = P.keys ? (P.counts ? P.counts[t] : leading_keys(keys, a.sel_k))
                               : (last + 1 > 0 ? last + 1 : int64_t{0});
  const int64_t kh = h / (a.Hq / a.Hk);
  const float* q = a.q + t * a.q_tok_stride + h * a.q_head_stride;
  float* s = sc + (blockIdx.y * a.Hq + h) * P.maxk;
  float* out = a.out + (t * a.Hq + h) * a.Dv;
  // Scores: warp w takes keys w, w + nw, ...; KEYS of them at once, their warp_dot chains interleaved in
  // one loop over the columns (each chain is still its key's warp_dot, so the bits are the CPU's).
  for (int64_t i0 = warp; i0 < nkeys; i0 += KEYS * nw) {
    const float* kp[KEYS];
    float d[KEYS];
#pragma unroll
    for (int j = 0; j < KEYS; ++j) {
      const int64_t i = min(i0 + j * nw, nkeys - 1);  // past the end: a valid key, never stored
      const int64_t key = keys ? keys[i] : i;
      kp[j] = a.k + key * a.k_tok_stride + kh * a.k_head_stride;
      d[j] = 0.0f;
    }
    // Columns in chunks of 8 per lane: the chunk's loads before its adds (the same adds in the same order).
    for (int64_t c0 = lane; c0 < a.Dk; c0 += 32 * 8) {
      float qv[8], kv[KEYS][8];
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int64_t c = c0 + 32 * m;
        qv[m] = c < a.Dk ? q[c] : 0.0f;
#pragma unroll
        for (int j = 0; j < KEYS; ++j) kv[j][m] = c < a.Dk ? kp[j][c] : 0.0f;
      }
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        if (c0 + 32 * m >= a.Dk) break;
#pragma unroll
        for (int j = 0; j < KEYS; ++j) d[j] = add(d[j], mul(qv[m], kv[j][m]));
      }
    }
#pragma unroll
    for (int j = 0; j < KEYS; ++j) {
      const float v = warp_fold(d[j]);
      if (lane == 0 && i0 + j * nw < nkeys) s[i0 + j * nw] = mul(v, a.scale);
    }
  }
  __syncthreads();
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < nkeys; i += blockDim.x) m = fmaxf(m, s[i]);
  m = block_max(m, sh);
  for (int64_t i = threadIdx.x; i < nkeys; i += blockDim.x) s[i] = expf(__fsub_rn(s[i], m));
  __syncthreads();
  // Output: thread x takes columns x, x + blockDim, ...; COLS of them at once, so one pass over the keys
  // serves them all (each column's sum over the keys in key order; sum is the same sequence for every
  // column).
  // The keys come in chunks of kChunk: every load of a chunk is issued before its adds (a decode row's
  // value loads come from L2, and one chain of adds per column would otherwise wait for each in turn).
  constexpr int kChunk = 8;
  const float* vh = a.v + kh * a.v_head_stride;
  for (int64_t d0 = threadIdx.x; d0 < a.Dv; d0 += COLS * static_cast<int64_t>(blockDim.x)) {
    float sum = 0.0f, o[COLS];
#pragma unroll
    for (int j = 0; j < COLS; ++j) o[j] = 0.0f;
    for (int64_t i0 = 0; i0 < nkeys; i0 += kChunk) {
      float pv[kChunk], vv[kChunk][COLS];
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        const int64_t i = min(i0 + u, nkeys - 1);  // past the end: a valid key, never added
        const float* vr = vh + (keys ? keys[i] : i) * a.v_tok_stride + d0;
        pv[u] = s[i];
#pragma unroll
        for (int j = 0; j < COLS; ++j) vv[u][j] = d0 + j * blockDim.x < a.Dv ? vr[j * blockDim.x] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        if (i0 + u >= nkeys) break;
        sum = add(sum, pv[u]);
#pragma unroll
        for (int j = 0; j < COLS; ++j)
          if (d0 + j * blockDim.x < a.Dv) o[j] = add(o[j], mul(pv[u], vv[u][j]));
      }
    }
#pragma unroll
    for (int j = 0; j < COLS; ++j)
      if (d0 + j * blockDim.x < a.Dv) out[d0 + j * blockDim.x] = nkeys ? mul(o[j], 1.0f / sum) : 0.0f;
  }
}

// ---- attention split over keys and columns (attention_split()) ---------------------------------------------
// attention_kernel gives a (query, head) one block that walks the query's keys twice, every step waiting on a
// load from L2 (the selected position, then its row): fine for the ~70 keys of a short decode, but a DSA
// layer past index_topk selects 2,048 keys a query, and MLA's 96 heads each walk all of them (H100,
// 2026-12-07i: a decode step at 3,000 tokens of context took 2.43 ms against 1.85 at 70, the extra in that one
// layer). Here the same operations in two launches, spread over keys, heads and columns:
// - attention_split_scores_kernel: block (chunk of kSplitKeys keys, query, group of kSplitHeads heads); warp w
//   takes the group's heads w, w + kSplitWarps, ..., its q row in registers (lane l: columns l, l + 32, ...),
//   and scores the chunk's keys 4 at a time: each score its warp_dot chain (lane l's columns in increasing
//   order, then warp_fold) times the scale, into sc where attention_kernel puts it.
// - attention_split_output_kernel: block (kSplitCols output columns, query, kSplitWarps heads), a warp per head:
//   the max of its scores (a max: any order), then its keys in order, 32 at a time (lane l computes key
//   c + l's p = expf(s - max) and position, shuffled to every lane in turn): sum += p, and for the lane's 4
//   columns (one 16-byte load) o += p * v; out = o * (1 / sum).
// Every score, max, p, sum and output column is attention_kernel's, from the same operations in the same
// order: the same bits (GPU test Ops.AttentionSplitOverKeysHasTheBitsOfABlockPerHead).
constexpr int kSplitKeys = 16, kSplitHeads = 32, kSplitWarps = 4, kSplitCols = 128;
constexpr int64_t kSplitMaxDk = 1024;  // q rows in registers: 32 a lane at most

// Where query t's key list ends: its count (dense: its visible keys; a compacted selection: P.counts), or for
// indexer_topk's device selection (leading positions, then -1) the row's length, sel_k.
__device__ __forceinline__ int64_t key_limit(const AttnParams& P, int64_t t) {
  const AttentionArgs& a = P.a;
  if (P.keys) return P.counts ? P.counts[t] : a.sel_k;
  const int64_t last = min(a.L - 1, a.q_pos0 + t);
  return last + 1 > 0 ? last + 1 : 0;
}

// The keys a warp's query t sees: key_limit, and for a device selection its leading positions by a 32-way
// search, three rounds of loads for 2,048 entries.
__device__ __forceinline__ int64_t split_key_count(const AttnParams& P, int64_t t, int lane) {
  const AttentionArgs& a = P.a;
  if (!P.keys || P.counts) return key_limit(P, t);
  const int32_t* keys = P.keys + t * a.sel_k;
  int64_t lo = 0, hi = a.sel_k;  // select_bits.cuh count_narrow: keys[0, lo) are positions, keys[hi, sel_k) -1
  while (lo < hi) {
    const int64_t step = select::count_step(lo, hi), p = lo + lane * step;
    const int j = __popc(__ballot_sync(kFullMask, p < hi && keys[p] >= 0));  // the probes that find a key lead
    if (select::count_narrow(lo, hi, j, step)) break;
  }
  return lo;
}

template <int CPL>
__global__ void __launch_bounds__(kSplitWarps * 32) attention_split_scores_kernel(AttnParams P, int64_t t0, float* sc) {
  pdl_begin();
  const AttentionArgs& a = P.a;
  const int64_t tq = blockIdx.y, t = t0 + tq;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t* keys = P.keys ? P.keys + t * a.sel_k : nullptr;
  // The chunk's positions, a lane each: a device selection's -1 entries are its tail, so the valid lanes lead.
  const int64_t limit = key_limit(P, t);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kSplitKeys;
  if (i0 >= limit) return;
  const int64_t i = i0 + lane;
  const int64_t pos_l = lane < kSplitKeys && i < limit ? (keys ? keys[i] : i) : -1;
  const int n = __popc(__ballot_sync(kFullMask, pos_l >= 0));
  if (n == 0) return;
  const int64_t h_end = min(a.Hq, (static_cast<int64_t>(blockIdx.z) + 1) * kSplitHeads);
  for (int64_t h = static_cast<int64_t>(blockIdx.z) * kSplitHeads + warp; h < h_end; h += kSplitWarps) {
    const int64_t kh = h / (a.Hq / a.Hk);
    const float* q = a.q + t * a.q_tok_stride + h * a.q_head_stride;
    float qv[CPL];
#pragma unroll
    for (int m = 0; m < CPL; ++m) {
      const int64_t c = lane + 32 * m;
      qv[m] = c < a.Dk ? q[c] : 0.0f;
    }
    float* s = sc + (tq * a.Hq + h) * P.maxk + i0;
    for (int u0 = 0; u0 < n; u0 += 4) {
      const float* kp[4];
      float d[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t pos = __shfl_sync(kFullMask, pos_l, min(u0 + j, n - 1));  // past n: a valid key, never stored
        kp[j] = a.k + pos * a.k_tok_stride + kh * a.k_head_stride;
        d[j] = 0.0f;
      }
#pragma unroll
      for (int m = 0; m < CPL; ++m) {
        const int64_t c = lane + 32 * m;
        if (c < a.Dk) {
          float kv[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) kv[j] = kp[j][c];
#pragma unroll
          for (int j = 0; j < 4; ++j) d[j] = add(d[j], mul(qv[m], kv[j]));
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float v = warp_fold(d[j]);
        if (lane == 0 && u0 + j < n) s[u0 + j] = mul(v, a.scale);
      }
    }
  }
}

__global__ void __launch_bounds__(kSplitWarps * 32) attention_split_output_kernel(AttnParams P, int64_t t0, const float* sc) {
  pdl_begin();
  const AttentionArgs& a = P.a;
  const int64_t tq = blockIdx.y, t = t0 + tq;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t h = static_cast<int64_t>(blockIdx.z) * kSplitWarps + warp;
  if (h >= a.Hq) return;  // a whole warp; nothing below synchronises the block
  const int32_t* keys = P.keys ? P.keys + t * a.sel_k : nullptr;
  const int64_t nkeys = split_key_count(P, t, lane);
  const int64_t kh = h / (a.Hq / a.Hk);
  const float* s = sc + (tq * a.Hq + h) * P.maxk;
  float m = -INFINITY;
  for (int64_t i = lane; i < nkeys; i += 32) m = fmaxf(m, s[i]);
  for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
  const int64_t d0 = static_cast<int64_t>(blockIdx.x) * kSplitCols + 4 * lane;
  const bool act = d0 < a.Dv;  // Dv % 4 == 0 (attention_split_fits)
  const float* vh = a.v + kh * a.v_head_stride + d0;
  float sum = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t c = 0; c < nkeys; c += 32) {
    const int64_t i = c + lane;
    const float p_l = i < nkeys ? expf(__fsub_rn(s[i], m)) : 0.0f;
    const int64_t pos_l = i < nkeys ? (keys ? keys[i] : i) : 0;
    const int n = static_cast<int>(min(int64_t{32}, nkeys - c));
    for (int u0 = 0; u0 < n; u0 += 8) {
      float pv[8];
      float4 vv[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {  // every load of the 8 keys before their adds
        const int src = min(u0 + u, n - 1);  // past n: a valid key, never added
        pv[u] = __shfl_sync(kFullMask, p_l, src);
        const int64_t pos = __shfl_sync(kFullMask, pos_l, src);
        // A plain (L1-cached) load: the block's warps are heads reading the same value rows, so 3 of 4 hit L1
        // (__ldcg would fetch each from L2 four times: ~0.4 GB a step for 96 heads over 2,048 keys).
        vv[u] = act ? *reinterpret_cast<const float4*>(vh + pos * a.v_tok_stride) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (u0 + u >= n) break;
        sum = add(sum, pv[u]);
        o[0] = add(o[0], mul(pv[u], vv[u].x));
        o[1] = add(o[1], mul(pv[u], vv[u].y));
        o[2] = add(o[2], mul(pv[u], vv[u].z));
        o[3] = add(o[3], mul(pv[u], vv[u].w));
      }
    }
  }
  if (!act) return;
  float* out = a.out + (t * a.Hq + h) * a.Dv + d0;
#pragma unroll
  for (int j = 0; j < 4; ++j) out[j] = nkeys ? mul(o[j], 1.0f / sum) : 0.0f;
}

// Dense causal attention (query t's keys are 0 .. its last visible position: no DSA selection, or one that
// selects every visible key, as a DSA layer's while the context is at most index_topk) for QN consecutive
// queries of one head per block. attention_kernel gives each (query, head) a block of its own, so every
// block reads its keys' rows and values from L2 again: a 1,024-token prompt pass of the K3.1 slice's DSA
// layer (128 heads, keys of 192 and values of 128 floats) read ~86 GB from L2 and took 25 ms (H100,
// 2026-12-06). Here a block loads each key row and value once for its QN queries. Every score is still
// its (query, key) warp_dot chain (lane l over columns l, l + 32, ... in order, then warp_fold) times the
// scale, each softmax's max the max of its query's scores, and each output column its query's sums over
// the keys in key order (sum of p, and of p * v), then o * (1 / sum): attention_kernel's operations for
// every (query, key), so its bits, whatever QN and however the queries fall into blocks.
// Queries per block: 8 by default, 16 under attention_multi_queries() (FERRY_ATTN_MULTI=16: not measured
// yet; half the key and value loads again, twice the registers of sums: kChunk keys per load round then 4).
constexpr int kAttnMultiMaxDk = 1024;  // q rows in shared memory: QN x Dk floats

// Keys query j of a multi kernel's block sees: positions 0 .. its last visible one (0 past the block's nqb
// queries).
__device__ __forceinline__ int query_keys(const AttentionArgs& a, int64_t t0, int64_t j0, int j, int nqb) {
  const int64_t last = min(a.L - 1, a.q_pos0 + t0 + j0 + j);
  return j < nqb && last >= 0 ? static_cast<int>(last + 1) : 0;
}

// The multi kernels' queries of a block: nk[j] = query_keys of query j, maxn the most of them.
template <int QN>
__device__ __forceinline__ int multi_keys(const AttentionArgs& a, int64_t t0, int64_t j0, int nqb, int (&nk)[QN]) {
  int maxn = 0;
#pragma unroll
  for (int j = 0; j < QN; ++j) {
    nk[j] = query_keys(a, t0, j0, j, nqb);
    maxn = max(maxn, nk[j]);
  }
  return maxn;
}

// The multi kernels' softmax and output, after the scores of the block's queries are in sc: each query's
// max over its scores, p = exp(s - max) in place, then per output column every query's sums over the keys
// in key order (sum of p, and of p * v) and o * (1 / sum). Thread x takes columns x, x + blockDim, ...; per
// chunk of keys it loads their values once and every query's probabilities. A chunk that every query of a full
// block sees whole (all but the last few chunks) skips the per-key tests and clamps and loads the
// probabilities as float4 (the 1,024-token pass's attention 12.0 -> 9.7 ms, H100, 2026-12-07b).
// HOIST (FERRY_ATTN_REG=3): each query's sum of p taken once, by lane j of warp 0 in key order from 0 (the
// chain every output column repeated: one add of ~3 per key, query and column), before the output loop; the
// same additions, so the same bits.
template <int QN, bool HOIST = false>
__device__ __forceinline__ void multi_softmax_output(const AttnParams& P, int64_t t0, int64_t h, int64_t j0, int nqb,
                                                     const int (&nk)[QN], int maxn, float* sc, float* sh) {
  const AttentionArgs& a = P.a;
  const int64_t kh = h / (a.Hq / a.Hk);
#pragma unroll
  for (int j = 0; j < QN; ++j) {
    if (j >= nqb) break;  // the same in every thread
    float* s = sc + ((j0 + j) * a.Hq + h) * P.maxk;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < nk[j]; i += blockDim.x) m = fmaxf(m, s[i]);
    m = block_max(m, sh);
    for (int64_t i = threadIdx.x; i < nk[j]; i += blockDim.x) s[i] = expf(__fsub_rn(s[i], m));
  }
  __syncthreads();
  constexpr int kChunk = QN >= 16 ? 4 : 8;
  const float* vh = a.v + kh * a.v_head_stride;
  const float* sq = sc + (j0 * a.Hq + h) * P.maxk;
  const int64_t sstride = a.Hq * P.maxk;  // from query j to j + 1
  if constexpr (HOIST) {
    if (threadIdx.x < QN) {  // sh's maxima are all read: every thread passed the barrier above
      const int j = threadIdx.x;
      const int nkj = query_keys(a, t0, j0, j, nqb);  // nk[j]: a register array, not indexed by a thread's j
      const float* s = sq + j * sstride;
      float acc = 0.0f;
      for (int64_t i0 = 0; i0 < nkj; i0 += 8) {
        float pv[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) pv[u] = i0 + u < nkj ? s[i0 + u] : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; ++u)
          if (i0 + u < nkj) acc = add(acc, pv[u]);
      }
      sh[j] = acc;
    }
    __syncthreads();
  }
  const bool full_block = nqb == QN;
  // Float4 loads of a query's probabilities: rows of a multiple of 4 floats from a 16-byte aligned scratch.
  const bool vec = (P.maxk & 3) == 0 && (reinterpret_cast<uintptr_t>(sc) & 15) == 0;
  for (int64_t d0 = threadIdx.x; d0 < a.Dv; d0 += blockDim.x) {
    float sum[QN], o[QN];
#pragma unroll
    for (int j = 0; j < QN; ++j) sum[j] = o[j] = 0.0f;
    for (int64_t i0 = 0; i0 < maxn; i0 += kChunk) {
      float vv[kChunk], pv[kChunk][QN];
      if (full_block && i0 + kChunk <= nk[0]) {
        // Every query of the block sees every key of the chunk (nk rises with j): no clamps, no tests, and the
        // probabilities in float4 loads where the rows allow. The same additions in the same order.
#pragma unroll
        for (int u = 0; u < kChunk; ++u) vv[u] = vh[(i0 + u) * a.v_tok_stride + d0];
        if (vec) {
#pragma unroll
          for (int j = 0; j < QN; ++j)
#pragma unroll
            for (int u = 0; u < kChunk; u += 4) {
              const float4 f = *reinterpret_cast<const float4*>(sq + j * sstride + i0 + u);
              pv[u][j] = f.x; pv[u + 1][j] = f.y; pv[u + 2][j] = f.z; pv[u + 3][j] = f.w;
            }
        } else {
#pragma unroll
          for (int u = 0; u < kChunk; ++u)
#pragma unroll
            for (int j = 0; j < QN; ++j) pv[u][j] = sq[j * sstride + i0 + u];
        }
#pragma unroll
        for (int u = 0; u < kChunk; ++u)
#pragma unroll
          for (int j = 0; j < QN; ++j) {
            if (!HOIST) sum[j] = add(sum[j], pv[u][j]);
            o[j] = add(o[j], mul(pv[u][j], vv[u]));
          }
        continue;
      }
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        const int64_t i = min(i0 + u, static_cast<int64_t>(maxn) - 1);  // past the end: a valid key, never added
        vv[u] = vh[i * a.v_tok_stride + d0];
#pragma unroll
        for (int j = 0; j < QN; ++j) pv[u][j] = i < nk[j] ? sq[j * sstride + i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
#pragma unroll
        for (int j = 0; j < QN; ++j)
          if (i0 + u < nk[j]) {
            if (!HOIST) sum[j] = add(sum[j], pv[u][j]);
            o[j] = add(o[j], mul(pv[u][j], vv[u]));
          }
      }
    }
#pragma unroll
    for (int j = 0; j < QN; ++j)
      if (j < nqb) a.out[((t0 + j0 + j) * a.Hq + h) * a.Dv + d0] = nk[j] ? mul(o[j], 1.0f / (HOIST ? sh[j] : sum[j])) : 0.0f;
  }
}

template <int QN>
__global__ void __launch_bounds__(kAttnThreads) attention_multi_kernel(AttnParams P, int64_t t0, int64_t nq, float* sc) {
  pdl_begin();
  extern __shared__ __align__(16) float qs[];  // [QN][Dk]: the block's query rows of head h
  __shared__ float sh[32];
  const AttentionArgs& a = P.a;
  const int64_t h = blockIdx.x, j0 = static_cast<int64_t>(blockIdx.y) * QN;  // first query, within the group
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int nqb = static_cast<int>(min(static_cast<int64_t>(QN), nq - j0));
  const int64_t kh = h / (a.Hq / a.Hk), Dk = a.Dk;
  int nk[QN];  // keys of each query (0 past the block's queries)
  const int maxn = multi_keys<QN>(a, t0, j0, nqb, nk);
  for (int64_t i = threadIdx.x; i < QN * Dk; i += blockDim.x) {  // rows past the block's queries: zeros
    const int64_t j = i / Dk, c = i - j * Dk;
    qs[i] = j < nqb ? a.q[(t0 + j0 + j) * a.q_tok_stride + h * a.q_head_stride + c] : 0.0f;
  }
  __syncthreads();
  // Scores: warp w takes keys w, w + nw, ...; a lane loads its columns of the key row once (8 at a time)
  // and adds their products into each query's chain.
  for (int64_t i = warp; i < maxn; i += nw) {
    const float* kp = a.k + i * a.k_tok_stride + kh * a.k_head_stride;
    float d[QN];
#pragma unroll
    for (int j = 0; j < QN; ++j) d[j] = 0.0f;
    for (int64_t c0 = lane; c0 < Dk; c0 += 32 * 8) {
      float kv[8];
#pragma unroll
      for (int m = 0; m < 8; ++m) kv[m] = c0 + 32 * m < Dk ? kp[c0 + 32 * m] : 0.0f;
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        if (c0 + 32 * m >= Dk) break;
#pragma unroll
        for (int j = 0; j < QN; ++j) d[j] = add(d[j], mul(qs[j * Dk + c0 + 32 * m], kv[m]));
      }
    }
#pragma unroll
    for (int j = 0; j < QN; ++j) {
      const float v = warp_fold(d[j]);
      if (lane == 0 && i < nk[j]) sc[((j0 + j) * a.Hq + h) * P.maxk + i] = mul(v, a.scale);
    }
  }
  __syncthreads();
  multi_softmax_output<QN>(P, t0, h, j0, nqb, nk, maxn, sc, sh);
}

// attention_multi_kernel<8> for keys of at most kAttnRegMaxDk floats (K3.1's MLA prompt pass: 192), with the
// query rows in registers and the grid head-major (attention_reg()): lane l holds columns l, l + 32, ..
// (at most 8) of its block's 8 query rows, so a product's query value is a register, not a shared-memory load;
// a warp scores two keys (w and w + nw) per round, 16 chains in flight; the blocks of one head run together
// (blockIdx.y the head, the last queries' blocks, which see the most keys, first), so that head's key rows
// and values stay in L2 for all its blocks instead of every head's at once. Every score is still its (query,
// key) chain over the lane's columns in order, warp_fold, times the scale, then multi_softmax_output: the
// bits of attention_multi_kernel.
//
// FOLD (attention_reg() == 2): the round's 16 (query, key) chains are folded over the warp at once instead of
// by 16 warp_folds (5 shuffles and 5 adds each, the sum in lane 0 only). Every lane stores its 16 partials to
// a row of the warp's shared buffer; lane p (< 16) then adds pair p's partials of the even lanes and lane
// p + 16 those of the odd lanes, each in warp_fold's tree, and one shuffle adds the two halves: warp_fold's
// additions of the same values (lane l + lane l + 16, then + 8, + 4, + 2, + 1: its last add is the even
// lanes' sum plus the odd lanes'), so its bits. Lane p then stores pair p's score.
constexpr int kAttnRegMaxDk = 256;
constexpr int kAttnFoldPairs = 16;  // a round of the FOLD kernel: 2 keys x 8 queries

// The FOLD kernel's fold of one round: pv[0..7] the lane's partials of key 0 for queries 0..7, pv[8..15] of
// key 1. Returns, in lane p < 16, pair p's warp_fold sum (key p / 8, query p % 8); other lanes: undefined.
// buf: the warp's 32 x 16 floats of shared memory, 16-byte aligned. A row is 4 float4 chunks, chunk c stored
// at c ^ ((row >> 1) & 3): conflict-free for the rows' float4 stores and for the column reads.
__device__ __forceinline__ float fold_pairs(const float (&pv)[kAttnFoldPairs], float* buf, int lane) {
  __syncwarp();  // the previous round's reads are done
  float* row = buf + lane * kAttnFoldPairs;
#pragma unroll
  for (int c = 0; c < 4; ++c)
    *reinterpret_cast<float4*>(row + ((c ^ ((lane >> 1) & 3)) << 2)) =
        make_float4(pv[4 * c], pv[4 * c + 1], pv[4 * c + 2], pv[4 * c + 3]);
  __syncwarp();
  const int p = lane & 15, half = lane >> 4;  // pair p; rows (lanes) 2 r + half
  float w[16];
#pragma unroll
  for (int r = 0; r < 16; ++r)
    w[r] = buf[(2 * r + half) * kAttnFoldPairs + ((((p >> 2) ^ (r & 3))) << 2) + (p & 3)];
  // warp_fold's levels on the lanes 2 r + half: + 16 lanes (r + 8), + 8 (r + 4), + 4 (r + 2), + 2 (r + 1).
#pragma unroll
  for (int r = 0; r < 8; ++r) w[r] = add(w[r], w[r + 8]);
#pragma unroll
  for (int r = 0; r < 4; ++r) w[r] = add(w[r], w[r + 4]);
#pragma unroll
  for (int r = 0; r < 2; ++r) w[r] = add(w[r], w[r + 2]);
  const float x = add(w[0], w[1]);
  return add(x, __shfl_down_sync(kFullMask, x, 16));  // + 1 lane: the even lanes' sum + the odd lanes'
}

// HOIST: 3 blocks a SM (170 registers; 180 unbounded, so 2 blocks; the others keep their bounds of before).
template <bool FOLD, bool HOIST = false>
__global__ void __launch_bounds__(kAttnThreads, HOIST ? 3 : 0) attention_multi_reg_kernel(AttnParams P, int64_t t0, int64_t nq,
                                                                           float* sc) {
  constexpr int QN = 8;
  pdl_begin();
  __shared__ float sh[32];
  __shared__ __align__(16) float fold_buf[FOLD ? kAttnThreads / 32 : 1][FOLD ? 32 * kAttnFoldPairs : 4];
  const AttentionArgs& a = P.a;
  const int64_t h = blockIdx.y, j0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * QN;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int nqb = static_cast<int>(min(static_cast<int64_t>(QN), nq - j0));
  const int64_t kh = h / (a.Hq / a.Hk);
  const int Dk = static_cast<int>(a.Dk);
  int nk[QN];
  const int maxn = multi_keys<QN>(a, t0, j0, nqb, nk);
  float qr[QN][8];  // query j's column lane + 32 m (0 past Dk or the block's queries)
#pragma unroll
  for (int j = 0; j < QN; ++j)
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int c = lane + 32 * m;
      qr[j][m] = j < nqb && c < Dk ? a.q[(t0 + j0 + j) * a.q_tok_stride + h * a.q_head_stride + c] : 0.0f;
    }
  for (int64_t i = warp; i < maxn; i += 2 * nw) {
    const int64_t i1 = i + nw;  // the round's second key (past maxn: loads key i again, never stored)
    const float* kp0 = a.k + i * a.k_tok_stride + kh * a.k_head_stride;
    const float* kp1 = i1 < maxn ? a.k + i1 * a.k_tok_stride + kh * a.k_head_stride : kp0;
    float k0[8], k1[8];
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int c = lane + 32 * m;
      k0[m] = c < Dk ? kp0[c] : 0.0f;
      k1[m] = c < Dk ? kp1[c] : 0.0f;
    }
    float d0[QN], d1[QN];
#pragma unroll
    for (int j = 0; j < QN; ++j) d0[j] = d1[j] = 0.0f;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      if (lane + 32 * m >= Dk) break;
#pragma unroll
      for (int j = 0; j < QN; ++j) {
        d0[j] = add(d0[j], mul(qr[j][m], k0[m]));
        d1[j] = add(d1[j], mul(qr[j][m], k1[m]));
      }
    }
    if constexpr (FOLD) {
      float pv[kAttnFoldPairs];
#pragma unroll
      for (int j = 0; j < QN; ++j) {
        pv[j] = d0[j];
        pv[QN + j] = d1[j];
      }
      const float v = fold_pairs(pv, fold_buf[warp], lane);
      const int j = lane & (QN - 1);
      const int64_t key = lane & QN ? i1 : i;
      if (lane < kAttnFoldPairs && key < query_keys(a, t0, j0, j, nqb))
        sc[((j0 + j) * a.Hq + h) * P.maxk + key] = mul(v, a.scale);
    } else {
#pragma unroll
      for (int j = 0; j < QN; ++j) {
        const float v0 = warp_fold(d0[j]), v1 = warp_fold(d1[j]);
        if (lane == 0 && i < nk[j]) sc[((j0 + j) * a.Hq + h) * P.maxk + i] = mul(v0, a.scale);
        if (lane == 0 && i1 < nk[j]) sc[((j0 + j) * a.Hq + h) * P.maxk + i1] = mul(v1, a.scale);
      }
    }
  }
  __syncthreads();
  multi_softmax_output<QN, HOIST>(P, t0, h, j0, nqb, nk, maxn, sc, sh);
}

// Warp per (query t, key s): score[t, s] = sum_h w[t,h] * relu(q[t,h,:] . k[s,:]), CPU order.
// The heads' dot products of a key are independent; only their weighted sum runs in head order. So a warp
// may compute HEADS dots at once (HEADS chains of loads and lane folds in flight instead of one: a decode
// step's DSA layer spent 30.8 us here with a head at a time, H200, 2026-12-02) and then add them to acc in
// head order: the same operations in the same order for every HEADS, the CPU's bits. HEADS = 8 under
// attention_ilp() (off until measured on the GPU), else 1.
template <int HEADS>
__global__ void indexer_scores_kernel(const float* q, const float* k, const float* w, int64_t L, int64_t Hi,
                                      int64_t Di, int64_t q_pos0, float* score) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t t = blockIdx.y;
  const int64_t s = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int64_t lim = min(L, q_pos0 + t + 1), visible = lim > 0 ? lim : 0;
  if (s >= visible) return;
  const float* kr = k + s * Di;
  float acc = 0.0f;
  for (int64_t h0 = 0; h0 < Hi; h0 += HEADS) {
    // warp_dot of each head, the HEADS chains interleaved in one loop over the columns.
    const int nh = static_cast<int>(min(static_cast<int64_t>(HEADS), Hi - h0));
    const float* qh = q + (t * Hi + h0) * Di;
    float d[HEADS];
#pragma unroll
    for (int j = 0; j < HEADS; ++j) d[j] = 0.0f;
    for (int64_t i = lane; i < Di; i += 32) {
      const float kv = kr[i];
#pragma unroll
      for (int j = 0; j < HEADS; ++j)
        if (j < nh) d[j] = add(d[j], mul(qh[j * Di + i], kv));
    }
#pragma unroll
    for (int j = 0; j < HEADS; ++j) d[j] = warp_fold(d[j]);
#pragma unroll
    for (int j = 0; j < HEADS; ++j)
      if (h0 + j < Hi) acc = add(acc, mul(w[t * Hi + h0 + j], d[j] < 0.0f ? 0.0f : d[j]));  // std::max(d, 0.0f)
  }
  if (lane == 0) score[t * L + s] = acc;
}

// The DSA selection on the device (indexer_topk under device_select(); select_bits.cuh says what and how): block
// t selects query t's min(topk, visible) best positions of score[t, 0 .. visible) into sel[t, 0 .. topk), ascending,
// -1 padded: the positions of cpu::indexer_select with ties by position. kSelectThreads threads a query.
constexpr int kSelectThreads = 512;

// Exclusive prefix sum over the block of v (thread order), and the block's total; every thread calls it.
__device__ __forceinline__ uint32_t block_exclusive_sum(uint32_t v, uint32_t* warp_sums, uint32_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  uint32_t x = v;  // inclusive within the warp
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t y = __shfl_up_sync(kFullMask, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  uint32_t before = 0, all = 0;
  for (int i = 0; i < nw; ++i) {
    const uint32_t s = warp_sums[i];
    before += i < warp ? s : 0u;
    all += s;
  }
  __syncthreads();  // warp_sums is free for the next call
  total = all;
  return before + x - v;
}

__global__ void __launch_bounds__(kSelectThreads) indexer_select_kernel(const float* score, int64_t L, int64_t q_pos0,
                                                                         int64_t topk, int32_t* sel) {
  pdl_begin();
  __shared__ uint32_t hist[select::kBins];
  __shared__ uint32_t warp_sums[kSelectThreads / 32];
  __shared__ uint32_t picked[2];  // the prefix so far, need
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x;
  const float* s = score + t * L;
  int32_t* out = sel + t * topk;
  const int64_t lim = min(L, q_pos0 + t + 1), visible = lim > 0 ? lim : 0;
  if (visible <= topk) {  // every visible key
    for (int64_t i = tid; i < topk; i += blockDim.x) out[i] = i < visible ? static_cast<int32_t>(i) : -1;
    return;
  }
  uint32_t prefix = 0, need = static_cast<uint32_t>(topk);
  for (int pass = 0; pass < select::kPasses; ++pass) {
    const int shift = select::digit_shift(pass);
    const uint32_t hm = select::high_mask(pass);
    for (int i = tid; i < select::kBins; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int64_t i = tid; i < visible; i += blockDim.x) {
      const uint32_t k = select::order_key(s[i]);
      if ((k & hm) == (prefix & hm)) atomicAdd(&hist[(k >> shift) & (select::kBins - 1)], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t nd = need;
      const int d = select::pick_digit(hist, nd);
      picked[0] = prefix | (static_cast<uint32_t>(d) << shift);
      picked[1] = nd;
    }
    __syncthreads();
    prefix = picked[0];
    need = picked[1];
  }
  // Position order, a tile of blockDim.x positions at a time: the counts of keys above k* and equal to it before
  // each position, packed in one sum (16 bits each: a tile has at most kSelectThreads of either).
  uint32_t gt_base = 0, eq_base = 0;
  for (int64_t c0 = 0; c0 < visible; c0 += blockDim.x) {
    const int64_t p = c0 + tid;
    const uint32_t k = p < visible ? select::order_key(s[p]) : 0u;
    const uint32_t gt = p < visible && k > prefix, eq = p < visible && k == prefix;
    uint32_t total;
    const uint32_t before = block_exclusive_sum(gt | (eq << 16), warp_sums, total);
    const uint32_t gt_before = gt_base + (before & 0xFFFFu), eq_before = eq_base + (before >> 16);
    if (p < visible && select::kept(k, prefix, eq_before, need))
      out[select::out_index(gt_before, eq_before, need)] = static_cast<int32_t>(p);
    gt_base += total & 0xFFFFu;
    eq_base += total >> 16;
  }
  // visible > topk: the topk slots all hold positions, no -1.
}

// Attention residuals where row_norm.cu's cluster kernel does not take them (more than rownorm::kMaxInputs
// inputs, rows longer than rownorm::kMaxDim, or FERRY_ROW_CLUSTER=0), in two launches. Scores: block (s, t) reduces vs[s] row t
// in the part order (row_norm.cuh), as the cluster kernel does; mix: block (d-chunk, t) takes the softmax
// of row t's nv scores (thread 0, in order s) and sums the vectors.
__global__ void attn_res_scores_kernel(const float* const* vs, int64_t nv, const float* w, int64_t D, float eps,
                                       float* scores) {
  pdl_begin();
  __shared__ double sh[32];
  const int64_t s = blockIdx.x, t = blockIdx.y;
  const float* v = vs[s] + t * D;
  const double ss =
      rownorm::part_order_sum(D, [&](int64_t i) { return static_cast<double>(v[i]) * v[i]; }, sh);
  const auto inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(D) + eps));
  const double sc =
      rownorm::part_order_sum(D, [&](int64_t i) { return static_cast<double>(mul(v[i], inv)) * w[i]; }, sh);
  if (threadIdx.x == 0) scores[t * nv + s] = static_cast<float>(sc);
}

__global__ void attn_res_mix_kernel(const float* const* vs, int64_t nv, const float* scores, int64_t D, float* out) {
  pdl_begin();
  extern __shared__ float p[];  // nv weights, then nv pointers
  const float** vp = reinterpret_cast<const float**>(p + ((nv + 1) & ~int64_t{1}));
  const int64_t t = blockIdx.y;
  for (int64_t s = threadIdx.x; s < nv; s += blockDim.x) vp[s] = vs[s] + t * D;
  if (threadIdx.x == 0) rownorm::res_softmax(scores + t * nv, nv, p);
  __syncthreads();
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float o = 0.0f;
  for (int64_t s = 0; s < nv; ++s) o = add(o, mul(p[s], vp[s][d]));
  out[t * D + d] = o;
}

// attention_multi_kernel<QN> for queries [t0, t0 + nq) of the launch group (QN: 8 or 16).
template <int QN>
void launch_attention_multi_q(const AttnParams& P, int64_t t0, int64_t nq, float* sc, cudaStream_t st) {
  static const bool raised = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(attention_multi_kernel<QN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(QN * kAttnMultiMaxDk * sizeof(float))));
    return true;
  }();
  (void)raised;
  const dim3 grid(static_cast<unsigned>(P.a.Hq), static_cast<unsigned>((nq + QN - 1) / QN));
  launch_small(attention_multi_kernel<QN>, grid, kAttnThreads, static_cast<size_t>(QN * P.a.Dk) * sizeof(float), st, P,
               t0, nq, sc);
}

void launch_attention_multi(int qn, const AttnParams& P, int64_t t0, int64_t nq, float* sc, cudaStream_t st) {
  if (qn >= 16) return launch_attention_multi_q<16>(P, t0, nq, sc, st);
  const int reg = attention_reg();
  if (P.a.Dk <= kAttnRegMaxDk && P.a.Hq <= 65535 && reg) {
    const dim3 grid(static_cast<unsigned>((nq + 7) / 8), static_cast<unsigned>(P.a.Hq));
    if (reg == 3) return launch_small(attention_multi_reg_kernel<true, true>, grid, kAttnThreads, 0, st, P, t0, nq, sc);
    if (reg == 2) return launch_small(attention_multi_reg_kernel<true>, grid, kAttnThreads, 0, st, P, t0, nq, sc);
    return launch_small(attention_multi_reg_kernel<false>, grid, kAttnThreads, 0, st, P, t0, nq, sc);
  }
  launch_attention_multi_q<8>(P, t0, nq, sc, st);
}

}  // namespace

void CudaBackend::rope(float* x, int64_t T, int64_t n_heads, int64_t tok_stride, int64_t head_stride, int64_t offset,
                       const int32_t* pos_host, const RopeParams& rope) {
  const int64_t half = rope.dim / 2;
  if (T <= 0 || n_heads <= 0 || half <= 0) return;
  bind();
  const auto* pos = static_cast<const int32_t*>(stage(kPos, pos_host, static_cast<size_t>(T) * sizeof(int32_t)));
  const auto* freq = static_cast<const float*>(stage(kFreq, rope.inv_freq_host, static_cast<size_t>(half) * sizeof(float)));
  launch_small(rope_kernel, static_cast<unsigned>(T), 256, 0, stream_, x, n_heads, tok_stride, head_stride, offset, pos,
               freq, half, rope.attention_factor, rope.interleaved);
}

namespace {
std::atomic<int64_t> g_split_calls{0};
}  // namespace

int64_t attention_split_calls() { return g_split_calls.load(); }

namespace {
bool attention_split_fits(const AttentionArgs& a) {
  return a.Dk <= kSplitMaxDk && a.Dv % 4 == 0 && a.v_tok_stride % 4 == 0 && a.v_head_stride % 4 == 0 &&
         (reinterpret_cast<uintptr_t>(a.v) & 15u) == 0 && a.Hq / kSplitWarps < 65535;
}

void launch_attention_split(const AttnParams& P, int64_t t0, int64_t nq, float* sc, cudaStream_t st) {
  const AttentionArgs& a = P.a;
  const dim3 scores(static_cast<unsigned>((P.maxk + kSplitKeys - 1) / kSplitKeys), static_cast<unsigned>(nq),
                    static_cast<unsigned>((a.Hq + kSplitHeads - 1) / kSplitHeads));
  const int64_t cpl = (a.Dk + 31) / 32;
  const unsigned threads = kSplitWarps * 32;
  if (cpl <= 2)
    launch_small(attention_split_scores_kernel<2>, scores, threads, 0, st, P, t0, sc);
  else if (cpl <= 4)
    launch_small(attention_split_scores_kernel<4>, scores, threads, 0, st, P, t0, sc);
  else if (cpl <= 8)
    launch_small(attention_split_scores_kernel<8>, scores, threads, 0, st, P, t0, sc);
  else if (cpl <= 18)  // MLA's 576-wide latent rows
    launch_small(attention_split_scores_kernel<18>, scores, threads, 0, st, P, t0, sc);
  else
    launch_small(attention_split_scores_kernel<32>, scores, threads, 0, st, P, t0, sc);
  const dim3 output(static_cast<unsigned>((a.Dv + kSplitCols - 1) / kSplitCols), static_cast<unsigned>(nq),
                    static_cast<unsigned>((a.Hq + kSplitWarps - 1) / kSplitWarps));
  launch_small(attention_split_output_kernel, output, threads, 0, st, P, t0, static_cast<const float*>(sc));
  g_split_calls.fetch_add(1);
}
}  // namespace

void CudaBackend::attention(const AttentionArgs& a) {
  if (a.Hk <= 0 || a.Hq % a.Hk != 0)
    throw LimitError("cuda attention: Hq=" + std::to_string(a.Hq) + " is not a multiple of Hk=" + std::to_string(a.Hk));
  if (a.sel && a.sel_k <= 0) throw LimitError("cuda attention: sel given with sel_k <= 0");
  if (a.T <= 0 || a.Hq <= 0) return;
  bind();
  AttnParams P;
  P.a = a;
  P.maxk = a.sel ? a.sel_k : a.L;
  if (a.sel && a.sel_ascending && device_select() && is_device_pointer(a.sel)) {
    // indexer_topk's own device selection: each row's keys are its leading entries (attention_kernel counts
    // them, leading_keys), ascending and visible by construction.
    P.keys = a.sel;
  } else if (a.sel) {
    // Validate on the host (the model passes host memory; a device selection is fetched first) and
    // compact each query's valid entries, keeping their order. A selection of every visible key, in order,
    // is dense attention: it is not staged, and the kernels run as without a selection (the same keys in
    // the same order, so the same bits).
    const size_t ns = static_cast<size_t>(a.T * a.sel_k);
    std::vector<int32_t> sel(ns), keys(ns, 0), counts(static_cast<size_t>(a.T), 0);
    if (is_device_pointer(a.sel))
      download(sel.data(), a.sel, ns * sizeof(int32_t));
    else
      std::copy_n(a.sel, ns, sel.begin());
    bool dense = true;
    for (int64_t t = 0; t < a.T; ++t) {
      const int64_t last = std::min(a.L - 1, a.q_pos0 + t);
      int32_t c = 0;
      for (int64_t i = 0; i < a.sel_k; ++i) {
        const int32_t s = sel[static_cast<size_t>(t * a.sel_k + i)];
        if (s < 0) continue;
        if (s > last)
          throw LimitError("cuda attention: selected key position " + std::to_string(s) + " of query " +
                           std::to_string(t) + " is beyond its last visible position " + std::to_string(last));
        dense = dense && s == c;
        keys[static_cast<size_t>(t * a.sel_k + c++)] = s;
      }
      counts[static_cast<size_t>(t)] = c;
      dense = dense && c == std::max<int64_t>(last + 1, 0);
    }
    if (!dense) {
      P.keys = static_cast<const int32_t*>(stage(kKeys, keys.data(), ns * sizeof(int32_t)));
      P.counts = static_cast<const int32_t*>(stage(kCounts, counts.data(), counts.size() * sizeof(int32_t)));
    }
  }
  const int64_t per_query = a.Hq * std::max<int64_t>(P.maxk, 1);
  const int64_t group = std::clamp<int64_t>(kAttnScratchFloats / per_query, 1, 65535);
  auto* sc = static_cast<float*>(scratch(kScores, static_cast<size_t>(std::min(group, a.T) * per_query) * sizeof(float)));
  const int multi = !P.keys && a.T >= 2 && a.Dk <= kAttnMultiMaxDk ? attention_multi_queries() : 0;
  const bool split = !multi && P.maxk >= kAttnSplitMinKeys && attention_split() && attention_split_fits(a);
  for (int64_t t0 = 0; t0 < a.T; t0 += group) {
    const int64_t nq = std::min(group, a.T - t0);
    if (multi) {
      launch_attention_multi(multi, P, t0, nq, sc, stream_);
      continue;
    }
    if (split) {
      launch_attention_split(P, t0, nq, sc, stream_);
      continue;
    }
    const dim3 grid(static_cast<unsigned>(a.Hq), static_cast<unsigned>(nq));
    if (attention_ilp())
      launch_small(attention_kernel<4, 4>, grid, kAttnThreads, 0, stream_, P, t0, sc);
    else
      launch_small(attention_kernel<1, 1>, grid, kAttnThreads, 0, stream_, P, t0, sc);
  }
}

void CudaBackend::indexer_topk(const float* q, const float* k, const float* w, int64_t T, int64_t L, int64_t Hi,
                               int64_t Di, int64_t q_pos0, int64_t topk, int32_t* sel, IndexerTies ties) {
  if (T <= 0 || topk <= 0) return;
  if (T > 65535) throw LimitError("cuda indexer_topk: " + std::to_string(T) + " queries in one call (max 65535)");
  bind();
  float* sc = nullptr;
  if (L > 0) {
    sc = static_cast<float*>(scratch(kScores, static_cast<size_t>(T * L) * sizeof(float)));
    constexpr int kWarpsPerBlock = 4;
    const dim3 grid(static_cast<unsigned>((L + kWarpsPerBlock - 1) / kWarpsPerBlock), static_cast<unsigned>(T));
    if (attention_ilp())
      launch_small(indexer_scores_kernel<8>, grid, kWarpsPerBlock * 32, 0, stream_, q, k, w, L, Hi, Di, q_pos0, sc);
    else
      launch_small(indexer_scores_kernel<1>, grid, kWarpsPerBlock * 32, 0, stream_, q, k, w, L, Hi, Di, q_pos0, sc);
  }
  const bool on_device = is_device_pointer(sel);
  if (ties == IndexerTies::by_position && device_select()) {
    // The same positions chosen on the device: no scores to the host; into sel directly when it is device memory.
    const size_t nsel = static_cast<size_t>(T * topk);
    auto* dst = on_device ? sel : static_cast<int32_t*>(scratch(kKeys, nsel * sizeof(int32_t)));
    launch_small(indexer_select_kernel, static_cast<unsigned>(T), kSelectThreads, 0, stream_, sc, L, q_pos0, topk, dst);
    if (!on_device) download(sel, dst, nsel * sizeof(int32_t));
    return;
  }
  std::vector<float> score(static_cast<size_t>(T * L));
  if (L > 0) download(score.data(), sc, score.size() * sizeof(float));
  std::vector<int32_t> out(static_cast<size_t>(T * topk)), idx(static_cast<size_t>(std::max<int64_t>(L, 1)));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t visible = std::max<int64_t>(0, std::min(L, q_pos0 + t + 1));
    cpu::indexer_select(score.data() + t * L, visible, L, topk, ties, idx.data(), out.data() + t * topk);
  }
  if (on_device)
    upload(sel, out.data(), out.size() * sizeof(int32_t));
  else
    std::copy(out.begin(), out.end(), sel);
}

void CudaBackend::attn_res_norm(const float* const* vs_host, int64_t nv, const float* w, int64_t T, int64_t D,
                                float eps, float* out, const float* norm_w, float norm_eps, float* y) {
  static_assert(rownorm::kThreads == xprep::kThreads, "the norm's rows are prepared by its own blocks");
  if (T <= 0 || nv <= 0) return;
  if (!fused_ops() || !rownorm::takes(D, nv)) {
    Backend::attn_res_norm(vs_host, nv, w, T, D, eps, out, norm_w, norm_eps, y);
    return;
  }
  res_norm_launch(nullptr, nullptr, vs_host, nv, w, T, D, eps, out, norm_w, norm_eps, y);
}

void CudaBackend::add_attn_res_norm(float* p, const float* a, const float* const* vs_host, int64_t nv, const float* w,
                                    int64_t T, int64_t D, float eps, float* out, const float* norm_w, float norm_eps,
                                    float* y) {
  if (T <= 0 || nv <= 0 || !rownorm::fused_add() || !fused_ops() || !rownorm::takes(D, nv) || vs_host[nv - 1] != p) {
    Backend::add_attn_res_norm(p, a, vs_host, nv, w, T, D, eps, out, norm_w, norm_eps, y);
    return;
  }
  res_norm_launch(p, a, vs_host, nv, w, T, D, eps, out, norm_w, norm_eps, y);
}

void CudaBackend::res_norm_launch(float* add_to, const float* add_from, const float* const* vs_host, int64_t nv,
                                  const float* w, int64_t T, int64_t D, float eps, float* out, const float* norm_w,
                                  float norm_eps, float* y) {
  bind();
  rownorm::Call c = rownorm::Call::attn_res(vs_host, nv, w, D, eps, out);
  c.add_to = add_to;
  c.add_from = add_from;
  c.norm = true;
  c.norm_w = norm_w;
  c.norm_eps = norm_eps;
  c.y = y;
  c.prep = prompt_pass_ ? xprep::Out{} : keep_prepared(y, T, D);
  if (prompt_pass_) keep_x(y, T, D);
  rownorm::launch(c, T, stream_);
}

void CudaBackend::attn_res(const float* const* vs_host, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                           float* out) {
  if (T <= 0 || nv <= 0) return;
  if (rownorm::takes(D, nv)) {
    bind();
    rownorm::launch(rownorm::Call::attn_res(vs_host, nv, w, D, eps, out), T, stream_);
    return;
  }
  if (nv > 4096) throw LimitError("cuda attn_res: " + std::to_string(nv) + " inputs (max 4096)");
  bind();
  if (T > 65535) throw LimitError("cuda attn_res: " + std::to_string(T) + " rows in one call (max 65535)");
  const auto* vs = static_cast<const float* const*>(stage(kPtrs, vs_host, static_cast<size_t>(nv) * sizeof(float*)));
  auto* scores = static_cast<float*>(scratch(kResScores, static_cast<size_t>(T * nv) * sizeof(float)));
  launch_small(attn_res_scores_kernel, dim3(static_cast<unsigned>(nv), static_cast<unsigned>(T)), 256, 0, stream_, vs,
               nv, w, D, eps, scores);
  const size_t smem = static_cast<size_t>((nv + 1) & ~int64_t{1}) * sizeof(float) + static_cast<size_t>(nv) * sizeof(float*);
  launch_small(attn_res_mix_kernel, dim3(blocks_for(D, 256), static_cast<unsigned>(T)), 256, smem, stream_, vs, nv,
               scores, D, out);
}

}  // namespace ferry::cuda
