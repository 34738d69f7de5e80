// Matmul and embedding kernels of the CUDA back-end.
//
// y[r, o] = dot(x[r, :], W[o, :]) with a FIXED reduction order per output element that depends only
// on the weight (type, shape, alignment), never on the row count n, so a row's result is bit-identical
// alone or in a block of 16. Two paths, chosen by matmul_fast_supported():
//
// 1. Fast path (matmul_fast.cu: q8_0 and mxfp4, cols % 512 == 0, 16-byte aligned weight and x; every
//    spine and expert matrix of the real models). K runs in chunks of 512 columns = 16 quant blocks;
//    lane l of the warp that owns a weight row takes half (l & 1) of block (l >> 1) of every chunk.
//    Per chunk and row the lane forms s = sum of its 16 products x*q in index order (one FMA chain; q
//    the block's exact small integers / E2M1 values * 2^-14), then acc = fma(s, block scale, acc);
//    chunks in increasing K; finally a fixed xor butterfly (16, 8, 4, 2, 1) over the 32 lanes. With a
//    split K (splitk.cuh, the shapes matmul_ksplit picks) that is each part's order, and the parts' sums
//    are added in part order.
//    Weights are read once per group of up to 16 rows (mxfp4) / 8 rows (q8_0): a thread block of 4
//    warps x 4 weight rows stages each chunk's weight bytes and the group's x columns in shared memory
//    with cp.async (several chunks in flight), decodes each weight once and applies it to every row.
//    Which block computes which (tile, row group) item, and how deep the stages are, is speed only.
//    This order differs from the CPU back-end's, so results agree with it to ~1e-6 relative, not bits.
//
// 2. Generic path (below, f32 weights and other shapes): kernels/cpu/dot.hpp's order (lane l
//    accumulates columns l, l+32, ... with separately rounded multiply and add, then the lanes fold
//    pairwise), bit-identical to the CPU back-end. A block of 4 warps stages chunks of 1024 columns of
//    the group's x rows in shared memory, each warp stages its 2 weight rows' bytes.
//
// 3. Prompt passes (Backend::set_prompt_pass) run q8_0 / mxfp4 weights with cols % 128 == 0 on the
//    tensor cores instead (matmul_mma.cuh): their own order, row-invariant within prompt passes.
//
// 4. Decode steps and verify blocks run the weights matmul_dec_supported() picks (mxfp4, q8_0 of 12,288
//    rows and more) on the tensor cores (matmul_dec.cuh), the others on path 1: a choice by weight,
//    never by row count, so a row alone still equals the row in a block of 16. Both split K over
//    several blocks for the q8_0 shapes matmul_ksplit picks (splitk.cuh: partials added in part order).
//
// 5. q8_0 weights that Backend::prepare_matmul_weight repacked at load (WLayout::q8_tiles, matmul_q8t.cuh)
//    run on the tensor cores with kernels of their own, for every row count (decode steps and verify
//    blocks) and for prompt passes; paths 1-4 never see them.
//
// 6. mxfp4 weights of resident experts that Backend::prepare_expert_weights repacked at load
//    (WLayout::mx_tiles, matmul_mxt.cuh): path 4's bits (decode) and path 3's (prompt passes) from a
//    layout read straight into registers; paths 1 and 2 never see them.
//
// Measured on the H200 (tests/gpu MatmulBench: graph replays of 96 calls, weights rotated past L2;
// floor = bytes / 4.8 TB/s; device copy measured 4.25 TB/s), 2026-11-29, time in us (GB/s):
//   rows n                        1            2            4            8            16
//   mxfp4 3072x3584 (5.5 MB, floor 1.22 us)
//     before (generic path)   25.1 (233)   28.7 (204)   35.2 (166)   56.3 (104)   89.4 (65)
//     after (fast path)        6.9 (845)    8.9 (657)   12.4 (473)   17.5 (334)   28.4 (206)
//   q8_0 7168x7168 (54.6 MB, floor 11.4 us)
//     before (generic path)   43.0 (1270)  65.4 (835) 100.1 (545)  214.1 (255)  375.4 (145)
//     after (fast path)       27.9 (1959)  33.9 (1610) 40.1 (1362)  58.8 (929)   95.4 (572)
//   2026-12-01 (per-thread loader, shallow stages, docs/BENCHMARKS.md "resident decode kernels"):
//     mxfp4 3072x3584          7.9 (745)    8.5 (688)   10.7 (547)   17.3 (339)   27.9 (210)
//     q8_0 7168x7168          27.0 (2023)  30.9 (1769) 41.7 (1311)  66.8 (817)   97.1 (562)
//     q8_0 7168x33792         92.2 (2790) 109.1 (2359) 145.5 (1769) 247.6 (1040) 358.7 (717)
//     16 mxfp4 experts 3072x3584 (expert_ffn, 1 row each): 169.9 us = 1.65 TB/s
// The fast path is instruction-bound at one row (Nsight Compute: 0.67 warp-instructions issued per
// scheduler per cycle, DRAM at 1.5 TB/s for the mxfp4 experts): per weight it spends ~2.4 instructions
// on decode (nibble -> fp16 bits -> float; byte -> float for q8_0) besides the FMA. Next steps: a
// cheaper decode, smaller tiles or split-K for 7168-row matrices, tensor cores for 4+ rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/cuda/splitk.cuh"

namespace ferry::cuda {

// The split of a decode-step matmul's K dimension (splitk.cuh): parts and the unit their boundaries
// are multiples of. A function of the weight alone (type, shape): q8_0 matrices of few 16-row tiles
// get more parts, so that every SM has tiles to stream, and so do 7,168-row matrices with long rows
// (measured rule: matmul.cu); mxfp4 (the routed experts, whose batches have
// tiles enough) and the prompt pass's tensor-core kernel never split. Both decode kernels (the
// CUDA-core one of path 1 and the tensor-core one of path 4) take the same split.
struct KSplit {
  int parts = 1;
  int unit = 1024;
  int stream = 0;  // q8_0 tiles only: > 0, the stream split's workers (splitk.cuh Bufs::stream); parts its most a tile
};
KSplit matmul_ksplit(const Weight& w);
// Benchmark knob: -1 the rule (default), 0 never split, P > 0 that many parts (capped by the units of
// a row).
void matmul_ksplit_tune(int parts);

// q8_0 tiles (matmul_q8t.cuh): a resident q8_0 weight of plain matmuls repacked in place for the
// tensor cores, and its matmul for every row count. packable: q8_0 in row layout, rows % 16 == 0,
// cols % 256 == 0, 16-byte aligned. The repack copies up to scratch_bytes of tiles at a time to scratch.
bool matmul_q8t_packable(const Weight& w);
void launch_q8t_pack(const Weight& w, void* scratch, size_t scratch_bytes, cudaStream_t stream);
// The split of K for a q8_0-tiles weight (a function of its shape; FERRY_Q8T_PARTS or the tune knob fix
// the parts for measurements: -1 the rule, 0 none, P parts).
KSplit matmul_q8t_split(const Weight& w);
void matmul_q8t_split_tune(int parts);
// The stream split of a q8_0-tiles weight's decode matmul (splitk.cuh, "stream split"): -1 the rule or the
// environment's (FERRY_Q8T_STREAM=1 on: matrices of fewer than 528 tiles, one partial wave of the
// 4-blocks-a-SM grid, with 8 units or more a worker; =2 also those of 528 tiles and more whose tiles are not
// whole waves, for measurements; 0 or unset: off), 0 off, W > 0 every q8_0-tiles weight with W workers
// (tests). It changes the bits of the weights it takes (a split of K), as any split does, and keeps every row's
// bits independent of the rows in the call.
void matmul_q8t_stream_tune(int workers);
// The rule's shapes (whether the switch is on or not).
bool matmul_q8t_stream_rule(const Weight& w);
// Whether the q8_0-tiles decode kernels let the next programmatic-dependent launch start as soon as their
// last block is resident (its first weight loads then overlap this kernel's last wave): off until measured
// on the GPU (FERRY_Q8T_EARLY=1, or this knob: 1 on, 0 off, -1 the environment's). Same bits either way.
void matmul_q8t_early_tune(int on);
// 16-row tiles per warp of the q8_0-tiles prompt kernel: 1 (128-row blocks) or 2 (256); -1 the rule of
// matmul_q8t.cu (2 where the call fills the SMs) or the environment's (FERRY_Q8T_PROMPT_MW). Speed only:
// the same bits.
void matmul_q8t_prompt_mw_tune(int mw);
// The q8_0-tiles prompt kernel with one tile a warp, x swizzled in 256-byte rows and two blocks a SM: 1 on,
// 0 off, -1 the environment's (FERRY_Q8T_PROMPT_SWZ, off until measured). Speed only: the same bits.
void matmul_q8t_prompt_swz_tune(int on);
// The q8_0-tiles prompt kernel with two tiles a warp and x as hi + lo on wgmma (sm_90a: compute capability 9.0
// devices only; where the call fills the SMs with two tiles a warp or has 1,536 rows or more): 2 on with the
// two tiles' batches overlapped (the default), 1 on without, 0 off, -1 the environment's (FERRY_Q8T_PROMPT_WGMMA).
// Speed only: the same bits.
void matmul_q8t_prompt_wgmma_tune(int on);
int sm_count();  // the current device's SMs (read once)
namespace mma {
struct XPrep;
}
void launch_matmul_q8t(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t stream,
                       const splitk::Bufs& sk);
// Several q8_0-tiles weights of one width and one prepared x in one launch (up to 8 per launch): ys[i] = x @
// ws[i]^T, each with the bits of launch_matmul_q8t alone; sks[i]: weight i's split (matmul_q8t_split) and,
// split, its own partials and zeroed counters, apart from every other weight's of the launch.
void launch_matmul_q8t_group(const Weight* const* ws, float* const* ys, const splitk::Bufs* sks, size_t count,
                             const mma::XPrep& xp, int64_t n, cudaStream_t stream);
// Inside a prompt pass (matmul_q8t.cuh "prompt passes"): groups of 64 rows, 128-row tiles, no split.
void launch_matmul_q8t_prompt(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t stream);

// mxfp4 tiles (matmul_mxt.cuh): a resident expert's mxfp4 matrix repacked in place, with the bits of
// the row layout's tensor-core kernels. packable: mxfp4 in row layout, rows % 16 == 0, cols % 128 == 0,
// 16-byte aligned. The repack copies up to scratch_bytes of tiles (at least one) at a time to scratch
// (tile_pack.cuh). Decode steps and verify blocks: launch_matmul_mxt (x prepared in XOrder::mxt);
// prompt passes: launch_matmul_mma (x natural), which takes either layout.
bool matmul_mxt_packable(const Weight& w);
void launch_mxt_pack(const Weight& w, void* scratch, size_t scratch_bytes, cudaStream_t stream);
void launch_matmul_mxt(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t stream);
// Benchmark knob: units per load set of the grouped mxfp4-tiles kernel at one row per expert (2, 4, 8 or 14;
// 0 the default, mxt::set_units; -1 the environment's, FERRY_MXT_SET). Speed only: the bits are the same.
// `down`: the down projections' set, FERRY_MXT_SET_DOWN where set, else the one of both (the down launches
// stream at ~2.1 TB/s on the H100 and the H200 alike and gained from 6 blocks a SM over 5, 2026-12-07; a set
// of 2 gives them 8).
void matmul_mxt_set_tune(int units);
int matmul_mxt_set(bool down = false);
// Whether the grouped mxfp4-tiles decode kernel stages each down-projection item's x (one row) in shared
// memory instead of reading it unit by unit through L1 (matmul_mxt.cuh item_body XS): off until measured on
// the GPU (built 2026-12-02 after that day's device time; FERRY_MXT_XSMEM=1, or this knob: 1 on, 0 off, -1
// the environment's). Same bits either way.
void matmul_mxt_xsmem_tune(int on);
bool matmul_mxt_xsmem();
// Whether the grouped mxfp4-tiles decode kernel at one row per expert takes its lean loop (matmul_mxt.cuh
// item_body Lean: whole steps without per-unit tests, 80 registers, 6 blocks a SM): on by default (H100,
// 2026-12-07: alone within noise, +0.3 % decode with the push exchange); FERRY_MXT_LEAN=0 or this knob (1 on,
// 0 off, -1 the environment's) turns it off; 2 (or FERRY_MXT_LEAN=2): the down projections only (H100,
// 2026-12-07, Nsight serialized: lean made the down launches 46.2 -> 43.0 us, 6 blocks a SM instead of 5, and
// the gate / up ones 76.8 -> 79.0). Same bits.
void matmul_mxt_lean_tune(int on);
bool matmul_mxt_lean(bool down = false);

// Backend::matmul_group on q8_0 tiles: x prepared once for every q8_0-tiles weight of the group outside
// prompt passes (then one launch per weight, each with the bits of its matmul alone). On by default
// (H200, 2026-12-02: 4-layer slice decode 423-427 tok/s against 411-417 one by one, identical hashes);
// FERRY_Q8T_GROUP=0 or this knob (1 on, 0 off, -1 the environment's) turns it off.
void matmul_group_tune(int on);
// And whether the group's unsplit q8_0 tiles share one launch (launch_matmul_q8t_group) instead of one
// launch each: on by default (H200, 2026-12-02: a KDA layer's group 99.8 against 136.3 us, slice decode
// 476 against 458 tok/s, identical hashes); FERRY_Q8T_ONE_LAUNCH=0 or this knob (1 on, 0 off, -1 the
// environment's) turns it off. Same bits either way.
void matmul_group_launch_tune(int on);
// And whether the group's split q8_0 tiles (matmul_q8t_split parts > 1: matrices of few tiles) join that
// launch, each with its own partials and counters, instead of a launch each: on by default since the MoE's
// latent down projection (3584x7168, 2 parts) joins its shared experts' gate / up launch, as KDA's two small
// projections join theirs (H100, 2026-12-06: slice decode 523.9 against 511.8 tok/s; KDA's alone, H200
// 2026-12-02: 538.3 against 540.8, noise); FERRY_Q8T_GROUP_SPLIT=0 or this knob (1 on, 0 off, -1 the
// environment's) turns it off.
// Same bits either way.
void matmul_group_split_tune(int on);

// One-row f32 matmuls (routers, MLA's per-head matrices at one row) on a kernel of their own that keeps
// the generic path's order (matmul_f32_row1_kernel, matmul.cu): on by default (H200, 2026-12-02: a router
// 8.7 against 28.3 us, slice decode 463 against 458 tok/s, identical hashes); FERRY_F32_ROW1=0 or this
// knob (1 on, 0 off, -1 the environment's) turns it off. Same bits either way.
void matmul_f32_row1_tune(int on);
// The one-row f32 kernel with each block's row bulk-copied into shared memory before the programmatic wait
// (matmul_f32_row_bulk_kernel, matmul.cu): on by default (H100, 2026-12-07: +0.5 % decode with the push
// exchange; slower serialized under Nsight, 17 against 13 us a router, as its copies then overlap nothing);
// FERRY_F32_ROW_BULK=0 or this knob (1 on, 0 off, -1 the environment's) turns it off. Same order, same bits.
void matmul_f32_row_bulk_tune(int on);
// f32 matmuls of 32+ rows (a prompt pass's routers) on a kernel of register tiles that keeps the generic
// path's order (matmul_f32_tile_kernel, matmul.cu): on by default; FERRY_F32_TILE=0|1|2 or this knob (2 with
// two stages pipelined by cp.async, the default; 1 one stage at a time; 0 off; -1 the environment's) picks
// one. Same bits every way (the CPU's).
void matmul_f32_tile_tune(int on);

// Rows per group (one weight read serves this many rows) for a weight type.
int matmul_group_rows(WType t);

// Whether the fast path takes this weight and x (type, cols % 512, alignment).
bool matmul_fast_supported(const Weight& w, const float* x);
// Benchmark knobs of the fast path (plain matmul and grouped expert matmul): spread (0 = default, 1 =
// one work item per thread block, 2 = a grid of resident blocks each walking a run of items) and stage
// depth (0 = default, 1 = deep, 2 = shallow). They change speed only, never results.
void matmul_fast_tune(int spread, int depth);
// The launchers' choices under the knobs: shallow stages? and the grid for nitems work items when
// per_sm blocks fit on an SM. q8: the weight type is q8_0 (else mxfp4).
bool fast_shallow(bool q8);
int64_t fast_grid(int64_t nitems, int per_sm, bool q8);
// The fast path (matmul_fast.cu); only for matmul_fast_supported(w, x).
// sk: the split of K (CudaBackend::split_bufs: matmul_ksplit(w) and its scratch).
void launch_matmul_fast(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t stream,
                        const splitk::Bufs& sk);

// Launch y = x @ W^T on `stream` (all pointers device memory; sk as above).
void launch_matmul(const Weight& w, const float* x, int64_t n, float* y, cudaStream_t stream,
                   const splitk::Bufs& sk);

// y[i] = decoded row ids[i] of the table; ids are device memory and already range-checked.
void launch_embed(const Weight& table, const int32_t* ids, int64_t n, float* y, cudaStream_t stream);

}  // namespace ferry::cuda
