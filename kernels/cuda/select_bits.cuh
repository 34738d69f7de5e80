// The DSA indexer's selection on the device (attention.cu indexer_select_kernel): the integer pieces of its radix
// select, plain functions so the host checks the algorithm (tests/kernels/cuda_host/select_bits_test.cpp runs it
// serially against cpu::indexer_select).
//
// What is selected (cpu::indexer_select, ties by position): of a query's `visible` scores, the n = min(topk,
// visible) best in the strict order "larger score first, equal scores by lower position"; written as positions
// ascending, then -1 up to topk. The kernel finds the n-th best score's key k* digit by digit (4 passes of 8 bits
// over the keys, a 256-bin histogram each), which leaves `need`: how many of the keys equal to k* are taken. Then
// one pass in position order keeps every key above k* and the first `need` keys equal to it; a kept position's
// place in the output is the number kept before it, (keys above k* before it) + min(keys equal to k* before it,
// need). The result is a set fixed by the order alone, so any thread count and any order of the histogram's
// additions give the same positions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace ferry::cuda::select {

// A score's key: larger for a larger score, the same for -0 and +0 (they compare equal, so the position decides
// between them, as in cpu::indexer_select). Not for NaN (whose place the CPU's order does not define either).
__host__ __device__ inline uint32_t order_key(float f) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(f);
#else
  std::memcpy(&u, &f, sizeof u);
#endif
  if ((u << 1) == 0) u = 0;  // -0 -> +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
constexpr int kPasses = 32 / kDigitBits;

// Pass p (0 first) looks at bits [shift, shift + 8) of the keys whose higher bits equal the prefix found so far.
__host__ __device__ constexpr int digit_shift(int pass) { return 32 - kDigitBits * (pass + 1); }
// The bits above pass p's digit (0 in the first pass: every key takes part).
__host__ __device__ constexpr uint32_t high_mask(int pass) {
  return pass == 0 ? 0u : ~uint32_t{0} << (32 - kDigitBits * pass);
}

// hist[d]: the keys of this pass with digit d. Of the `need` best keys not yet placed (need >= 1, at most the
// histogram's total), the one ranked last has the returned digit; need drops by the keys of every larger digit,
// leaving how many of this digit's keys are still to be taken.
__host__ __device__ inline int pick_digit(const uint32_t* hist, uint32_t& need) {
  for (int d = kBins - 1; d > 0; --d) {
    if (hist[d] >= need) return d;
    need -= hist[d];
  }
  return 0;
}

// Where a kept key goes: above k*, or the (eq_before)-th key equal to k* while eq_before < need.
__host__ __device__ inline bool kept(uint32_t key, uint32_t kstar, uint32_t eq_before, uint32_t need) {
  return key > kstar || (key == kstar && eq_before < need);
}
__host__ __device__ inline uint32_t out_index(uint32_t gt_before, uint32_t eq_before, uint32_t need) {
  return gt_before + (eq_before < need ? eq_before : need);
}

// A row of such a selection is its leading positions, then -1. A warp finds how many lead (attention.cu
// split_key_count) by a 32-way search. Every position in [0, lo) holds a key and every position in [hi, n)
// holds -1. Lane l probes lo + l * count_step(lo, hi); the probes that find a key lead. count_narrow takes how
// many did (j) and shrinks [lo, hi]. It returns true once lo is the count: three rounds for n = 2,048.
__host__ __device__ constexpr int64_t count_step(int64_t lo, int64_t hi) { return (hi - lo + 31) / 32; }
__host__ __device__ inline bool count_narrow(int64_t& lo, int64_t& hi, int j, int64_t step) {
  if (j == 0) {  // lo's own probe found -1
    hi = lo;
    return true;
  }
  const int64_t past = lo + j * step;  // probe j, if it is inside, found -1
  lo += (j - 1) * step + 1;            // probe j - 1 found a key
  if (past < hi) hi = past;
  return lo >= hi;
}

}  // namespace ferry::cuda::select
