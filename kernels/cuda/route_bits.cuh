// The router's selection on the device (route.cu route_select_kernel, a warp per row): the pieces of its rule
// as plain functions, so the host runs the warp's algorithm serially against route_rows (kernels/model/top_k.hpp;
// tests/kernels/cuda_host/route_bits_test.cpp).
//
// A warp takes a row of e choices (score + bias) in shared memory, lane l owning ids l, l + 32, ...:
// - grouped rules: lane g scores group g (its two largest choices, summed as route_rows sums them), ranks it
//   among the groups by (score desc, group asc), the order of route_rows's stable sort, and the choices of the
//   groups ranked topk_group or later become -inf;
// - k rounds: every lane holds its best unchosen id by (choice desc, id asc); a butterfly over the lanes leaves
//   every lane the row's best, which is the round's pick; its owner marks it chosen and finds its next best.
//   That order is strict and total, so the picks are route_rows's (top_k_desc's) ids in its rank order;
// - lane 0 sums the chosen scores in double in rank order and forms each weight as route_rows does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda::route {

// A lane with nothing left to offer (every id it owns chosen).
constexpr int32_t kNone = INT32_MAX;

// Whether candidate (va, ia) goes before (vb, ib): the larger choice, equal choices by the lower id; kNone last.
__host__ __device__ inline bool before(float va, int32_t ia, float vb, int32_t ib) {
  if (ia == kNone) return false;
  if (ib == kNone) return true;
  return va > vb || (va == vb && ia < ib);
}

// The two largest of a group's choices so far (m1 >= m2; duplicates count twice, as a partial sort keeps them).
__host__ __device__ inline void top2(float v, float& m1, float& m2) {
  if (v > m1) {
    m2 = m1;
    m1 = v;
  } else if (v > m2) {
    m2 = v;
  }
}

// A chosen expert's weight from its score s and the row's sum of chosen scores (double, rank order).
__host__ __device__ inline float weight(float s, double sum, bool renormalize, double routed_scale) {
  float wt = s;
  if (renormalize) wt = static_cast<float>(static_cast<double>(wt) / (sum + 1e-20));
  return static_cast<float>(static_cast<double>(wt) * routed_scale);
}

}  // namespace ferry::cuda::route
