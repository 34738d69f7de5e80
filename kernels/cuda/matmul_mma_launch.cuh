// Host side of the tensor-core matmuls: the prompt pass's (matmul_mma.cuh) and the decode steps' and
// verify blocks' (matmul_dec.cuh); those files have the kernels and the rules.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/cuda/splitk.cuh"

namespace ferry::cuda {

namespace mma {
// An activation prepared by prep_x: row r of x is (hi[r*stride ..] + lo[r*stride ..]) * inv[r]
// (lo == nullptr with one level), or with lo8 (x's lo as E4M3 for mxfp4 weights, mma_levels() 3; lo8_bits.cuh)
// (hi[r*stride ..] + lo8[r*stride ..] * 2^-5) * inv[r], lo8's columns in lo8::lo8_pos order.
struct XPrep {
  const __half* hi = nullptr;
  const __half* lo = nullptr;
  const float* inv = nullptr;     // 2^-k of each row
  int64_t stride = 0;             // halves per row (the matmul's cols); lo8: bytes per row
  const uint8_t* lo8 = nullptr;   // E4M3 lo (then lo is null)
  // The prompt kernels' template L this x takes: 1 (hi only), 2 (hi + lo fp16) or 3 (hi + lo8; mxfp4 only).
  int levels() const { return lo8 ? 3 : lo ? 2 : 1; }
};
}  // namespace mma

// Whether a prompt pass runs this weight on the tensor cores (q8_0 / mxfp4, cols % 128 == 0, data
// 16-byte aligned and a multiple of 16 bytes long, and the path not switched off).
bool matmul_mma_supported(const Weight& w);
// Measurement switch, read once from the environment: FERRY_MMA=0 (prompt passes on the CUDA-core kernels).

// x's levels in a prompt pass's tensor-core matmuls: 2 (hi + lo, 22 of x's 24 bits, the default) or 1 (hi only:
// x rounded to 11 significant bits after its row's power-of-two scaling, half the tensor-core work):
// FERRY_MMA_LEVELS=1|2, or the tune knob (1, 2; -1 the environment's), else kDefaultMmaLevels. A run keeps one
// choice throughout (a prompt row's bits depend on it); decode steps and verify blocks always take both.
// One level is faster (H100, 2026-12-07: the 1,024-token pass of the K3.1 slice 98.1 -> 79.6 ms, the same
// greedy ids there; K3 tiny within 8.4e-3 of llama.cpp's F32 logits, greedy ids equal) and was the default
// for a day, but it breaks the fixtures' exactness bar (H100, 2026-12-07f, docs/results/2026-12-07f-hf-levels):
// the kimi_linear-a checkpoint's greedy continuation then differs from transformers' (and from the CPU
// back-end's), and three families' teacher-forced logits leave the 1e-4 bound. So it is a user's choice
// (`--prompt-x-bits 11`), not the default.
// 3 (FERRY_MMA_LEVELS=3 only): x entering an mxfp4 weight takes hi in fp16 and lo in E4M3 (~15 bits, 3 mma a
// quant block and n8 tile instead of 4: lo8_bits.cuh); q8_0 weights keep hi + lo (22 bits). Exact enough (H100,
// 2026-12-07i: every model test passes, K3 tiny as close to llama.cpp as at two levels) but slower: the
// 1,024-token pass 99.5 -> 109.8 ms, the routed experts 44.7 -> 53.3 ms. So no engine option offers it.
constexpr int kDefaultMmaLevels = 2;
constexpr int kLevelsLo8 = 3;
int mma_levels();
void matmul_mma_levels_tune(int levels);
// Whether a prompt pass prepares x for weights of this type with lo as E4M3 (mma_levels() 3 and mxfp4).
inline bool prompt_lo8(WType type) { return type == WType::mxfp4 && mma_levels() == kLevelsLo8; }

// Whether decode steps and verify blocks (every matmul outside a prompt pass) run this weight on the
// tensor cores (matmul_dec.cuh) rather than on the CUDA-core kernels of matmul_fast.cuh: by default
// the weights where they were measured faster (mxfp4, and q8_0 of 12,288 rows and more; matmul_mma.cu
// dec_wins); FERRY_DEC_MMA=1 every shape the kernels take (cols % 128 == 0, aligned), =0 none. Always a
// function of the weight alone.
bool matmul_dec_supported(const Weight& w);
enum class DecMode { off, auto_, all };
// Sets the mode (tests, benchmarks) and returns the previous one. A run keeps one mode throughout:
// the two kernel families give different last bits.
DecMode matmul_dec_mode(DecMode m);
// Quant blocks per warp per stage of the decode kernels for a row of cols (8 when cols % 1024 == 0,
// 4 when cols % 512 == 0, else 1; FERRY_DEC_KB caps it for measurements): the stage width, speed only.
int dec_stage_blocks(int64_t cols);

// Device bytes prep_x needs for n rows of cols.
size_t mma_prep_bytes(int64_t n, int64_t cols);
// x [n, cols] (contiguous) prepared into buf (mma_prep_bytes(n, cols) bytes) on stream st: hi + lo, or
// hi only when mma_levels() is 1 (`--prompt-x-bits 11`), unless both_levels (the decode kernels always take both);
// hi + lo8 (E4M3) when lo8 is asked for (prompt_lo8: level 3 and an mxfp4 weight) and not both_levels.
// order: natural, mx (the decode kernels' mxfp4 order: within each 16 columns, 4t + j at 2t + (j & 1)
// + 8 (j >> 1); matmul_dec.cuh) or mxt (below).
// mxt (the mxfp4 tiles' decode kernel, matmul_mxt.cuh): within each 32 columns, 16s + 4t + j at 8t + 4s + j.
enum class XOrder { natural, mx, mxt };
// The order prep_x writes for a weight: the decode kernels read mxfp4's x permuted (mx for the row
// layout, mxt for the mxfp4 tiles), the prompt pass's kernels and q8_0 read it in natural order.
inline XOrder x_order(WType type, bool prompt, WLayout layout = WLayout::rows) {
  if (prompt || type != WType::mxfp4) return XOrder::natural;
  return layout == WLayout::mx_tiles ? XOrder::mxt : XOrder::mx;
}
// lo8 (prompt passes, natural order only): lo as E4M3 in lo8's order instead of fp16 (prompt_lo8 of the weights).
mma::XPrep prep_x(const float* x, int64_t n, int64_t cols, void* buf, cudaStream_t st, bool both_levels = false,
                  XOrder order = XOrder::natural, bool lo8 = false);
// y [n, w.rows] = x @ W^T from x prepared by prep_x: a prompt pass's kernel (matmul_mma.cuh).
void launch_matmul_mma(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t st);
// The same for decode steps and verify blocks (matmul_dec.cuh; x prepared with both levels).
void launch_matmul_dec(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t st,
                       const splitk::Bufs& sk);

}  // namespace ferry::cuda
