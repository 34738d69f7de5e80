// The router's top-k selection (Model::route_finish): the k best of e choice scores, best first, ties to
// the lower index. The order is a strict total order on (score, index) for scores that are not NaN, so
// the result is unique: this equals std::partial_sort over the indices with the comparator
// `a > b || (a == b && ia < ib)`, which it replaced (a prompt pass's 1,024 rows x 896 experts: 4.5 ms a
// layer with partial_sort on the build machine, 2.8 with this; tests/kernels/model/top_k_test.cpp).
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"

namespace ferry {

// out[0..k): the indices of the k largest v[0..e) (v[i] + bias[i] when bias is given), largest first,
// equal values by increasing index. k <= e. Scores that are NaN have no place in that order (nor had they
// in partial_sort's): a router that gives NaN gives some selection, not a meaningful one.
void top_k_desc(const float* v, const float* bias, int64_t e, int64_t k, int32_t* out);

// The router's selection (RouteRule) of rows [b, end) of s [rows, rule.e] (host memory) with bias [rule.e]: ids
// and wts [rows, rule.k], rank order. Each row from its own scores only, so rows may be split over threads in
// any way with the same results. The back-ends that select themselves (Backend::route_select_start) match it
// to the bit.
void route_rows(const float* s, const float* bias, const RouteRule& rule, int64_t b, int64_t end, int32_t* ids,
                float* wts);

}  // namespace ferry
