// The grouped expert matmul (moe.cuh): work items = (which weight: gate / up, a group of NR rows of a
// piece, a 16-row weight tile), spread in contiguous runs over a grid sized to the GPU (a few blocks
// per SM, each streaming its items through one cp.async pipeline). Each item resolves its piece and
// row pointers and runs the plain fast matmul's body (matmul_fast.cuh), so a row's outputs are
// bit-identical to CudaBackend::matmul of that expert's weight on that row.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_fast.cuh"
#include "kernels/cuda/matmul_dec.cuh"
#include "kernels/cuda/matmul_mma.cuh"
#include "kernels/cuda/matmul_mxt.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/moe_wave.cuh"
#include "kernels/cuda/sm90a/mxt_wave_wgmma.cuh"
#include "kernels/cuda/switches.hpp"
#include "io/errors.hpp"

namespace ferry::cuda {

namespace {

using namespace fast;

constexpr int kO = 4;                   // as matmul_fast.cu
constexpr size_t kShallow = 44 * 1024;  // as matmul_fast.cu

struct GroupArgs {
  GroupTable t;
  int which;  // weight of z = 0: 0 = gate (z = 1: up), 2 = down
  size_t row_bytes;
  int rows, cols;  // of the weight
  const float* x;
  float* y[2];     // gate/up: g, u; down: y
  int ntiles;      // ceil(rows / 16)
  int nb;          // row groups over all pieces (bstart[ncalls])
  int group;       // NR

  // Item j (table_item: z-major, then the pieces' row groups, then 16-row tiles).
  __device__ Item item(int j) const {
    return table_item<Item>(t, j, nb, ntiles, group, kTileRows, rows, cols, which, row_bytes);
  }
  __device__ const float* xrow(const Item& it, int r) const { return x + table_xrow(t, which, it, r) * cols; }
  __device__ float* yrow(const Item& it, int r) const { return table_yrow(t, which, y, rows, it, r); }
  // No split K (items_body needs the names).
  __device__ float* part_row(const Item&, int, int) const { return nullptr; }
  __device__ int* counter(const Item&) const { return nullptr; }
};

// __grid_constant__: the table is indexed with per-block values; without it nvcc would copy the
// whole 2.9 KB parameter into local memory per thread to take its address.
template <class F, int NR, int S>
__global__ void __launch_bounds__(kTileRows / kO * 32, min_blocks<F, NR>())
    grouped_kernel(const __grid_constant__ GroupArgs a, int64_t nitems) {
  extern __shared__ __align__(16) uint8_t smem[];
  int first, last;
  block_items(nitems, gridDim.x, first, last);
  items_body<F, NR, kO, S>(a, first, last, smem);
}

template <class F, int NR, int S>
void launch_s(GroupArgs& a, int nz, cudaStream_t st) {
  constexpr int kThreads = kTileRows / kO * 32;
  constexpr size_t smem = stage_bytes<F, NR>() * S;
  static const int per_sm = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(grouped_kernel<F, NR, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    int b = 0;
    FERRY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, grouped_kernel<F, NR, S>, kThreads, smem));
    return std::max(b, 1);
  }();
  const int64_t nitems = static_cast<int64_t>(nz) * a.nb * a.ntiles;
  const int64_t blocks = fast_grid(nitems, per_sm, std::is_same_v<F, Q8>);
  grouped_kernel<F, NR, S><<<static_cast<unsigned>(blocks), kThreads, smem, st>>>(a, nitems);
  FERRY_CUDA_LAUNCHED(grouped_kernel);
}

// Cuts each piece of t into row groups of `group` rows: bstart[c] = piece c's first group, piece[] =
// each group's piece. Returns the number of groups.
int tabulate_row_groups(GroupTable& t, int group) {
  int nb = 0;
  for (int c = 0; c < t.ncalls; ++c) {
    t.bstart[c] = nb;
    const int groups = (t.m[c] + group - 1) / group;
    for (int g = 0; g < groups; ++g) t.piece[nb + g] = static_cast<uint8_t>(c);
    nb += groups;
  }
  t.bstart[t.ncalls] = nb;
  return nb;
}

// Row groups per piece, then the launch with the plain path's stage depth and grid (matmul_fast.cu).
template <class F, int NR>
void launch_nr(GroupArgs& a, int nz, cudaStream_t st) {
  const int nb = tabulate_row_groups(a.t, NR);
  if (nb == 0) return;
  a.nb = nb;
  a.group = NR;
  a.ntiles = (a.rows + kTileRows - 1) / kTileRows;
  if (fast_shallow(std::is_same_v<F, Q8>)) return launch_s<F, NR, stages<F, NR>(kShallow)>(a, nz, st);
  launch_s<F, NR, stages<F, NR>()>(a, nz, st);
}

// NR (rows sharing one weight read) from the largest piece, as the plain matmul picks it from n: it
// changes which rows share a block, never a row's arithmetic.
template <class F>
void launch_f(GroupArgs& a, int group, int nz, cudaStream_t st) {
  int mmax = 0;
  for (int c = 0; c < a.t.ncalls; ++c) mmax = std::max(mmax, a.t.m[c]);
  const int m = std::min(mmax, group);
  if (m <= 1) return launch_nr<F, 1>(a, nz, st);
  if (m <= 2) return launch_nr<F, 2>(a, nz, st);
  if (m <= 4) return launch_nr<F, 4>(a, nz, st);
  if (m <= 8) return launch_nr<F, 8>(a, nz, st);
  return launch_nr<F, 16>(a, nz, st);
}

void launch_typed(GroupArgs& a, WType type, int nz, cudaStream_t st) {
  if (type == WType::mxfp4) return launch_f<Mx>(a, matmul_group_rows(type), nz, st);
  return launch_f<Q8>(a, matmul_group_rows(type), nz, st);
}

size_t row_bytes_of(WType type, int cols) {
  Weight w;
  w.type = type;
  w.cols = cols;
  return w.row_bytes();
}

// The prompt pass's grouped expert matmul on the tensor cores (matmul_mma.cuh), on GroupTc (below) with
// row groups of kMmaBN rows and 128-row weight tiles.
// Weight tiles of 128 rows (MW = 1). FERRY_MMA_GROUP_MW=2 takes 256 (each row group's x, re-read by
// every tile, then costs half as much per weight byte): measured on the H200 in a 1,024-token prompt
// pass it was no faster (expert_ffn 74-79 ms either way, docs/BENCHMARKS.md). 3 stages: 2 blocks per SM.
// H100, 2026-12-07f: at one level of x the 1,024-token pass 80.6 -> 75.9 ms with MW = 2 (same bits); not yet
// measured at two levels, the default. moe.cuh moe_group_mw_tune.
int g_group_mw = -1;
int group_mw() {
  static const int env = env_level("FERRY_MMA_GROUP_MW", 1, 2);
  return level_on(g_group_mw, env, 2) == 2 ? 2 : 1;
}
constexpr int kMmaStages = 3;

// Both tensor-core paths' grouped problem: one table's items (table_item). x rows are prepared rows.
struct GroupTc {
  GroupTable t;
  int which;
  size_t row_bytes;
  int rows, cols;
  mma::XPrep xp;
  float* y[2];
  int ntiles, nb;
  int group;  // activation rows per item: kMmaBN (prompt passes) or the decode kernel's NRA
  int bm;     // weight rows per tile: mma::tile_rows(MW) (prompt passes) or dec::kRows
  __device__ mma::Item item(int64_t j) const {
    return table_item<mma::Item>(t, static_cast<int>(j), nb, ntiles, group, bm, rows, cols, which, row_bytes);
  }
  __device__ int64_t xrow(const mma::Item& it, int r) const { return table_xrow(t, which, it, r); }
  __device__ float* yrow(const mma::Item& it, int r) const { return table_yrow(t, which, y, rows, it, r); }
  // No split K (dec::item_body needs the names).
  __device__ float* part_row(const mma::Item&, int, int) const { return nullptr; }
  __device__ int* counter(const mma::Item&) const { return nullptr; }
};

template <class F, int S, int L, int MW>
__global__ void __launch_bounds__(mma::kThreads, 2) grouped_mma_kernel(const __grid_constant__ GroupTc a) {
  extern __shared__ __align__(16) uint8_t smem[];
  mma::item_body<F, kMmaBN, S, L, MW>(a, a.item(blockIdx.x), smem);
}

template <class F, int L, int MW>
void launch_mma_f(GroupTc& a, int nz, cudaStream_t st) {
  constexpr int S = kMmaStages;
  constexpr size_t smem = static_cast<size_t>(mma::stage_bytes<F, kMmaBN, L, MW>()) * S;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(grouped_mma_kernel<F, S, L, MW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  const int nb = tabulate_row_groups(a.t, kMmaBN);
  if (nb == 0) return;
  a.nb = nb;
  a.group = kMmaBN;
  a.bm = mma::tile_rows(MW);
  a.ntiles = (a.rows + a.bm - 1) / a.bm;
  const int64_t items = static_cast<int64_t>(nz) * nb * a.ntiles;
  grouped_mma_kernel<F, S, L, MW><<<static_cast<unsigned>(items), mma::kThreads, smem, st>>>(a);
  FERRY_CUDA_LAUNCHED(grouped_mma_kernel);
}

// Calls fn(F{}, levels, tile rows) with the prompt kernels' fragment format F of the batch's weights (the
// mxfp4 tiles of matmul_mxt.cuh, mxfp4 rows or q8_0 rows: the same bits for tiles and rows), x's levels
// (XPrep::levels) and MW (group_mw()) as std::integral_constant.
template <class Fn>
void with_mma_format(WType type, WLayout layout, int levels_of_x, Fn&& fn) {
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Three = std::integral_constant<int, 3>;
  const bool w2 = group_mw() == 2;
  auto levels = [&](auto f) {
    if constexpr (!std::is_same_v<decltype(f), mma::Q8>) {
      if (levels_of_x == 3) return w2 ? fn(f, Three{}, Two{}) : fn(f, Three{}, One{});
    } else if (levels_of_x == 3) {
      throw LimitError("cuda expert_ffn: x's lo as E4M3 for q8_0 weights");
    }
    if (levels_of_x == 2) return w2 ? fn(f, Two{}, Two{}) : fn(f, Two{}, One{});
    return w2 ? fn(f, One{}, Two{}) : fn(f, One{}, One{});
  };
  if (layout == WLayout::mx_tiles) return levels(mxt::MxT{});
  if (type == WType::mxfp4) return levels(mma::Mx{});
  levels(mma::Q8{});
}

void launch_mma(GroupTc& a, WType type, WLayout layout, int nz, cudaStream_t st) {
  with_mma_format(type, layout, a.xp.levels(), [&](auto f, auto l, auto mw) {
    launch_mma_f<decltype(f), decltype(l)::value, decltype(mw)::value>(a, nz, st);
  });
}

// Decode steps and verify blocks on the tensor cores (matmul_dec.cuh), on GroupTc with row groups of NRA
// rows and 16-row tiles.
template <class F, int KB, int NRA, int S>
__global__ void __launch_bounds__(dec::kThreads, 4) grouped_dec_kernel(const __grid_constant__ GroupTc a) {
  extern __shared__ __align__(16) uint8_t smem[];
  dec::item_body<F, KB, NRA, S>(a, a.item(blockIdx.x), smem);
}

template <class F, int KB, int NRA>
void launch_dec_nr(GroupTc& a, int nz, cudaStream_t st) {
  constexpr int S = dec::stages<F, KB, NRA>();
  constexpr size_t smem = static_cast<size_t>(dec::Geo<F, KB, NRA>::kStage) * S;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(grouped_dec_kernel<F, KB, NRA, S>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  const int nb = tabulate_row_groups(a.t, NRA);
  if (nb == 0) return;
  a.nb = nb;
  a.group = NRA;
  a.bm = dec::kRows;
  a.ntiles = (a.rows + dec::kRows - 1) / dec::kRows;
  const int64_t items = static_cast<int64_t>(nz) * nb * a.ntiles;
  dec::launch_dependent(grouped_dec_kernel<F, KB, NRA, S>, static_cast<unsigned>(items), smem, st, a);
}

// Rows per weight read from the largest piece, stage width from the columns, as the plain launcher
// (matmul_mma.cu launch_dec_f) picks them: speed only.
template <class F>
void launch_dec_f(GroupTc& a, int nz, cudaStream_t st) {
  int m = 0;
  for (int c = 0; c < a.t.ncalls; ++c) m = std::max(m, a.t.m[c]);
  const int kb = m <= 4 ? dec_stage_blocks(a.cols) : 1;
  if (m <= 1)
    return kb == 8 ? launch_dec_nr<F, 8, 1>(a, nz, st) : kb == 4 ? launch_dec_nr<F, 4, 1>(a, nz, st) : launch_dec_nr<F, 1, 1>(a, nz, st);
  if (m <= 4)
    return kb == 8 ? launch_dec_nr<F, 8, 4>(a, nz, st) : kb == 4 ? launch_dec_nr<F, 4, 4>(a, nz, st) : launch_dec_nr<F, 1, 4>(a, nz, st);
  if (m <= 8) return launch_dec_nr<F, 1, 8>(a, nz, st);
  launch_dec_nr<F, 1, 16>(a, nz, st);
}

// The mxfp4 tiles' decode kernel (matmul_mxt.cuh): the bits of dec::item_body<dec::Mx> on the rows.
// XB: the x loads of a load set together (mxt::set_math), for the down projections at one row; XS: their x
// staged in shared memory instead (mxt::item_body; matmul_mxt_xsmem).
// Lean: mxt::item_body's whole-step path, registers capped for 6 blocks a SM (matmul_mxt_lean).
template <int NRA, int U, bool XB, bool XS = false, bool Lean = false>
__global__ void __launch_bounds__(mxt::kThreads, Lean ? 6 : U <= 2 ? 8 : 4) grouped_mxt_kernel(const __grid_constant__ GroupTc a) {
  mxt::item_body<NRA, U, XB, XS, Lean>(a, a.item(blockIdx.x));
}

// U: units per load set (mxt::set_units by default; at one row per expert also 2, 8 and 14 under
// matmul_mxt_set_tune, for measurements; 2 with registers capped for 8 blocks per SM).
template <int NRA, int U = mxt::set_units(NRA)>
void launch_mxt_nr(GroupTc& a, int nz, cudaStream_t st) {
  if constexpr (NRA == 1 && U == mxt::set_units(1)) {
    switch (matmul_mxt_set(a.which == 2)) {
      case 2: return launch_mxt_nr<1, 2>(a, nz, st);
      case 8: return launch_mxt_nr<1, 8>(a, nz, st);
      case 14: return launch_mxt_nr<1, 14>(a, nz, st);
      default: break;
    }
  }
  const int nb = tabulate_row_groups(a.t, NRA);
  if (nb == 0) return;
  a.nb = nb;
  a.group = NRA;
  a.bm = mxt::kRows;
  a.ntiles = a.rows / mxt::kRows;
  const int64_t items = static_cast<int64_t>(nz) * nb * a.ntiles;
  constexpr bool kOne = NRA == 1;  // measured at one row (decode steps); 16 registers of x
  const auto grid = static_cast<unsigned>(items);
  // The kernel of this problem (the down projections' x batched or staged at one row), lean or not.
  const auto launch = [&](auto lean) {
    constexpr bool L = decltype(lean)::value;
    if (kOne && a.which == 2 && matmul_mxt_xsmem())
      return dec::launch_dependent(grouped_mxt_kernel<NRA, U, false, kOne, L>, grid, mxt::x_smem_bytes(a.cols), st, a);
    if (kOne && a.which == 2) return dec::launch_dependent(grouped_mxt_kernel<NRA, U, kOne, false, L>, grid, 0, st, a);
    dec::launch_dependent(grouped_mxt_kernel<NRA, U, false, false, L>, grid, 0, st, a);
  };
  if constexpr (kOne && U == mxt::set_units(1)) {  // the lean loop: the default load set at one row
    if (matmul_mxt_lean(a.which == 2)) return launch(std::true_type{});
  }
  launch(std::false_type{});
}

void launch_dec(GroupTc& a, WType type, WLayout layout, int nz, cudaStream_t st) {
  if (layout == WLayout::mx_tiles) {
    int m = 0;
    for (int c = 0; c < a.t.ncalls; ++c) m = std::max(m, a.t.m[c]);
    if (m <= 1) return launch_mxt_nr<1>(a, nz, st);
    if (m <= 4) return launch_mxt_nr<4>(a, nz, st);
    if (m <= 8) return launch_mxt_nr<8>(a, nz, st);
    return launch_mxt_nr<16>(a, nz, st);
  }
  if (type == WType::mxfp4) return launch_dec_f<dec::Mx>(a, nz, st);
  launch_dec_f<dec::Q8>(a, nz, st);
}

}  // namespace

void launch_grouped_gate_up_dec(const GroupTable& t, WType type, WLayout layout, const mma::XPrep& x, int in,
                                int inter, float* g, float* u, cudaStream_t st) {
  GroupTc a{t, 0, row_bytes_of(type, in), inter, in, x, {g, u}, 0, 0, 0, 0};
  launch_dec(a, type, layout, 2, st);
}

void launch_grouped_down_dec(const GroupTable& t, WType type, WLayout layout, const mma::XPrep& act, int in,
                             int inter, float* y, cudaStream_t st) {
  GroupTc a{t, 2, row_bytes_of(type, inter), in, inter, act, {y, nullptr}, 0, 0, 0, 0};
  launch_dec(a, type, layout, 1, st);
}

void launch_grouped_gate_up_mma(const GroupTable& t, WType type, WLayout layout, const mma::XPrep& x, int in,
                                int inter, float* g, float* u, cudaStream_t st) {
  GroupTc a{t, 0, row_bytes_of(type, in), inter, in, x, {g, u}, 0, 0, 0, 0};
  launch_mma(a, type, layout, 2, st);
}

void launch_grouped_down_mma(const GroupTable& t, WType type, WLayout layout, const mma::XPrep& act, int in,
                             int inter, float* y, cudaStream_t st) {
  GroupTc a{t, 2, row_bytes_of(type, inter), in, inter, act, {y, nullptr}, 0, 0, 0, 0};
  launch_mma(a, type, layout, 1, st);
}

// ---- a prompt pass's wave in one launch per step (moe.cuh WaveLaunch) ----------------------------------
namespace {

int g_moe_wave_wgmma = -1;
bool moe_wave_wgmma() {
  static const bool env = env_switch("FERRY_MXT_PROMPT_WGMMA", false);
  return switch_on(g_moe_wave_wgmma, env) && sm90a_device();
}

// Blocks a SM the wave kernel's registers are capped for: 2 (128 registers, the default) or 3 (85;
// FERRY_MOE_WAVE_BLOCKS=3 or moe_wave_blocks_tune(3), one m16 tile a warp only). Speed only: the same PTX, so
// the same bits. Why try 3: the kernel issues 0.53 instructions a scheduler and cycle with 16 warps a SM
// (Nsight, 2026-12-07); with x as hi only ptxas spills 48 bytes at 85 registers (none at 128), and the three
// blocks' stages fit (3 x 52 KB). Measured (H100, 2026-12-07f, one level, one round): the 1,024-token pass 80.2
// against 80.6 ms, noise: off.
int g_moe_wave_blocks = -1;
int moe_wave_blocks() {
  static const int env = env_level("FERRY_MOE_WAVE_BLOCKS", 2, 3);
  return level_on(g_moe_wave_blocks, env, 3) == 3 ? 3 : 2;
}

// Rows per row group of a wave (moe.cuh moe_wave_bn_tune): 32 (kMmaBN) or 64 (FERRY_MOE_WAVE_BN=64).
// ptxas spills 48 bytes at one level, 200 at two. Measured (H100, 2026-12-07f, one level, one round): the
// 1,024-token pass 83.6 against 80.6 ms: loses (the tail's small pieces hold twice the x stage): off.
int g_moe_wave_bn = -1;
int moe_wave_bn() {
  static const int env = env_level("FERRY_MOE_WAVE_BN", kMmaBN, 64);
  const bool wide = level_on(g_moe_wave_bn, env, 64) == 64 && group_mw() == 1 && !moe_wave_wgmma();
  return wide ? 64 : kMmaBN;
}

// Stages of the wave kernel's cp.async pipeline (moe.cuh moe_wave_stages_tune): kMmaStages (3: two stages of
// 17 KB in flight a block) or, for the mxfp4 tiles with x as hi only at 2 blocks a SM, 4 .. 6
// (FERRY_MOE_WAVE_STAGES; 6 x 17.4 KB x 2 blocks fit a SM's 227 KB). Speed only: the same mma in the same
// order. Why try: the kernel streams each expert's weights once per row group and waits for its loads
// (Nsight, 2026-12-07: 47 % of cycles with no eligible warp); more stages keep more bytes in flight.
// Measured (H100, 2026-12-07f, one level, one round): the 1,024-token pass 79.0 ms with 6 stages, 80.6 with 4,
// against 80.6 with 3: off until measured again; at two levels (the default) only 3 are built (26 KB a stage).
int g_moe_wave_stages = -1;
int moe_wave_stages() {
  static const int env = env_level("FERRY_MOE_WAVE_STAGES", kMmaStages, 6);
  const int s = level_on(g_moe_wave_stages, env, 6);
  return s < kMmaStages ? kMmaStages : s;
}

template <class F, int BN, int S, int L, int MW, int kBlocks>
__global__ void __launch_bounds__(mma::kThreads, kBlocks) wave_mma_kernel(const __grid_constant__ WaveTc a) {
  extern __shared__ __align__(16) uint8_t smem[];
  mma::item_body<F, BN, S, L, MW>(a, a.item(blockIdx.x), smem);
}

template <class F, int BN, int S, int L, int MW, int kBlocks>
void launch_wave_kernel(const WaveTc& a, int64_t items, cudaStream_t st) {
  constexpr size_t smem = static_cast<size_t>(mma::stage_bytes<F, BN, L, MW>()) * S;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(wave_mma_kernel<F, BN, S, L, MW, kBlocks>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  wave_mma_kernel<F, BN, S, L, MW, kBlocks><<<static_cast<unsigned>(items), mma::kThreads, smem, st>>>(a);
  FERRY_CUDA_LAUNCHED(wave_mma_kernel);
}

template <class F, int L, int MW>
void launch_wave_f(WaveTc& a, const WaveLaunch& w, int nz, cudaStream_t st) {
  constexpr int S = kMmaStages;
  if (w.group != kMmaBN && (w.group != 64 || MW != 1))
    throw LimitError("cuda expert_ffn: a wave's row groups of " + std::to_string(w.group) + " rows");
  a.group = w.group;
  a.bm = mma::tile_rows(MW);
  a.ntiles = (a.rows + a.bm - 1) / a.bm;
  int64_t items = 0;
  for (int k = 0; k < w.n; ++k) {
    a.start[k] = static_cast<int>(items);
    items += static_cast<int64_t>(nz) * w.nb[k] * a.ntiles;
  }
  a.start[w.n] = static_cast<int>(items);
  if (items == 0) return;
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda expert_ffn: " + std::to_string(items) + " items in one wave");
  if constexpr (MW == 1) {
    if (w.group == 64) return launch_wave_kernel<F, 64, S, L, MW, 2>(a, items, st);
    if constexpr (std::is_same_v<F, mxt::MxT> && L == 2)
      if (moe_wave_wgmma()) return launch_wave_mxt_wgmma(a, items, st);
    if (moe_wave_blocks() == 3) return launch_wave_kernel<F, kMmaBN, S, L, MW, 3>(a, items, st);
    if constexpr (std::is_same_v<F, mxt::MxT> && L == 1) {
      switch (moe_wave_stages()) {
        case 4: return launch_wave_kernel<F, kMmaBN, 4, L, MW, 2>(a, items, st);
        case 5: return launch_wave_kernel<F, kMmaBN, 5, L, MW, 2>(a, items, st);
        case 6: return launch_wave_kernel<F, kMmaBN, 6, L, MW, 2>(a, items, st);
        default: break;
      }
    }
  }
  launch_wave_kernel<F, kMmaBN, S, L, MW, 2>(a, items, st);
}

void launch_wave(WaveTc& a, const WaveLaunch& w, WType type, WLayout layout, int nz, cudaStream_t st) {
  with_mma_format(type, layout, a.xp.levels(), [&](auto f, auto l, auto mw) {
    launch_wave_f<decltype(f), decltype(l)::value, decltype(mw)::value>(a, w, nz, st);
  });
}

int g_moe_wave = -1;

}  // namespace

bool moe_wave() {
  static const bool env = env_switch("FERRY_MOE_WAVE", true);
  return switch_on(g_moe_wave, env);
}
void moe_wave_tune(int on) { g_moe_wave = on; }
void moe_wave_wgmma_tune(int on) { g_moe_wave_wgmma = on; }
void moe_wave_blocks_tune(int blocks) { g_moe_wave_blocks = blocks; }
void moe_wave_bn_tune(int rows) { g_moe_wave_bn = rows; }
void moe_wave_stages_tune(int stages) { g_moe_wave_stages = stages; }
void moe_group_mw_tune(int mw) { g_group_mw = mw; }

namespace {
// FERRY_MOE_WAVE_STATS=1: one stderr line per wave (measurements): its pieces (an expert's rows in a table),
// rows, row groups of `group` rows (each decodes the piece's weights again: groups - pieces are the second and
// later decodes) and how many groups have 1, 2, .. n8 tiles of rows (the kernel's NT, its mma per decoded block).
void print_wave_stats(const GroupTable* tabs, int n, int group) {
  int pieces = 0, rows = 0, groups = 0, nt[64 / 8 + 1] = {};
  for (int k = 0; k < n; ++k)
    for (int c = 0; c < tabs[k].ncalls; ++c) {
      const int m = tabs[k].m[c];
      pieces += m > 0;
      rows += m;
      for (int r = 0; r < m; r += group) {
        ++groups;
        ++nt[(std::min(group, m - r) + 7) / 8];
      }
    }
  std::string h;
  for (int j = 1; j <= group / 8; ++j) h += " " + std::to_string(nt[j]);
  std::fprintf(stderr, "[moe-wave] tables %d pieces %d rows %d groups %d (decodes past one a piece: %d) n8 tiles 1..%d:%s\n",
               n, pieces, rows, groups, groups - pieces, group / 8, h.c_str());
}
}  // namespace

void tabulate_wave(GroupTable* tabs, int n, WaveLaunch& w) {
  if (n > kWaveTables) throw LimitError("cuda expert_ffn: " + std::to_string(n) + " tables in one wave");
  w.n = n;
  w.group = moe_wave_bn();
  for (int k = 0; k < n; ++k) w.nb[k] = tabulate_row_groups(tabs[k], w.group);
  static const bool stats = env_switch("FERRY_MOE_WAVE_STATS", false);
  if (stats) print_wave_stats(tabs, n, w.group);
}

void launch_wave_gate_up_mma(const WaveLaunch& w, WType type, WLayout layout, const mma::XPrep& x, int in, int inter,
                             float* g, float* u, cudaStream_t st) {
  WaveTc a{w.dev, w.n, {}, 0, row_bytes_of(type, in), inter, in, x, {g, u}, 0, 0, 0};
  launch_wave(a, w, type, layout, 2, st);
}

void launch_wave_down_mma(const WaveLaunch& w, WType type, WLayout layout, const mma::XPrep& act, int in, int inter,
                          float* y, cudaStream_t st) {
  WaveTc a{w.dev, w.n, {}, 2, row_bytes_of(type, inter), in, inter, act, {y, nullptr}, 0, 0, 0};
  launch_wave(a, w, type, layout, 1, st);
}

void launch_grouped_gate_up(const GroupTable& t, WType type, const float* x, int in, int inter, float* g, float* u,
                            cudaStream_t st) {
  GroupArgs a{t, 0, row_bytes_of(type, in), inter, in, x, {g, u}, 0, 0, 0};
  launch_typed(a, type, 2, st);
}

void launch_grouped_down(const GroupTable& t, WType type, const float* act, int in, int inter, float* y,
                         cudaStream_t st) {
  GroupArgs a{t, 2, row_bytes_of(type, inter), in, inter, act, {y, nullptr}, 0, 0, 0};
  launch_typed(a, type, 1, st);
}

}  // namespace ferry::cuda
