// mxfp4 tiles (matmul_mxt.cuh): the repacking of resident experts and the plain matmul's launchers.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "io/errors.hpp"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"
#include "kernels/cuda/matmul_mxt.cuh"
#include "kernels/cuda/tile_pack.cuh"

namespace ferry::cuda {

namespace {

using namespace mxt;

constexpr int kGranules = kUnitBytes / 16;  // 68: 64 of quants, 4 of scales

// One thread per 16-byte granule of the packed tiles (pack_granule).
__global__ void mxt_pack_kernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, int64_t tiles, int units,
                                size_t row_bytes) {
  pack_granule<kGranules, kUnitBytes>(src, dst, tiles, units, row_bytes, [&](const uint8_t* rows, int gr, int u,
                                                                             uint8_t* out) {
    if (gr < 64) {  // block b's 256 bytes: granule gr holds lanes 2 (gr % 16) and 2 (gr % 16) + 1, re-ordered
      const int b = gr >> 4;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int l = 2 * (gr & 15) + k, g = l >> 2, t = l & 3;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            out[8 * k + 4 * h + i] =
                static_cast<uint8_t>(e2m1::tile_byte(rows[(g + 8 * h) * row_bytes + (4 * u + b) * 17 + 1 + 4 * t + i]));
      }
    } else {  // scales: byte s = b * 16 + g * 2 + h
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int s = (gr - 64) * 16 + i, b = s >> 4, g = (s >> 1) & 7, h = s & 1;
        out[i] = rows[(g + 8 * h) * row_bytes + (4 * u + b) * 17];
      }
    }
  });
}

template <int NRA>
__global__ void __launch_bounds__(kThreads, 4) mxt_kernel(const __grid_constant__ mma::PlainTc p) {
  item_body<NRA, set_units(NRA), false>(p, p.item(blockIdx.x));
}

template <int NRA>
void launch_n(mma::PlainTc p, cudaStream_t st) {
  p.group = NRA;
  p.bm = kRows;
  p.groups_fastest = true;
  p.ntiles = p.rows / kRows;
  const int64_t items = static_cast<int64_t>(p.ntiles) * ((p.n + NRA - 1) / NRA);
  if (items > (int64_t{1} << 31) - 1) throw LimitError("cuda matmul: " + std::to_string(items) + " tiles in one call");
  dec::launch_dependent(mxt_kernel<NRA>, static_cast<unsigned>(items), 0, st, p);
}

int g_set = -1;  // matmul_mxt_set_tune (-1: FERRY_MXT_SET)
int g_xsmem = -1;  // matmul_mxt_xsmem_tune
int g_lean = -1;   // matmul_mxt_lean_tune

}  // namespace

void matmul_mxt_set_tune(int units) { g_set = units; }
int matmul_mxt_set(bool down) {
  static const auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::atoi(v) : 0;
  };
  static const int both = env("FERRY_MXT_SET"), down_only = env("FERRY_MXT_SET_DOWN");
  if (g_set >= 0) return g_set;
  return down && down_only > 0 ? down_only : both;
}
void matmul_mxt_xsmem_tune(int on) { g_xsmem = on; }
bool matmul_mxt_xsmem() {
  static const bool env = env_switch("FERRY_MXT_XSMEM", false);
  return switch_on(g_xsmem, env);
}

void matmul_mxt_lean_tune(int on) { g_lean = on; }
bool matmul_mxt_lean(bool down) {
  static const int env = [] {  // FERRY_MXT_LEAN: 0... off, 2... the down projections only, else (or unset) on
    const char* v = std::getenv("FERRY_MXT_LEAN");
    return !v ? 1 : v[0] == '0' ? 0 : v[0] == '2' ? 2 : 1;
  }();
  const int mode = g_lean >= 0 ? g_lean : env;
  return mode == 1 || (mode == 2 && down);
}

bool matmul_mxt_packable(const Weight& w) {
  return w.type == WType::mxfp4 && w.layout == WLayout::rows && w.rows > 0 && w.rows % kRows == 0 &&
         w.cols % kUnitCols == 0 && w.cols <= (int64_t{1} << 30) && w.rows <= (int64_t{1} << 30) &&
         (reinterpret_cast<uintptr_t>(w.data) & 15u) == 0;
}

void launch_mxt_pack(const Weight& w, void* scratch, size_t scratch_bytes, cudaStream_t st) {
  const int units = static_cast<int>(w.cols / kUnitCols);
  repack_tiles(w, scratch, scratch_bytes, st, "mxfp4 tiles", [&](const uint8_t* src, uint8_t* dst, int64_t n) {
    mxt_pack_kernel<<<blocks_for(n * units * kGranules, 256), 256, 0, st>>>(src, dst, n, units, w.row_bytes());
    FERRY_CUDA_LAUNCHED(mxt_pack_kernel);
  });
}

void launch_matmul_mxt(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t st) {
  mma::PlainTc p{static_cast<const uint8_t*>(w.data), w.row_bytes(), static_cast<int>(w.rows),
                 static_cast<int>(w.cols), xp, y, n, 0, 0, 0};
  if (n > (int64_t{1} << 30)) throw LimitError("cuda matmul: " + std::to_string(n) + " rows in one call");
  if (n <= 1) return launch_n<1>(p, st);
  if (n <= 4) return launch_n<4>(p, st);
  if (n <= 8) return launch_n<8>(p, st);
  launch_n<16>(p, st);
}

}  // namespace ferry::cuda
