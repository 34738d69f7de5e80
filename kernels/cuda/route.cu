// The router's selection on the device (CudaBackend::route_select_start under device_route(); route_bits.cuh
// says how a warp selects a row). Only the ids and weights go to the host.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/route_bits.cuh"
#include "kernels/cuda/switches.hpp"

namespace ferry::cuda {

namespace {

constexpr int kRouteWarps = 4;                          // rows a block
constexpr size_t kRouteSmemBytes = size_t{48} << 10;    // the choices of kRouteWarps rows, without an opt-in

struct RouteArgs {
  const float* s;     // [n, e] sigmoid scores
  const float* bias;  // [e]
  int64_t n;
  int e, k, n_group, topk_group, per;  // n_group 1: no group restriction
  bool renormalize;                    // and k > 1
  double routed_scale;
  int32_t* ids;  // [n, k]
  float* wts;    // [n, k]
};

__global__ void __launch_bounds__(kRouteWarps * 32) route_select_kernel(RouteArgs a) {
  pdl_begin();
  extern __shared__ float choice_rows[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (row >= a.n) return;
  float* c = choice_rows + warp * a.e;
  const float* s = a.s + row * a.e;
  for (int j = lane; j < a.e; j += 32) c[j] = __fadd_rn(s[j], a.bias[j]);
  __syncwarp();
  if (a.n_group > 1) {
    float gs = -INFINITY;  // lane g: group g's score
    if (lane < a.n_group) {
      float m1 = -INFINITY, m2 = -INFINITY;
      for (int j = lane * a.per; j < (lane + 1) * a.per; ++j) route::top2(c[j], m1, m2);
      gs = __fadd_rn(m1, m2);
    }
    int rank = 0;
    for (int h = 0; h < a.n_group; ++h) {
      const float o = __shfl_sync(kFullMask, gs, h);
      rank += o > gs || (o == gs && h < lane);
    }
    const unsigned keep = __ballot_sync(kFullMask, lane < a.n_group && rank < a.topk_group);
    __syncwarp();
    for (int j = lane; j < a.e; j += 32)
      if (!((keep >> (j / a.per)) & 1u)) c[j] = -INFINITY;
  }
  // This lane's best unchosen id (chosen ones hold NaN); ids ascending, so a strict > keeps the lower of equals.
  float bv = 0.0f;
  int32_t bi = route::kNone;
  const auto rescan = [&] {
    bv = 0.0f;
    bi = route::kNone;
    for (int j = lane; j < a.e; j += 32) {
      const float v = c[j];
      if (isnan(v)) continue;
      if (bi == route::kNone || v > bv) {
        bv = v;
        bi = j;
      }
    }
  };
  rescan();
  int32_t* ids = a.ids + row * a.k;
  for (int r = 0; r < a.k; ++r) {
    float v = bv;
    int32_t i = bi;
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) {
      const float ov = __shfl_xor_sync(kFullMask, v, d);
      const int32_t oi = __shfl_xor_sync(kFullMask, i, d);
      if (route::before(ov, oi, v, i)) {
        v = ov;
        i = oi;
      }
    }
    if (lane == 0) ids[r] = i;
    if (i != route::kNone && (i & 31) == lane) {
      c[i] = NAN;
      rescan();
    }
  }
  if (lane == 0) {
    double sum = 0;
    for (int r = 0; r < a.k; ++r) sum = __dadd_rn(sum, static_cast<double>(s[ids[r]]));
    for (int r = 0; r < a.k; ++r) a.wts[row * a.k + r] = route::weight(s[ids[r]], sum, a.renormalize, a.routed_scale);
  }
}

}  // namespace

bool CudaBackend::route_select_start(const float* scores, const float* bias, const RouteRule& rule, int64_t n,
                                     uint32_t* picked_host) {
  if (n <= 0 || !device_route_for(n)) return false;
  // The kernel's limits (else the host selects): a block's rows of choices in 48 KB, a group per lane, whole
  // groups of at least two.
  const bool grouped = rule.grouped();
  if (rule.k <= 0 || rule.k > rule.e || static_cast<size_t>(rule.e) * sizeof(float) * kRouteWarps > kRouteSmemBytes)
    return false;
  if (grouped && (rule.n_group > 32 || rule.e % rule.n_group != 0 || rule.e / rule.n_group < 2)) return false;
  bind();
  const size_t nk = static_cast<size_t>(n * rule.k);
  auto* out = static_cast<uint32_t*>(scratch(kRoute, 2 * nk * sizeof(uint32_t)));
  RouteArgs a{};
  a.s = scores;
  a.bias = bias;
  a.n = n;
  a.e = static_cast<int>(rule.e);
  a.k = static_cast<int>(rule.k);
  a.n_group = grouped ? static_cast<int>(rule.n_group) : 1;
  a.topk_group = static_cast<int>(rule.topk_group);
  a.per = grouped ? static_cast<int>(rule.e / rule.n_group) : static_cast<int>(rule.e);
  a.renormalize = rule.renormalize && rule.k > 1;
  a.routed_scale = rule.routed_scale;
  a.ids = reinterpret_cast<int32_t*>(out);
  a.wts = reinterpret_cast<float*>(out + nk);
  const auto blocks = static_cast<unsigned>((n + kRouteWarps - 1) / kRouteWarps);
  launch_small(route_select_kernel, blocks, kRouteWarps * 32, static_cast<size_t>(rule.e) * sizeof(float) * kRouteWarps,
               stream_, a);
  download_start(picked_host, out, 2 * nk * sizeof(uint32_t));
  return true;
}

}  // namespace ferry::cuda
