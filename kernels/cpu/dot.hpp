// The one dot-product reduction every CPU kernel uses (matmul, attention scores, indexer scores).
//
// Order (fixed, part of the exactness contract): element i goes to lane i % 32; each lane accumulates
// in float, in increasing i (acc[l] = acc[l] + x[i]*w[i], a rounded multiply then a rounded add; the
// project builds with -ffp-contract=off so no FMA fuses them); the 32 lanes are then folded pairwise
// (lane l += lane l+16, then l+8, l+4, l+2, l+1). 32 independent lanes let GCC vectorize the loop
// (4 AVX registers or 8 SSE registers) without -ffast-math, and the result is the same bits whatever
// instruction set ran it, because every lane does the same IEEE operations in the same order.
#pragma once

#include <cstdint>

#define FERRY_ALWAYS_INLINE inline __attribute__((always_inline))

namespace ferry::cpu {

constexpr int kLanes = 32;

// acc[l] += x[i] * w[i] for i in [0, n) with l = i % 32; `n` may have any length (a short tail feeds
// the first n % 32 lanes). Callers that split a long vector into pieces must cut at multiples of 32.
FERRY_ALWAYS_INLINE void dot_accum(float* __restrict acc, const float* __restrict x, const float* __restrict w,
                                   int64_t n) {
  float a[kLanes];
  for (int l = 0; l < kLanes; ++l) a[l] = acc[l];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) a[l] = a[l] + x[i + l] * w[i + l];
  for (int l = 0; i + l < n; ++l) a[l] = a[l] + x[i + l] * w[i + l];
  for (int l = 0; l < kLanes; ++l) acc[l] = a[l];
}

// dot_accum for two rows against the same weights (each weight load serves both): per lane exactly
// the operations of two dot_accum calls.
FERRY_ALWAYS_INLINE void dot_accum2(float* __restrict acc0, float* __restrict acc1, const float* __restrict x0,
                                    const float* __restrict x1, const float* __restrict w, int64_t n) {
  float a[kLanes], b[kLanes];
  for (int l = 0; l < kLanes; ++l) a[l] = acc0[l], b[l] = acc1[l];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      a[l] = a[l] + x0[i + l] * w[i + l];
      b[l] = b[l] + x1[i + l] * w[i + l];
    }
  for (int l = 0; i + l < n; ++l) {
    a[l] = a[l] + x0[i + l] * w[i + l];
    b[l] = b[l] + x1[i + l] * w[i + l];
  }
  for (int l = 0; l < kLanes; ++l) acc0[l] = a[l], acc1[l] = b[l];
}

FERRY_ALWAYS_INLINE float lanes_reduce(const float* acc) {
  float a[kLanes];
  for (int l = 0; l < kLanes; ++l) a[l] = acc[l];
  for (int s = kLanes / 2; s >= 1; s /= 2)
    for (int l = 0; l < s; ++l) a[l] = a[l] + a[l + s];
  return a[0];
}

FERRY_ALWAYS_INLINE float dot(const float* x, const float* w, int64_t n) {
  float acc[kLanes] = {};
  dot_accum(acc, x, w, n);
  return lanes_reduce(acc);
}

}  // namespace ferry::cpu
