// Grouped expert matmuls of the CUDA back-end's expert_ffn (moe.cu): one launch runs a matmul for
// up to kGroupCalls experts over up to kGroupRows rows, reading each expert's activation rows
// straight from the layer input (gather) and writing its outputs straight to their (row, rank) slots
// (scatter), with the fast path's thread-block body (matmul_fast.cuh), so every output element has
// exactly the reduction order of CudaBackend::matmul on the same weight.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/cuda/matmul_mma_launch.cuh"

namespace ferry::cuda {

constexpr int kGroupCalls = 16;   // expert pieces per launch: a decode batch of top-16 experts
constexpr int kGroupRows = 256;   // activation rows per launch

// One launch's share of an expert batch: the "pieces" (an expert's rows, or a run of them when an
// expert has more rows than fit) and their row indices. Passed by value as a __grid_constant__ kernel
// parameter (about 2.9 KB of the 4 KB parameter space), so a batch needs no host-to-device copy.
struct GroupTable {
  int ncalls;                        // pieces in this launch
  int rows;                          // rows in this launch (sum of m)
  int base;                          // row of this launch's first row in the intermediate buffers
  int loc[kGroupCalls];              // first row of piece c in src / dst
  int m[kGroupCalls];                // rows of piece c
  int bstart[kGroupCalls + 1];       // first row group of piece c (set by the launcher)
  uint8_t piece[kGroupRows];         // piece of each row group (set by the launcher)
  const uint8_t* w[kGroupCalls][3];  // piece c's gate, up, down weight data
  int32_t src[kGroupRows];           // x row of each row
  int32_t dst[kGroupRows];           // y row of each row
};

// g[base + i] = x[src[i]] @ gate^T and u[base + i] = x[src[i]] @ up^T for every row i of the table
// (one launch: grid z picks gate or up). x [*, in], g and u [*, inter].
void launch_grouped_gate_up(const GroupTable& t, WType type, const float* x, int in, int inter, float* g, float* u,
                            cudaStream_t st);
// y[dst[i]] = act[base + i] @ down^T for every row i of the table. act [*, inter], y [*, in].
void launch_grouped_down(const GroupTable& t, WType type, const float* act, int in, int inter, float* y,
                         cudaStream_t st);

// The same two steps in a prompt pass, on the tensor cores (matmul_mma.cuh), from prepared rows: x
// prepared as [x_rows, in] (rows t.src[i]), act as [wave rows, inter] (rows base + i). layout: the
// batch's weights' (all rows, or all mx_tiles: matmul_mxt.cuh, the same bits).
void launch_grouped_gate_up_mma(const GroupTable& t, WType type, WLayout layout, const mma::XPrep& x, int in,
                                int inter, float* g, float* u, cudaStream_t st);
void launch_grouped_down_mma(const GroupTable& t, WType type, WLayout layout, const mma::XPrep& act, int in,
                             int inter, float* y, cudaStream_t st);
// A prompt pass's wave of launches (tables tabs[0, n), host copies; one launch each for gate / up and for
// down instead of one per table): tabulate_wave tabulates the tables' row groups (the prompt kernels' group
// of rows) into w, the caller copies the tables to device memory (w.dev), and every item of every table is
// one block of one grid, tables in order. Each item's arithmetic is the per-table launch's, so
// the same bits; the grid's last partial wave of blocks comes once per wave instead of once per table.
constexpr int kWaveTables = 128;  // tables a wave can hold: 2,048 rows in pieces of 1 row, 16 a table
struct WaveLaunch {
  const GroupTable* dev = nullptr;  // the tables in device memory
  int n = 0;                        // tables
  int nb[kWaveTables] = {};         // row groups per table
  int group = 32;                   // rows per row group: kMmaBN, or 64 (moe_wave_bn)
};
void tabulate_wave(GroupTable* tabs, int n, WaveLaunch& w);
void launch_wave_gate_up_mma(const WaveLaunch& w, WType type, WLayout layout, const mma::XPrep& x, int in, int inter,
                             float* g, float* u, cudaStream_t st);
void launch_wave_down_mma(const WaveLaunch& w, WType type, WLayout layout, const mma::XPrep& act, int in, int inter,
                          float* y, cudaStream_t st);
// Whether prompt passes take the wave launches: on by default; FERRY_MOE_WAVE=0 or moe_wave_tune(0) runs
// a launch per table (the same bits).
bool moe_wave();
void moe_wave_tune(int on);
// Whether a wave's mxfp4-tiles experts with x as hi + lo run on wgmma (sm90a/mxt_wave_wgmma.cuh; compute
// capability 9.0 devices only): 1 on, 0 off, -1 the environment's (FERRY_MXT_PROMPT_WGMMA, off: slower in
// the K3.1 slice's pass on the H200, faster in the benchmark; sm90a/mxt_wave_wgmma.cuh). Speed only: the
// same bits.
void moe_wave_wgmma_tune(int on);
// Blocks a SM the wave kernel (mma.sync, one m16 tile a warp) is compiled for: 2 (the default) or 3 (registers
// capped at 85); -1 the environment's (FERRY_MOE_WAVE_BLOCKS=3). Speed only: the same bits.
void moe_wave_blocks_tune(int blocks);
// Rows per row group of a prompt pass's wave (each group decodes its piece's weights once): 32 (kMmaBN, the
// default) or 64 (pieces of 33-64 rows then decode their weights once, not twice; the kernel holds 8 n8 tiles
// of accumulators); -1 the environment's (FERRY_MOE_WAVE_BN=64). Only with one m16 tile a warp
// (FERRY_MMA_GROUP_MW unset) and off wgmma. Speed only: an output's chain does not depend on its group.
void moe_wave_bn_tune(int rows);
// Stages of the wave kernel's copy pipeline: 3 (the default) or 4 .. 6 (mxfp4 tiles, x as hi only, 2 blocks a SM,
// row groups of 32; elsewhere 3); -1 the environment's (FERRY_MOE_WAVE_STAGES). Speed only: the same bits.
void moe_wave_stages_tune(int stages);
// 16-row weight tiles a warp in a prompt pass's expert kernels (per table and per wave): 1 (128-row tiles, the
// default) or 2 (256-row tiles: each x stage serves twice the weights); -1 the environment's (FERRY_MMA_GROUP_MW).
// Speed only: the same bits.
void moe_group_mw_tune(int mw);
// In that kernel, items with fewer than n n8 tiles of rows (1-4) run the mma.sync body instead, in the same
// launch; -1 the environment's (FERRY_MXT_WGMMA_MIN_NT, default 1: every item on wgmma). Speed only.
void mxt_wave_wgmma_min_nt_tune(int n);

// And outside prompt passes (decode steps, verify blocks), on matmul_dec.cuh's kernel (rows) or
// matmul_mxt.cuh's (mxfp4 tiles): the bits of CudaBackend::matmul on each expert's weight.
void launch_grouped_gate_up_dec(const GroupTable& t, WType type, WLayout layout, const mma::XPrep& x, int in,
                                int inter, float* g, float* u, cudaStream_t st);
void launch_grouped_down_dec(const GroupTable& t, WType type, WLayout layout, const mma::XPrep& act, int in,
                             int inter, float* y, cudaStream_t st);

}  // namespace ferry::cuda
