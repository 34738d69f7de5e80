// q8_0 tiles (matmul_q8t.cuh): the repacking of a resident weight, the split of K and the launcher.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "io/errors.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"
#include "kernels/cuda/matmul_q8t.cuh"
#include "kernels/cuda/sm90a/q8t_prompt_wgmma.cuh"
#include "kernels/cuda/switches.hpp"
#include "kernels/cuda/tile_pack.cuh"

namespace ferry::cuda {

namespace {

using namespace q8t;

constexpr int kGranules = kUnitBytes / 16;  // 272: 256 of quants, 16 of scales

// One thread per 16-byte granule of the packed tiles (pack_granule).
__global__ void q8t_pack_kernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, int64_t tiles, int units,
                                size_t row_bytes) {
  pack_granule<kGranules, kUnitBytes>(src, dst, tiles, units, row_bytes, [&](const uint8_t* rows, int gr, int u,
                                                                             uint8_t* out) {
    if (gr < 256) {
      const int i = gr >> 5, l = gr & 31, g = l >> 2, t = l & 3, b = 8 * u + i;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int c = 8 * t + 2 * w;  // w = 2s + h: c = 8t + 4s + 2h
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = g + 8 * (e >> 1), col = c + (e & 1);
          out[4 * w + e] = static_cast<uint8_t>(rows[r * row_bytes + b * 34 + 2 + col] ^ 0x80u);
        }
      }
    } else {
      const int g = (gr - 256) >> 1, half = (gr - 256) & 1;
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint8_t* d = rows + (g + 8 * h) * row_bytes + (8 * u + 4 * half + k) * 34;
          out[(2 * k + h) * 2] = d[0];
          out[(2 * k + h) * 2 + 1] = d[1];
        }
    }
  });
}

// Up to 4 rows: 4 blocks of 4 warps per SM (128 registers: the two units in flight take 80 of them; ptxas
// spills 16 bytes of loop invariants). 8 and 16 rows: 2 blocks (202 and 255 registers).
// kEarly: the kernel lets its programmatic dependents launch (griddepcontrol.launch_dependents) as each block
// starts, so once its last block is resident the next q8_0-tiles matmul of the stream (launch_dependent)
// takes the SM slots this one's last wave leaves free and issues its first weight loads there; it reads x
// and writes only after grid_dependency_wait, which returns once this kernel has finished and its writes
// are visible. Scheduling only: the same bits. Off until measured (FERRY_Q8T_EARLY=1, matmul_q8t_early_tune).
template <int NRA, bool kEarly>
__global__ void __launch_bounds__(kThreads, NRA <= 4 ? 4 : 2) q8t_kernel(const __grid_constant__ mma::PlainTc p) {
  if constexpr (kEarly) dec::allow_dependents();
  item_body<NRA>(p, p.item(blockIdx.x));
}

int g_q8t_early = -1;  // matmul_q8t_early_tune

bool q8t_early() {
  static const bool env = env_switch("FERRY_Q8T_EARLY", false);
  return switch_on(g_q8t_early, env);
}

// The stream split (splitk.cuh, matmul_q8t.cuh stream_body).
template <int NRA>
__global__ void __launch_bounds__(kThreads, NRA <= 4 ? 4 : 2) q8t_stream_kernel(const __grid_constant__ mma::PlainTc p) {
  stream_body<NRA>(p);
}

template <int NRA>
void launch_n(mma::PlainTc p, cudaStream_t st) {
  p.group = NRA;
  p.bm = kRows;
  p.groups_fastest = true;
  p.ntiles = p.rows / kRows;
  const int64_t items = static_cast<int64_t>(p.ntiles) * ((p.n + NRA - 1) / NRA) * p.parts;
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda matmul: " + std::to_string(items) + " tiles in one call");
  if (p.sk.stream > 0) {
    const int64_t groups = (p.n + NRA - 1) / NRA;
    if (groups > 65535) throw LimitError("cuda matmul: " + std::to_string(p.n) + " rows in one stream-split call");
    return dec::launch_dependent(q8t_stream_kernel<NRA>, dim3(static_cast<unsigned>(p.sk.stream), static_cast<unsigned>(groups)),
                                 0, st, p);
  }
  if (q8t_early())
    dec::launch_dependent(q8t_kernel<NRA, true>, static_cast<unsigned>(items), 0, st, p);
  else
    dec::launch_dependent(q8t_kernel<NRA, false>, static_cast<unsigned>(items), 0, st, p);
}

template <int S, int L, int MW, bool SW>
__global__ void __launch_bounds__(mma::kThreads, SW ? 2 : 1) q8t_prompt_kernel(const __grid_constant__ mma::PlainTc p) {
  extern __shared__ __align__(16) uint8_t smem[];
  prompt_body<S, L, MW, SW>(p, p.item(blockIdx.x), smem);
}

template <int L, int MW, bool SW = false>
void launch_prompt_l(mma::PlainTc p, cudaStream_t st) {
  // Stages: one block of 8 warps per SM (MW 1: 171 / 185 KB; MW 2: 222 / 216 KB), or with the swizzled x
  // (MW 1 only) two blocks of 2 stages (98 / 66 KB each).
  static_assert(!SW || MW == 1, "the swizzled x layout's two blocks a SM take one tile a warp");
  constexpr int S = SW ? 2 : MW == 1 ? (L == 2 ? 3 : 5) : (L == 2 ? 3 : 4);
  constexpr size_t smem = static_cast<size_t>(prompt_stage_bytes<L, MW, SW>()) * S;
  static const bool once = [] {
    FERRY_CUDA_CHECK(cudaFuncSetAttribute(q8t_prompt_kernel<S, L, MW, SW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    return true;
  }();
  (void)once;
  p.group = kPromptRows;
  p.bm = mma::tile_rows(MW);
  p.ntiles = (p.rows + p.bm - 1) / p.bm;
  p.groups_fastest = true;  // a tile's row groups together: the tile is read from HBM once
  const int64_t items = static_cast<int64_t>(p.ntiles) * ((p.n + kPromptRows - 1) / kPromptRows);
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda matmul: " + std::to_string(items) + " tiles in one call");
  q8t_prompt_kernel<S, L, MW, SW><<<static_cast<unsigned>(items), mma::kThreads, smem, st>>>(p);
  FERRY_CUDA_LAUNCHED(q8t_prompt_kernel);
}

// 16-row tiles per warp of the prompt kernel (speed only: the same bits). By default 2 (256-row blocks)
// where the matrix has more than 128 rows and the call still gives every SM a block (H100, 1,024-token
// pass of the K3.1 slice, 2026-12-06: 142.5-142.9 ms against 149.4-150.1 with 1; 12288x7168 16.6 against
// 20.7 ms, 3584x7168 at 224 blocks 1.23 against 1.49; but 128x7168 0.66 against 0.58 and 96x7168 0.48
// against 0.41: one tile either way, half the warps idle; warm kernel benchmark, 2026-12-06f: 12288x7168
// 1,154 against 1,432 us), else 1. FERRY_Q8T_PROMPT_MW=1 / 2 or
// matmul_q8t_prompt_mw_tune(1 / 2) fixes it.
int g_q8t_prompt_mw = -1;
int q8t_prompt_mw(int64_t rows, int64_t n) {
  static const int env = [] {
    const char* v = std::getenv("FERRY_Q8T_PROMPT_MW");
    return v && std::string(v) == "1" ? 1 : v && std::string(v) == "2" ? 2 : 0;
  }();
  const int fixed = g_q8t_prompt_mw > 0 ? g_q8t_prompt_mw : env;
  if (fixed) return fixed;
  const int64_t blocks2 = (rows + 255) / 256 * ((n + kPromptRows - 1) / kPromptRows);
  return rows > 128 && blocks2 >= sm_count() ? 2 : 1;
}

// One tile a warp, x swizzled, two blocks a SM (prompt_x_stride; speed only, the same bits): off
// (FERRY_Q8T_PROMPT_SWZ=1 or matmul_q8t_prompt_swz_tune(1)). Measured slower on the H100 (2026-12-06f,
// MatmulBenchQ8TilesPromptPass: 12288x7168 at 1,024 rows 1,234 against 1,154 us; faster only on the long rows,
// 7168x12288 1,252 against 1,328; a 1,024-token pass 127.9 against 126.1 ms).
int g_q8t_prompt_swz = -1;
bool q8t_prompt_swz() {
  static const bool env = env_switch("FERRY_Q8T_PROMPT_SWZ", false);
  return switch_on(g_q8t_prompt_swz, env);
}

// Two tiles a warp on wgmma, x as hi + lo or hi only (kernels/cuda/sm90a/q8t_prompt_wgmma.cuh; speed only, the same
// bits): 0 off, 1 on, 2 on with the two tiles' batches overlapped (the default); FERRY_Q8T_PROMPT_WGMMA=0/1/2
// or matmul_q8t_prompt_wgmma_tune fix it. Taken where the call fills the SMs with two tiles a warp or has
// kQ8tWgmmaMinRows rows or more. Measured (MatmulBenchQ8TilesPromptPass, 1,024 rows, us; mma.sync with two
// tiles a warp / wgmma / wgmma overlapped): H200 2026-12-06, 12288x7168 1,152 / 1,090 / 977, 33792x7168
// 3,069 / 2,910 / 2,603, 7168x12288 1,318 / 1,236 / 1,111, 1536x7168 208 / 197 / 180 (the rule's one tile a
// warp 256); H100 (first two only) 1,124 / 1,030, 3,017 / 2,707; slower on 128x7168 (H200: 136 for one tile
// a warp, 192 / 175 on wgmma). The 1,024-token pass of the K3.1 slice on the H200: 124.2 ms without wgmma,
// 118.6 with it overlapped. Only on a compute capability 9.0 device (H100 / H200): its library holds sm_90a
// code alone, which no other GPU runs (there the mma.sync kernels stay).
constexpr int64_t kQ8tWgmmaMinRows = 1536;
int g_q8t_prompt_wgmma = -1;
int q8t_prompt_wgmma(int64_t rows, int64_t n) {
  static const int env = [] {
    const char* v = std::getenv("FERRY_Q8T_PROMPT_WGMMA");
    const std::string e = v ? v : "";
    return e == "0" ? 0 : e == "1" ? 1 : e == "2" ? 2 : -1;
  }();
  const int mode = g_q8t_prompt_wgmma >= 0 ? g_q8t_prompt_wgmma : env >= 0 ? env : 2;
  if (mode == 0 || !sm90a_device()) return 0;
  return rows >= kQ8tWgmmaMinRows || q8t_prompt_mw(rows, n) == 2 ? mode : 0;
}

int g_q8t_parts = -1;  // matmul_q8t_split_tune

// Several q8_0-tiles matmuls of one prepared x in one launch (Backend::matmul_group): item j is item
// j - first[k] of weight k (first[k] <= j < first[k + 1]) as mma::PlainTc numbers a plain call's items
// (parts fastest, then row groups, then 16-row tiles), with weight k's split of K (parts[k] parts of
// unit[k] columns: matmul_q8t_split, its partials and counters in its own sk[k]), so every output has the
// bits of its matmul alone; one launch lets the tail of one matrix overlap the start of the next, and a
// small split matrix rides along with the big ones instead of a launch of its own.
struct MultiTc {
  static constexpr int kMax = 8;
  int count;
  const uint8_t* w[kMax];
  float* y[kMax];
  int rows[kMax];
  splitk::Bufs sk[kMax];
  int64_t first[kMax + 1];
  size_t row_bytes;
  int cols;
  mma::XPrep xp;
  int64_t n;
  int group;
  __device__ mma::Item item(int64_t j) const {
    int k = 0;
    while (k + 1 < count && j >= first[k + 1]) ++k;
    const int parts = sk[k].parts;
    const int64_t j0 = j - first[k], q = j0 / parts, ngroups = (n + group - 1) / group;
    const int64_t grp = q % ngroups;
    mma::Item it;
    it.z = k;
    it.c = static_cast<int>(q);  // the counter of a split item, within weight k's
    it.part = static_cast<int>(j0 - q * parts);
    it.parts = parts;
    splitk::range(cols, sk[k].unit, it.part, parts, it.k0, it.k1);
    it.r0 = static_cast<int>(grp * group);
    it.row0 = static_cast<int>(q / ngroups) * kRows;
    it.w = w[k] + static_cast<size_t>(it.row0) * row_bytes;
    it.nrows = min(kRows, rows[k] - it.row0);
    it.nr = static_cast<int>(min(static_cast<int64_t>(group), n - it.r0));
    return it;
  }
  __device__ int64_t xrow(const mma::Item& it, int r) const { return it.r0 + r; }
  __device__ float* yrow(const mma::Item& it, int r) const {
    return y[it.z] + static_cast<int64_t>(it.r0 + r) * rows[it.z];
  }
  __device__ float* part_row(const mma::Item& it, int q, int r) const {
    const int64_t stride = n * rows[it.z];
    return sk[it.z].part + q * stride + static_cast<int64_t>(it.r0 + r) * rows[it.z];
  }
  __device__ int* counter(const mma::Item& it) const { return sk[it.z].cnt + it.c; }
};

template <int NRA, bool kEarly>
__global__ void __launch_bounds__(kThreads, NRA <= 4 ? 4 : 2) q8t_multi_kernel(const __grid_constant__ MultiTc p) {
  if constexpr (kEarly) dec::allow_dependents();
  item_body<NRA>(p, p.item(blockIdx.x));
}

template <int NRA>
void launch_multi_n(MultiTc p, cudaStream_t st) {
  p.group = NRA;
  const int64_t ngroups = (p.n + NRA - 1) / NRA;
  p.first[0] = 0;
  for (int k = 0; k < p.count; ++k)
    p.first[k + 1] = p.first[k] + static_cast<int64_t>(p.rows[k] / kRows) * ngroups * p.sk[k].parts;
  const int64_t items = p.first[p.count];
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda matmul: " + std::to_string(items) + " tiles in one call");
  if (q8t_early())
    dec::launch_dependent(q8t_multi_kernel<NRA, true>, static_cast<unsigned>(items), 0, st, p);
  else
    dec::launch_dependent(q8t_multi_kernel<NRA, false>, static_cast<unsigned>(items), 0, st, p);
}


}  // namespace

bool matmul_q8t_packable(const Weight& w) {
  return w.type == WType::q8_0 && w.layout == WLayout::rows && w.rows > 0 && w.rows % kRows == 0 &&
         w.cols % kUnitCols == 0 && w.cols <= (int64_t{1} << 30) && w.rows <= (int64_t{1} << 30) &&
         (reinterpret_cast<uintptr_t>(w.data) & 15u) == 0;
}

void launch_q8t_pack(const Weight& w, void* scratch, size_t scratch_bytes, cudaStream_t st) {
  const int units = static_cast<int>(w.cols / kUnitCols);
  repack_tiles(w, scratch, scratch_bytes, st, "q8_0 tiles", [&](const uint8_t* src, uint8_t* dst, int64_t n) {
    q8t_pack_kernel<<<blocks_for(n * units * kGranules, 256), 256, 0, st>>>(src, dst, n, units, w.row_bytes());
    FERRY_CUDA_LAUNCHED(q8t_pack_kernel);
  });
}

void matmul_q8t_split_tune(int parts) { g_q8t_parts = parts; }
void matmul_q8t_early_tune(int on) { g_q8t_early = on; }
void matmul_q8t_prompt_mw_tune(int mw) { g_q8t_prompt_mw = mw; }
void matmul_q8t_prompt_swz_tune(int on) { g_q8t_prompt_swz = on; }
void matmul_q8t_prompt_wgmma_tune(int on) { g_q8t_prompt_wgmma = on; }

namespace {
int g_q8t_stream = -1;  // matmul_q8t_stream_tune
}  // namespace
void matmul_q8t_stream_tune(int workers) { g_q8t_stream = workers; }

// The stream split's rule (FERRY_Q8T_STREAM=1; off: 496 against 525 tok/s on the H100 slice, 2026-12-07): matrices that are one partial wave of the 4-blocks-a-SM grid,
// unsplit or in today's parts (fewer than 528 tiles: the 7,168-row outputs, the shared experts' 6,144-row gate
// and up, the latent MoE's 3,584-row down projection, split in 2 parts today: 448 items), with 8 units or more a
// worker (so not the small ones the uniform split spreads, e.g. 1536x7168).
// wide (FERRY_Q8T_STREAM=2, measurements): also the larger matrices whose tiles are not whole waves.
namespace {
bool stream_shape(const Weight& w, bool wide) {
  constexpr int64_t W = splitk::kStreamWorkers;
  const int64_t tiles = w.rows / kRows, L = tiles * (w.cols / kUnitCols);
  return L >= 8 * W && (tiles < W || (wide && tiles % W != 0));
}
}  // namespace

bool matmul_q8t_stream_rule(const Weight& w) { return stream_shape(w, false); }

// Measured on the H200 (MatmulBenchQ8Tiles, one row, 2026-12-02): matrices of 384 tiles (6,144 rows) and
// more run fastest unsplit (a split only adds partials: 7168x7168 21.3 us unsplit, 25.5 in 3 parts);
// fewer tiles leave SMs idle, so their columns are cut into about 448 / tiles parts, down to one
// 256-column unit per warp (3584x7168: 15.2 us unsplit, 14.5 in 2 parts, 16.5 in 4; 1536x7168: 14.0
// unsplit, 9.4 in 5 parts, 11.3 in 7; 128x7168: 11.2 unsplit, 6.1 in 7). FERRY_Q8T_PARTS fixes the count
// (measurements).
KSplit matmul_q8t_split(const Weight& w) {
  static const int env = [] {
    const char* v = std::getenv("FERRY_Q8T_PARTS");
    return v ? std::atoi(v) : -1;
  }();
  static const int stream_env = [] {  // FERRY_Q8T_STREAM: 1 the rule, 2 every matrix of 384 tiles and more
    const char* v = std::getenv("FERRY_Q8T_STREAM");
    return v ? std::atoi(v) : 0;
  }();
  KSplit ks;
  {
    // The stream split: forced by the knob (W workers), or the rule where it is on.
    const int64_t tiles = w.rows / kRows, U = w.cols / kUnitCols, L = tiles * U;
    int64_t workers = 0;
    if (g_q8t_stream > 0)
      workers = g_q8t_stream;
    else if (g_q8t_stream < 0 && (stream_env == 1 || stream_env == 2) && stream_shape(w, stream_env == 2))
      workers = splitk::kStreamWorkers;
    if (workers > 0 && L >= workers) {
      ks.stream = static_cast<int>(workers);
      ks.parts = splitk::stream_max_parts(L, U, workers);
      ks.unit = kUnitCols;
      return ks;
    }
  }
  ks.unit = w.cols % 1024 == 0 ? 1024 : w.cols % 512 == 0 ? 512 : 256;
  const int64_t units = w.cols / ks.unit, tiles = w.rows / kRows;
  const int force = g_q8t_parts >= 0 ? g_q8t_parts : env;
  int64_t parts = 1;
  if (force >= 0)
    parts = force == 0 ? 1 : force;
  else if (tiles < 384)
    parts = (448 + tiles - 1) / tiles;
  const int64_t cap = std::max<int64_t>(1, w.cols / (kUnitCols * kWarps));  // a unit per warp and part
  ks.parts = static_cast<int>(std::clamp<int64_t>(parts, 1, std::min<int64_t>({units, cap, 64})));
  return ks;
}

void launch_matmul_q8t(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t st,
                       const splitk::Bufs& sk) {
  mma::PlainTc p{static_cast<const uint8_t*>(w.data), w.row_bytes(), static_cast<int>(w.rows),
                 static_cast<int>(w.cols), xp, y, n, 0, 0, 0};
  p.parts = sk.parts;
  p.unit = sk.unit;
  p.sk = sk;
  if (n > (int64_t{1} << 30)) throw LimitError("cuda matmul: " + std::to_string(n) + " rows in one call");
  if (n <= 1) return launch_n<1>(p, st);
  if (n <= 4) return launch_n<4>(p, st);
  if (n <= 8) return launch_n<8>(p, st);
  launch_n<16>(p, st);
}

void launch_matmul_q8t_group(const Weight* const* ws, float* const* ys, const splitk::Bufs* sks, size_t count,
                             const mma::XPrep& xp, int64_t n, cudaStream_t st) {
  if (n > (int64_t{1} << 30)) throw LimitError("cuda matmul: " + std::to_string(n) + " rows in one call");
  for (size_t i0 = 0; i0 < count; i0 += MultiTc::kMax) {
    MultiTc p{};
    p.count = static_cast<int>(std::min<size_t>(MultiTc::kMax, count - i0));
    for (int k = 0; k < p.count; ++k) {
      const Weight& w = *ws[i0 + static_cast<size_t>(k)];
      const splitk::Bufs& sk = sks[i0 + static_cast<size_t>(k)];
      const KSplit ks = matmul_q8t_split(w);
      if (w.layout != WLayout::q8_tiles || w.cols != ws[0]->cols || ks.parts != sk.parts ||
          (sk.parts > 1 && (ks.unit != sk.unit || !sk.part || !sk.cnt)))
        throw TensorError("cuda matmul group: weight " + std::to_string(i0 + static_cast<size_t>(k)) +
                          " is not a q8_0-tiles weight of the group's width with its split's buffers");
      p.sk[k] = sk;
      p.w[k] = static_cast<const uint8_t*>(w.data);
      p.y[k] = ys[i0 + static_cast<size_t>(k)];
      p.rows[k] = static_cast<int>(w.rows);
    }
    p.row_bytes = ws[0]->row_bytes();
    p.cols = static_cast<int>(ws[0]->cols);
    p.xp = xp;
    p.n = n;
    if (n <= 1) launch_multi_n<1>(p, st);
    else if (n <= 4) launch_multi_n<4>(p, st);
    else if (n <= 8) launch_multi_n<8>(p, st);
    else launch_multi_n<16>(p, st);
  }
}

void launch_matmul_q8t_prompt(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t st) {
  mma::PlainTc p{static_cast<const uint8_t*>(w.data), w.row_bytes(), static_cast<int>(w.rows),
                 static_cast<int>(w.cols), xp, y, n, 0, 0, 0};
  if (n > (int64_t{1} << 30)) throw LimitError("cuda matmul: " + std::to_string(n) + " rows in one call");
  if (q8t_prompt_swz()) return xp.lo ? launch_prompt_l<2, 1, true>(p, st) : launch_prompt_l<1, 1, true>(p, st);
  if (const int wg = q8t_prompt_wgmma(w.rows, n)) return launch_q8t_prompt_wgmma(p, st, wg == 2);
  const bool mw2 = q8t_prompt_mw(w.rows, n) == 2;
  if (xp.lo) return mw2 ? launch_prompt_l<2, 2>(p, st) : launch_prompt_l<2, 1>(p, st);
  mw2 ? launch_prompt_l<1, 2>(p, st) : launch_prompt_l<1, 1>(p, st);
}

}  // namespace ferry::cuda
