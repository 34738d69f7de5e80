// The tensor-core matmuls: x preparation, the prompt pass's plain matmul (matmul_mma.cuh) and the decode
// steps' / verify blocks' plain matmul (matmul_dec.cuh).
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "io/errors.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/gate_act.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_dec.cuh"
#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"
#include "kernels/cuda/matmul_mxt.cuh"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/switches.hpp"
#include "kernels/cuda/xprep.cuh"

namespace ferry::cuda {

namespace {

using namespace mma;

// One block per row: the row's max |x| picks k (max |x * 2^k| in [2^14, 2^15)), then hi / lo (xprep.cuh).
constexpr int kPrepThreads = xprep::kThreads;
constexpr int kPrepGateMaxParts = 8;  // blocks of one row in prep_gate_kernel (the portable cluster size)
using xprep::order_pos;
using xprep::row_scale_exp;

__global__ void __launch_bounds__(kPrepThreads) prep_x_kernel(const float* __restrict__ x, int64_t cols,
                                                              __half* __restrict__ hi, __half* __restrict__ lo,
                                                              float* __restrict__ inv, XOrder order,
                                                              uint8_t* __restrict__ lo8) {
  dec::allow_dependents();  // a decode matmul after this may start its weight copies now
  dec::grid_dependency_wait();  // launch_small may start this before the kernel that wrote x has finished
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kPrepThreads) m = fmaxf(m, fabsf(__ldcg(xr + c)));
  const int k = row_scale_exp(m);
  const float up = __int_as_float((k + 127) << 23), down = __int_as_float((127 - k) << 23);
  __half* hr = hi + r * cols;
  __half* lr = lo ? lo + r * cols : nullptr;
  uint8_t* l8 = lo8 ? lo8 + r * cols : nullptr;
  for (int64_t c = threadIdx.x; c < cols; c += kPrepThreads) {
    const float v = __ldcg(xr + c) * up;  // exact: a power of two, inside the float range
    const __half h = __float2half_rn(v);
    const int64_t d = order_pos(c, order);
    hr[d] = h;
    const float l = v - __half2float(h);  // exact
    if (lr) lr[d] = __float2half_rn(l);
    if (l8) l8[lo8::lo8_pos(c)] = static_cast<uint8_t>(xprep::lo8_pair(l, 0.0f));
  }
  if (threadIdx.x == 0) inv[r] = down;
}

// The same for rows of up to 4 V kPrepThreads floats (16-byte aligned, cols % 16 == 0) in one pass: each
// thread loads its V float4 at once and keeps them in registers for the conversion. The loop kernel
// waits a load latency per step (~6.5 us for one row of 7168 on the H200, as much as a decode
// matmul's own time for small matrices); this one waits for one round of loads. Same k, hi and lo.
template <int V>
__global__ void __launch_bounds__(kPrepThreads) prep_x_reg_kernel(const float* __restrict__ x, int64_t cols,
                                                                  __half* __restrict__ hi, __half* __restrict__ lo,
                                                                  float* __restrict__ inv, XOrder order,
                                                                  uint8_t* __restrict__ lo8) {
  dec::allow_dependents();
  dec::grid_dependency_wait();
  const int64_t r = blockIdx.x;
  const int nv = static_cast<int>(cols / 4);
  const float4* xr = reinterpret_cast<const float4*>(x + r * cols);
  float4 v[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int j = threadIdx.x + i * kPrepThreads;
    v[i] = j < nv ? __ldcg(xr + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  xprep::write_row4<V>(v, cols, r, xprep::Out{hi, lo, inv, order, lo8});
}

// A gated activation (gate_act.cuh) of rows of a and b and its preparation in one pass, as act then
// prep_x_reg_kernel: y (when not null) gets the activation's floats too. A row is a cluster of blocks, block
// (rank) p taking float4 j = p * kPrepThreads * V + t + i * kPrepThreads in v[i]: the row's max |act| is the
// max of the blocks' maxima (distributed shared memory), and every element then goes where write_row4 puts
// it, so the bits of the two launches. (A block per row, the version before, ran a 12,288-column row on one
// SM: 13 us against 6 for the two launches on the H200, 2026-12-03, and 5 % slower decode 2026-12-06.)
template <int V>
__global__ void __launch_bounds__(kPrepThreads) prep_gate_kernel(GateAct act, const float* a, const float* b,
                                                                 int64_t cols, float* y, xprep::Out out) {
  dec::allow_dependents();
  dec::grid_dependency_wait();
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  const int parts = static_cast<int>(cl.num_blocks()), p = static_cast<int>(cl.block_rank());
  const int64_t r = blockIdx.x / parts;
  const int nv = static_cast<int>(cols / 4), j0 = p * kPrepThreads * V;
  const float4* ar = reinterpret_cast<const float4*>(a + r * cols);
  const float4* br = reinterpret_cast<const float4*>(b + r * cols);
  float4* yr = y ? reinterpret_cast<float4*>(y + r * cols) : nullptr;
  // Every load first: y may alias a or b, so a load after a store to y would wait for it.
  float4 v[V], u[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int j = j0 + threadIdx.x + i * kPrepThreads;
    const bool in = j < nv;
    v[i] = in ? __ldcg(ar + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    u[i] = in ? __ldcg(br + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (j0 + threadIdx.x + i * kPrepThreads < nv)
      v[i] = make_float4(gate_value(act, v[i].x, u[i].x), gate_value(act, v[i].y, u[i].y),
                         gate_value(act, v[i].z, u[i].z), gate_value(act, v[i].w, u[i].w));
  }
  if (yr) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int j = j0 + threadIdx.x + i * kPrepThreads;
      if (j < nv) yr[j] = v[i];
    }
  }
  const float rm = rownorm::cluster_max(cl, xprep::max_abs4(v));
  cl.sync();  // every block has read every other's maximum: none leaves while one may still read its own
  const int k = xprep::scale_exp(rm);
  xprep::put_row4<V>(v, cols, r, out, k, j0);
  if (p == 0 && threadIdx.x == 0) out.inv[r] = __int_as_float((127 - k) << 23);
}

constexpr int kPlainMW = 1;  // 128-row tiles (64 activation rows per group)


template <class F, int BN, int S, int L>
__global__ void __launch_bounds__(kThreads, 1) plain_mma_kernel(const __grid_constant__ PlainTc p) {
  extern __shared__ __align__(16) uint8_t smem[];
  item_body<F, BN, S, L, kPlainMW>(p, p.item(blockIdx.x), smem);
}

constexpr int kPlainBN = 64;
constexpr int kPlainStages = 4;  // 213 KB for q8_0: one block of 8 warps per SM

template <class F, int L>
void launch_plain(PlainTc p, cudaStream_t st) {
  constexpr int S = kPlainStages;
  constexpr size_t smem = static_cast<size_t>(stage_bytes<F, kPlainBN, L, kPlainMW>()) * S;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(plain_mma_kernel<F, kPlainBN, S, L>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  p.group = kPlainBN;
  p.bm = tile_rows(kPlainMW);
  p.ntiles = (p.rows + p.bm - 1) / p.bm;
  const int64_t items = static_cast<int64_t>(p.ntiles) * ((p.n + kPlainBN - 1) / kPlainBN);
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda mma matmul: " + std::to_string(items) + " tiles in one call");
  plain_mma_kernel<F, kPlainBN, S, L><<<static_cast<unsigned>(items), kThreads, smem, st>>>(p);
  FERRY_CUDA_LAUNCHED(plain_mma_kernel);
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}
int g_levels_tuned = -1;  // matmul_mma_levels_tune
const bool g_enabled = !env_is("FERRY_MMA", "0");
// Which weights decode steps and verify blocks run on the tensor cores: FERRY_DEC_MMA=0 none, =1 every
// shape the kernels take, default the measured winners (dec_wins).
DecMode g_dec_mode = env_is("FERRY_DEC_MMA", "0") ? DecMode::off : env_is("FERRY_DEC_MMA", "1") ? DecMode::all : DecMode::auto_;


template <class F, int KB, int NRA, int S>
__global__ void __launch_bounds__(dec::kThreads, 4) plain_dec_kernel(const __grid_constant__ PlainTc p) {
  extern __shared__ __align__(16) uint8_t smem[];
  dec::item_body<F, KB, NRA, S>(p, p.item(blockIdx.x), smem);
}

template <class F, int KB, int NRA>
void launch_dec(PlainTc p, cudaStream_t st) {
  constexpr int S = dec::stages<F, KB, NRA>();
  constexpr size_t smem = static_cast<size_t>(dec::Geo<F, KB, NRA>::kStage) * S;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(plain_dec_kernel<F, KB, NRA, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  p.group = NRA;
  p.bm = dec::kRows;
  p.ntiles = (p.rows + p.bm - 1) / p.bm;
  const int64_t items = static_cast<int64_t>(p.ntiles) * ((p.n + NRA - 1) / NRA) * p.parts;
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda matmul: " + std::to_string(items) + " tiles in one call");
  dec::launch_dependent(plain_dec_kernel<F, KB, NRA, S>, static_cast<unsigned>(items), smem, st, p);
}

// Rows per weight read (1, 4, 8 or 16) and the stage width (dec_stage_blocks: quant blocks per warp per
// stage): speed only, never a row's arithmetic (matmul_dec.cuh).
template <class F>
void launch_dec_f(const PlainTc& p, cudaStream_t st) {
  const int kb = p.n <= 4 ? dec_stage_blocks(p.cols) : 1;
  if (p.n <= 1) return kb == 8 ? launch_dec<F, 8, 1>(p, st) : kb == 4 ? launch_dec<F, 4, 1>(p, st) : launch_dec<F, 1, 1>(p, st);
  if (p.n <= 4) return kb == 8 ? launch_dec<F, 8, 4>(p, st) : kb == 4 ? launch_dec<F, 4, 4>(p, st) : launch_dec<F, 1, 4>(p, st);
  if (p.n <= 8) return launch_dec<F, 1, 8>(p, st);
  return launch_dec<F, 1, 16>(p, st);
}

}  // namespace

namespace {
bool tensor_core_shape(const Weight& w) {
  if (w.type != WType::q8_0 && w.type != WType::mxfp4) return false;
  if (w.cols % kK != 0 || w.cols > (int64_t{1} << 30) || w.rows > (int64_t{1} << 30)) return false;
  // 16-byte windows over each row's stage bytes: the last one ends inside the matrix when it starts
  // and ends 16-aligned.
  return (reinterpret_cast<uintptr_t>(w.data) & 15u) == 0 && w.nbytes() % 16 == 0;
}
}  // namespace

bool matmul_mma_supported(const Weight& w) { return g_enabled && tensor_core_shape(w); }

int mma_levels() {
  static const int env = env_level("FERRY_MMA_LEVELS", kDefaultMmaLevels, kLevelsLo8);
  const int l = level_on(g_levels_tuned, env, kLevelsLo8);
  return l >= 1 ? l : kDefaultMmaLevels;
}
void matmul_mma_levels_tune(int levels) { g_levels_tuned = levels; }

int dec_stage_blocks(int64_t cols) {
  // FERRY_DEC_KB=1|4|8 (measurements) caps it; the default takes the widest the columns allow.
  static const int cap = [] {
    const char* v = std::getenv("FERRY_DEC_KB");
    const int k = v ? std::atoi(v) : 8;
    return k >= 8 ? 8 : k >= 4 ? 4 : 1;
  }();
  if (cap >= 8 && cols % 1024 == 0) return 8;
  if (cap >= 4 && cols % 512 == 0) return 4;
  return 1;
}
// Where the decode kernels beat the CUDA-core ones at one row and in blocks (H200, 2026-12-01,
// docs/BENCHMARKS.md): every mxfp4 weight (a 16-expert batch at one row 163 vs 184 us, at 2-16 rows
// 1.1-2.2x), and q8_0 matrices of 12,288 rows and more (12288x7168 at one row 37.1 vs 40.2 us; 16 rows
// 109 vs 138 us). Narrower q8_0 matrices (7,168 rows and fewer: 448 tiles or less for 132 SMs) are
// faster on the CUDA cores at one row (7168x7168 25.2 vs 28.3 us), though not in blocks of 16. A
// function of the weight alone: a row has the same bits alone and in a block, and an expert batch the
// bits of its per-expert matmuls.
bool dec_wins(const Weight& w) { return w.type == WType::mxfp4 || w.rows >= 12288; }

bool matmul_dec_supported(const Weight& w) {
  if (g_dec_mode == DecMode::off || !tensor_core_shape(w)) return false;
  return g_dec_mode == DecMode::all || dec_wins(w);
}
DecMode matmul_dec_mode(DecMode m) {
  const DecMode old = g_dec_mode;
  g_dec_mode = m;
  return old;
}

size_t mma_prep_bytes(int64_t n, int64_t cols) {
  const size_t halves = static_cast<size_t>(n) * static_cast<size_t>(cols);
  return 2 * halves * sizeof(__half) + static_cast<size_t>(n) * sizeof(float) + 512;
}

namespace xprep {
Out prep_layout(void* buf, int64_t n, int64_t cols, bool both_levels, XOrder order, bool lo8) {
  const size_t halves = static_cast<size_t>(n) * static_cast<size_t>(cols);
  if (lo8 && !both_levels && order != XOrder::natural)
    throw LimitError("cuda prep_x: x's lo as E4M3 is written in natural order only");
  xprep::Out o;
  o.hi = static_cast<__half*>(buf);
  if (lo8 && !both_levels)
    o.lo8 = reinterpret_cast<uint8_t*>(o.hi + halves);  // in lo's place (16-byte aligned: the tensor-core kernels' cols % 128 == 0)
  else
    o.lo = both_levels || mma_levels() >= 2 ? o.hi + halves : nullptr;
  o.inv = reinterpret_cast<float*>(static_cast<uint8_t*>(buf) + ((2 * halves * sizeof(__half) + 255) & ~size_t{255}));
  o.order = order;
  return o;
}

mma::XPrep prepared(const Out& o, int64_t cols) {
  XPrep p;
  p.hi = o.hi;
  p.lo = o.lo;
  p.inv = o.inv;
  p.stride = cols;
  p.lo8 = o.lo8;
  return p;
}
}  // namespace xprep

XPrep prep_x(const float* x, int64_t n, int64_t cols, void* buf, cudaStream_t st, bool both_levels, XOrder order,
             bool lo8) {
  const xprep::Out o = xprep::prep_layout(buf, n, cols, both_levels, order, lo8);
  __half* hi = o.hi;
  __half* lo = o.lo;
  float* inv = o.inv;
  uint8_t* l8 = o.lo8;
  if (n > 0) {
    const unsigned grid = static_cast<unsigned>(n);
    const int64_t nv = cols / 4;  // float4 per row, when the rows are 16-byte aligned
    const bool vec = cols % 16 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
    if (vec && nv <= kPrepThreads)
      launch_small(prep_x_reg_kernel<1>, grid, kPrepThreads, 0, st, x, cols, hi, lo, inv, order, l8);
    else if (vec && nv <= 2 * kPrepThreads)
      launch_small(prep_x_reg_kernel<2>, grid, kPrepThreads, 0, st, x, cols, hi, lo, inv, order, l8);
    else if (vec && nv <= 4 * kPrepThreads)
      launch_small(prep_x_reg_kernel<4>, grid, kPrepThreads, 0, st, x, cols, hi, lo, inv, order, l8);
    else if (vec && nv <= 8 * kPrepThreads)
      launch_small(prep_x_reg_kernel<8>, grid, kPrepThreads, 0, st, x, cols, hi, lo, inv, order, l8);
    else if (vec && nv <= 16 * kPrepThreads)
      launch_small(prep_x_reg_kernel<16>, grid, kPrepThreads, 0, st, x, cols, hi, lo, inv, order, l8);
    else if (vec && nv <= 40 * kPrepThreads)  // up to 40,960 columns (a dense FFN's down: 33,792)
      launch_small(prep_x_reg_kernel<40>, grid, kPrepThreads, 0, st, x, cols, hi, lo, inv, order, l8);
    else
      launch_small(prep_x_kernel, grid, kPrepThreads, 0, st, x, cols, hi, lo, inv, order, l8);
  }
  return xprep::prepared(o, cols);
}

bool prep_gate_ok(const float* a, const float* b, const float* y, int64_t cols) {
  const auto al = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return cols > 0 && cols % 16 == 0 && cols <= kPrepGateMaxParts * 16 * 4 * int64_t{kPrepThreads} && al(a) && al(b) &&
         al(y);
}

XPrep prep_gate(const GateAct& act, const float* a, const float* b, int64_t n, int64_t cols, float* y, void* buf,
                cudaStream_t st, bool both_levels, XOrder order, bool lo8) {
  const xprep::Out o = xprep::prep_layout(buf, n, cols, both_levels, order, lo8);
  prep_gate_into(act, a, b, n, cols, y, o, st);
  return xprep::prepared(o, cols);
}

void prep_gate_into(const GateAct& act, const float* a, const float* b, int64_t n, int64_t cols, float* y,
                    const xprep::Out& o, cudaStream_t st) {
  if (!prep_gate_ok(a, b, y, cols)) throw LimitError("cuda prep_gate: rows of " + std::to_string(cols) + " columns or unaligned");
  if (n <= 0) return;
  // A block per kPrepThreads float4 (one each), up to kPrepGateMaxParts blocks a row; longer rows give each
  // thread V of them.
  const int64_t nv = cols / 4;
  const int64_t parts = std::min<int64_t>(kPrepGateMaxParts, (nv + kPrepThreads - 1) / kPrepThreads);
  const int64_t per = (nv + parts * kPrepThreads - 1) / (parts * kPrepThreads);  // float4 per thread
  if (n > 0x7fffffff / parts) throw LimitError("cuda prep_gate: " + std::to_string(n) + " rows in one call");
  const dim3 grid(static_cast<unsigned>(n * parts));
  const auto c = static_cast<unsigned>(parts);
  if (per <= 1)
    launch_small_cluster(c, prep_gate_kernel<1>, grid, kPrepThreads, 0, st, act, a, b, cols, y, o);
  else if (per <= 2)
    launch_small_cluster(c, prep_gate_kernel<2>, grid, kPrepThreads, 0, st, act, a, b, cols, y, o);
  else if (per <= 4)
    launch_small_cluster(c, prep_gate_kernel<4>, grid, kPrepThreads, 0, st, act, a, b, cols, y, o);
  else if (per <= 8)
    launch_small_cluster(c, prep_gate_kernel<8>, grid, kPrepThreads, 0, st, act, a, b, cols, y, o);
  else
    launch_small_cluster(c, prep_gate_kernel<16>, grid, kPrepThreads, 0, st, act, a, b, cols, y, o);
}

void launch_matmul_mma(const Weight& w, const XPrep& xp, int64_t n, float* y, cudaStream_t st) {
  PlainTc p{static_cast<const uint8_t*>(w.data), w.row_bytes(), static_cast<int>(w.rows), static_cast<int>(w.cols),
             xp, y, n, 0, 0, 0};
  if (n > (int64_t{1} << 30)) throw LimitError("cuda mma matmul: " + std::to_string(n) + " rows in one call");
  const int lv = xp.levels();
  const auto levels = [&](auto f) {
    using F = decltype(f);
    if constexpr (!std::is_same_v<F, Q8>) {
      if (lv == 3) return launch_plain<F, 3>(p, st);
    } else if (lv == 3) {
      throw LimitError("cuda mma matmul: x's lo as E4M3 for a weight that is not mxfp4");
    }
    return lv == 2 ? launch_plain<F, 2>(p, st) : launch_plain<F, 1>(p, st);
  };
  if (w.layout == WLayout::mx_tiles) return levels(mxt::MxT{});
  if (w.type == WType::mxfp4) return levels(Mx{});
  levels(Q8{});
}

void launch_matmul_dec(const Weight& w, const XPrep& xp, int64_t n, float* y, cudaStream_t st, const splitk::Bufs& sk) {
  PlainTc p{static_cast<const uint8_t*>(w.data), w.row_bytes(), static_cast<int>(w.rows), static_cast<int>(w.cols),
             xp, y, n, 0, 0, 0};
  p.parts = sk.parts;
  p.unit = sk.unit;
  p.sk = sk;
  if (n > (int64_t{1} << 30)) throw LimitError("cuda matmul: " + std::to_string(n) + " rows in one call");
  if (w.type == WType::mxfp4) return launch_dec_f<dec::Mx>(p, st);
  launch_dec_f<dec::Q8>(p, st);
}

}  // namespace ferry::cuda
