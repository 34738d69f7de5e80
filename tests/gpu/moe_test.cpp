// CUDA expert_ffn and moe_combine (kernels/cuda/moe.cu, moe_grouped.cu):
//  - bit-identical to the CUDA per-expert op sequence the MoE layer used to issue (copies, matmul,
//    activation, matmul), on the grouped tensor-core paths (prompt passes; decode steps and verify
//    blocks), the grouped CUDA-core path (q8_0 / mxfp4, cols % 512 == 0) and the generic fallback
//    (other shapes, unaligned x, batches whose weights take different paths), for decode batches and
//    prompt batches whose experts are cut into pieces and waves;
//  - each row of a 16-expert batch bit-identical to that row alone;
//  - against the CPU back-end within tolerance (the fast matmul sums in its own order, matmul_test.cpp:
//    1e-5 relative per matmul; through gate/up, the activation and down the differences compound and
//    CUDA's tanhf/expf differ from glibc's by an ulp or two: 1e-4 of max|cpu|);
//  - moe_combine bit-identical to the CPU (both are the axpy sequence with separately rounded ops);
//  - MoeBench: per-expert sequence vs expert_ffn on a K3 decode batch (16 experts of 3072x3584 MXFP4).
// Outputs are NaN-poisoned first so unwritten rows show.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include <random>

#include "io/errors.hpp"
#include "kernels/model/top_k.hpp"
#include "tests/gpu/gpu_util.hpp"
#include "tests/kernels/cpu/moe_util.hpp"
#if FERRY_WITH_CUDA
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe.cuh"
#endif

namespace ferry::test {
namespace {

using Ops = GpuOps;

constexpr double kCpuTol = 1e-4;  // see the file comment
enum class Pass { decode, prompt };  // whether check_batch runs inside a prompt pass
#if FERRY_WITH_CUDA
// With x as hi only in a prompt pass's matmuls (cuda::mma_levels() 1, FERRY_MMA_LEVELS=1: 11 bits into gate / up
// and again into down) its experts measured up to 4.05e-3 of max|cpu| on these random weights (H100,
// 2026-12-07): bound 1e-2. Decode batches and verify blocks always take both levels: kCpuTol.
// With x's lo as E4M3 for mxfp4 weights (levels 3, FERRY_MMA_LEVELS=3: ~15 bits, a sixteenth of one level's error)
// bound 1e-3; q8_0 keeps two fp16 levels there.
inline double cpu_tol(Pass pass, WType t) {
  if (pass != Pass::prompt) return kCpuTol;
  const int lv = cuda::mma_levels();
  return lv == 1 ? 1e-2 : lv == 3 && t == WType::mxfp4 ? 1e-3 : kCpuTol;
}
#endif

struct Shape {
  WType t;
  int64_t in, inter;
};

ExpertFfnArgs args_for(std::span<const ExpertCall> calls, const float* x, int64_t x_rows, float* y, int64_t y_rows,
                       Shape s, const ExpertAct& act) {
  ExpertFfnArgs a;
  a.calls = calls.data();
  a.n_calls = calls.size();
  a.x = x;
  a.x_rows = x_rows;
  a.y = y;
  a.y_rows = y_rows;
  a.in = s.in;
  a.inter = s.inter;
  a.act = act;
  return a;
}

int64_t rows_of(const std::vector<int64_t>& m) { return std::accumulate(m.begin(), m.end(), int64_t{0}); }

// expert_ffn vs the per-expert sequence on the GPU (bits) and vs expert_ffn on the CPU (tolerance).
void check_batch(Backend& gpu, Backend& cpu, Shape s, const std::vector<int64_t>& m, int64_t x_rows,
                 int64_t x_offset, const ExpertAct& act, uint32_t seed, const std::string& what,
                 Pass pass = Pass::decode) {
  RandomExperts eg(gpu, s.t, static_cast<int64_t>(m.size()), s.in, s.inter, seed);
  RandomExperts ec(cpu, s.t, static_cast<int64_t>(m.size()), s.in, s.inter, seed);
  Batch bg = random_batch(eg, 0, m, x_rows, seed + 1), bc = random_batch(ec, 0, m, x_rows, seed + 1);
  const int64_t y_rows = rows_of(m);
  // x_offset floats in front of x: an unaligned x must take the generic path and still match.
  const auto xv = random_floats(static_cast<size_t>(x_rows * s.in + x_offset), seed + 2);
  Buf xg(gpu, xv.size()), xc(cpu, xv.size());
  gpu.upload(xg, xv.data(), xv.size() * 4);
  cpu.upload(xc, xv.data(), xv.size() * 4);
  const auto poison = poisoned(static_cast<size_t>(y_rows * s.in));
  Buf yf(gpu, poison.size()), ys(gpu, poison.size()), yc(cpu, poison.size());
  for (Buf* b : {&yf, &ys}) gpu.upload(*b, poison.data(), poison.size() * 4);
  cpu.upload(yc, poison.data(), poison.size() * 4);
  const auto calls_g = bg.bind();
  gpu.expert_ffn(args_for(calls_g, xg.get() + x_offset, x_rows, yf, y_rows, s, act));
  per_expert_sequence(gpu, args_for(calls_g, xg.get() + x_offset, x_rows, ys, y_rows, s, act));
  cpu.expert_ffn(args_for(bc.bind(), xc.get() + x_offset, x_rows, yc, y_rows, s, act));
  std::vector<float> f(poison.size()), q(poison.size()), c(poison.size());
  gpu.download(f.data(), yf, f.size() * 4);
  gpu.download(q.data(), ys, q.size() * 4);
  cpu.download(c.data(), yc, c.size() * 4);
  EXPECT_TRUE(bits_equal((what + " vs cuda sequence").c_str(), q, f)) << what;
  EXPECT_LE(rel_err((what + " vs cpu").c_str(), c, f), cpu_tol(pass, s.t)) << what;
}

TEST_F(Ops, ExpertFfnDecodeBatchesMatchTheCudaSequenceBitwise) {
  const Shape fast{WType::mxfp4, 512, 1024};
  for (const ExpertAct& act : all_acts())
    for (const auto& m : {std::vector<int64_t>{1}, std::vector<int64_t>(5, 1), std::vector<int64_t>(16, 1),
                          std::vector<int64_t>{1, 3, 16, 2, 7, 1, 1, 4, 9, 1, 1, 12, 1, 2, 5, 16}})
      check_batch(gpu(), cpu(), fast, m, 16, 0, act, 10, "mxfp4 " + std::to_string(m.size()) + " experts situ=" +
                                                            std::to_string(act.situ));
}

TEST_F(Ops, ExpertFfnK3ShapesAndQ8MatchTheCudaSequenceBitwise) {
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 3584, 3072}, std::vector<int64_t>(16, 1), 1, 0, all_acts()[2], 20,
              "K3 decode: 16 mxfp4 experts 3072x3584, 1 row");
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 3584, 3072}, {4, 1, 8, 2}, 8, 0, all_acts()[2], 21,
              "K3 verify block: 4 experts, 8 rows");
  check_batch(gpu(), cpu(), Shape{WType::q8_0, 1024, 512}, {1, 9, 3, 8, 16}, 16, 0, all_acts()[0], 22,
              "q8_0 5 experts");
}

// Prompt-pass batches: experts with more rows than one launch takes (256), more than 16 pieces per
// launch, and more rows than one wave (2048).
TEST_F(Ops, ExpertFfnPromptBatchesSplitIntoPiecesAndWavesMatchBitwise) {
  std::vector<int64_t> m{300, 1, 700, 17};
  for (int i = 0; i < 20; ++i) m.push_back(1 + (i * 37) % 90);
  m.push_back(1100);
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 512, 512}, m, 1200, 0, all_acts()[1], 30,
              "prompt " + std::to_string(rows_of(m)) + " rows");
}

// A prompt pass on the tensor cores (Backend::set_prompt_pass; kernels/cuda/matmul_mma.cuh): the
// grouped kernels give the bits of the per-expert matmuls in the same pass, within tolerance of the CPU,
// with a launch per table of pieces and with a wave's tables in one launch (cuda::moe_wave_tune; the
// first batch has 28 pieces over 2 tables, the second a wave of 1,100 rows over 5 and a second wave).
TEST_F(Ops, PromptPassExpertFfnOnTensorCoresMatchesPerExpertMatmulsBitwise) {
  // wave 2: a wave per launch on the kernel compiled for 3 blocks a SM (cuda::moe_wave_blocks_tune); wave 3: a
  // wave per launch in row groups of 64 (cuda::moe_wave_bn_tune); wave 4: 5 copy stages (cuda::moe_wave_stages_tune:
  // the mxfp4 tiles with x as hi only; the rows format here keeps 3, so this case checks the switch changes nothing
  // else); wave 5: 256-row weight tiles, two 16-row tiles a warp (cuda::moe_group_mw_tune). Each at the default
  // levels of x and with x's lo as E4M3 for the mxfp4 weights (levels 3: cuda::matmul_mma_levels_tune).
  for (const int lv : {-1, 3})
  for (const int wave : {0, 1, 2, 3, 4, 5}) {
  SCOPED_TRACE(std::string("levels ") + std::to_string(lv) + ": " +
               (wave == 5   ? "a wave per launch, 256-row weight tiles"
               : wave == 4 ? "a wave per launch, 5 copy stages"
               : wave == 3 ? "a wave per launch, groups of 64 rows"
               : wave == 2 ? "a wave per launch, 3 blocks a SM"
               : wave      ? "a wave per launch"
                           : "a launch per table"));
#if FERRY_WITH_CUDA
  cuda::matmul_mma_levels_tune(lv);
  cuda::moe_wave_tune(wave ? 1 : 0);
  cuda::moe_wave_blocks_tune(wave == 2 ? 3 : -1);
  cuda::moe_wave_bn_tune(wave == 3 ? 64 : -1);
  cuda::moe_wave_stages_tune(wave == 4 ? 5 : -1);
  cuda::moe_group_mw_tune(wave == 5 ? 2 : -1);
#endif
  gpu().set_prompt_pass(true);
  std::vector<int64_t> m{18, 1, 40, 3, 70, 17, 33, 300};
  for (int i = 0; i < 20; ++i) m.push_back(1 + (i * 37) % 50);
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 512, 384}, m, 400, 0, all_acts()[2], 60,
              "mma prompt " + std::to_string(rows_of(m)) + " rows", Pass::prompt);
  check_batch(gpu(), cpu(), Shape{WType::q8_0, 1024, 256}, {1, 9, 3, 64, 16}, 100, 0, all_acts()[0], 61,
              "mma q8_0 prompt", Pass::prompt);
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 3584, 3072}, {18, 2, 25}, 30, 0, all_acts()[1], 62,
              "mma K3 shape prompt", Pass::prompt);
  std::vector<int64_t> big{300, 1, 700, 17};
  for (int i = 0; i < 20; ++i) big.push_back(1 + (i * 37) % 90);
  big.push_back(1100);
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 512, 512}, big, 1200, 0, all_acts()[1], 63,
              "mma prompt " + std::to_string(rows_of(big)) + " rows, 2 waves", Pass::prompt);
  gpu().set_prompt_pass(false);
  }
#if FERRY_WITH_CUDA
  cuda::moe_wave_tune(-1);
  cuda::moe_wave_blocks_tune(-1);
  cuda::moe_wave_bn_tune(-1);
  cuda::moe_wave_stages_tune(-1);
  cuda::moe_group_mw_tune(-1);
  cuda::matmul_mma_levels_tune(-1);
#endif
}

// Decode steps and verify blocks on the tensor cores (kernels/cuda/matmul_dec.cuh): the grouped kernels
// give the bits of the per-expert matmuls (which take the same kernel), for 1 to 16 rows per expert,
// both formats and the K3 shape, within tolerance of the CPU.
TEST_F(Ops, DecodeExpertFfnOnTensorCoresMatchesPerExpertMatmulsBitwise) {
  DecodeOnTensorCores on;
  for (const auto& m : {std::vector<int64_t>{1}, std::vector<int64_t>(16, 1), std::vector<int64_t>{4, 1, 3, 2},
                        std::vector<int64_t>{1, 3, 16, 2, 7, 1, 1, 4, 9, 1, 1, 12, 1, 2, 5, 16}})
    check_batch(gpu(), cpu(), Shape{WType::mxfp4, 512, 1024}, m, 16, 0, all_acts()[2], 90,
                "dec mxfp4 " + std::to_string(m.size()) + " experts");
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 3584, 3072}, std::vector<int64_t>(16, 1), 1, 0, all_acts()[1], 91,
              "dec K3 decode: 16 mxfp4 experts 3072x3584, 1 row");
  check_batch(gpu(), cpu(), Shape{WType::q8_0, 1024, 512}, {1, 9, 3, 8, 16}, 16, 0, all_acts()[0], 92,
              "dec q8_0 5 experts");
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 512, 384}, {2, 5, 1}, 8, 1, all_acts()[2], 93,
              "dec: unaligned x, inter % 512 != 0");
}

// The generic fallback: shapes the fast path does not take, and an x that is not 16-byte aligned.
TEST_F(Ops, ExpertFfnGenericFallbackMatchesBitwise) {
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 256, 128}, {2, 5, 1, 16}, 16, 0, all_acts()[2], 40,
              "generic: in 256, inter 128");
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 512, 1024}, {2, 5, 1, 16}, 16, 1, all_acts()[2], 41,
              "generic: unaligned x");
  check_batch(gpu(), cpu(), Shape{WType::mxfp4, 512, 544}, {3, 1}, 4, 0, all_acts()[0], 42,
              "mixed: down not %512");
  // By default the decode kernels take q8_0 weights of 12,288 rows and more (matmul_dec_supported):
  // down here, gate and up not, so the batch goes per expert.
  check_batch(gpu(), cpu(), Shape{WType::q8_0, 12288, 512}, {2, 1, 3}, 4, 0, all_acts()[0], 43,
              "mixed: down on the decode tensor cores, gate / up on the CUDA cores");
}

// Resident experts in the CUDA back-end's mxfp4 tiles (Backend::prepare_expert_weights,
// kernels/cuda/matmul_mxt.cuh) give the bits of the same experts in rows (what the device cache of a
// streamed model holds): expert_ffn for decode batches (1 row per expert), verify blocks (up to 16 rows)
// and prompt passes (hundreds of rows, pieces of more than one launch), at the K3 shape and a small one
// with inter % 512 != 0; and plain matmuls of a tiled matrix for 1 to 100 rows, in and out of prompt passes.
TEST_F(Ops, MxTilesExpertsGiveTheBitsOfTheRowLayout) {
#if FERRY_WITH_CUDA
  struct Case {
    Shape s;
    std::vector<int64_t> m;
    int64_t x_rows;
    bool prompt;
    const char* what;
  };
  std::vector<int64_t> prompt_m{18, 1, 40, 3, 70, 17, 33, 300};
  for (int i = 0; i < 12; ++i) prompt_m.push_back(1 + (i * 37) % 50);
  const std::vector<Case> cases{
      {{WType::mxfp4, 3584, 3072}, std::vector<int64_t>(16, 1), 1, false, "K3 decode, 16 experts x 1 row"},
      {{WType::mxfp4, 3584, 3072}, {4, 1, 8, 2, 16, 3}, 16, false, "K3 verify block"},
      {{WType::mxfp4, 3584, 3072}, {18, 2, 25}, 30, true, "K3 prompt pass"},
      {{WType::mxfp4, 512, 384}, {1, 3, 16, 2, 7, 1, 1, 4, 9, 1, 1, 12, 1, 2, 5, 16}, 16, false, "small decode"},
      {{WType::mxfp4, 512, 384}, prompt_m, 400, true, "small prompt pass"},
  };
  uint32_t seed = 500;
  for (const Case& c : cases) {
    seed += 10;
    RandomExperts rows(gpu(), c.s.t, static_cast<int64_t>(c.m.size()), c.s.in, c.s.inter, seed);
    RandomExperts tiles(gpu(), c.s.t, static_cast<int64_t>(c.m.size()), c.s.in, c.s.inter, seed);
    tiles.prepare_resident();
    for (size_t e = 0; e < tiles.size(); ++e)
      for (const Weight* w : {&tiles[e].gate, &tiles[e].up, &tiles[e].down})
        ASSERT_EQ(w->layout, WLayout::mx_tiles) << c.what;
    Batch br = random_batch(rows, 0, c.m, c.x_rows, seed + 1), bt = random_batch(tiles, 0, c.m, c.x_rows, seed + 1);
    const int64_t y_rows = rows_of(c.m);
    const auto xv = random_floats(static_cast<size_t>(c.x_rows * c.s.in), seed + 2);
    Buf x(gpu(), xv.size());
    gpu().upload(x, xv.data(), xv.size() * 4);
    const auto poison = poisoned(static_cast<size_t>(y_rows * c.s.in));
    Buf yr(gpu(), poison.size()), yt(gpu(), poison.size());
    for (Buf* b : {&yr, &yt}) gpu().upload(*b, poison.data(), poison.size() * 4);
    gpu().set_prompt_pass(c.prompt);
    gpu().expert_ffn(args_for(br.bind(), x, c.x_rows, yr, y_rows, c.s, all_acts()[2]));
    gpu().expert_ffn(args_for(bt.bind(), x, c.x_rows, yt, y_rows, c.s, all_acts()[2]));
    gpu().set_prompt_pass(false);
    std::vector<float> r(poison.size()), t(poison.size());
    gpu().download(r.data(), yr, r.size() * 4);
    gpu().download(t.data(), yt, t.size() * 4);
    EXPECT_TRUE(bits_equal((std::string(c.what) + ": tiles vs rows").c_str(), r, t)) << c.what;
    // A prompt pass's waves on wgmma (moe_wave_wgmma_tune; an H100 / H200 only; x as hi + lo) and off: the same
    // bits; wg 2: on wgmma with items of 1-2 n8 tiles of rows on mma.sync in the same launch
    // (mxt_wave_wgmma_min_nt_tune); wg 3: mma.sync compiled for 3 blocks a SM (moe_wave_blocks_tune); wg 4: row
    // groups of 64 (moe_wave_bn_tune); wg 5 / 6: 4 / 6 copy stages (moe_wave_stages_tune; x as hi only); wg 7:
    // 256-row weight tiles (moe_group_mw_tune).
    for (const int wg : {1, 2, 0, 3, 4, 5, 6, 7}) {
      if (!c.prompt) break;
      gpu().upload(yt, poison.data(), poison.size() * 4);
      cuda::moe_wave_wgmma_tune(wg == 1 || wg == 2 ? 1 : 0);
      cuda::mxt_wave_wgmma_min_nt_tune(wg == 2 ? 3 : -1);
      cuda::moe_wave_blocks_tune(wg == 3 ? 3 : -1);
      cuda::moe_wave_bn_tune(wg == 4 ? 64 : -1);
      cuda::moe_wave_stages_tune(wg == 5 ? 4 : wg == 6 ? 6 : -1);
      cuda::moe_group_mw_tune(wg == 7 ? 2 : -1);
      gpu().set_prompt_pass(true);
      gpu().expert_ffn(args_for(bt.bind(), x, c.x_rows, yt, y_rows, c.s, all_acts()[2]));
      gpu().set_prompt_pass(false);
      cuda::moe_wave_wgmma_tune(-1);
      cuda::mxt_wave_wgmma_min_nt_tune(-1);
      cuda::moe_wave_blocks_tune(-1);
      cuda::moe_wave_bn_tune(-1);
      cuda::moe_wave_stages_tune(-1);
      cuda::moe_group_mw_tune(-1);
      gpu().download(t.data(), yt, t.size() * 4);
      EXPECT_TRUE(bits_equal((std::string(c.what) + ": tiles, wave on wgmma " + std::to_string(wg)).c_str(), r, t));
    }
    // x's lo as E4M3 (levels 3, cuda::matmul_mma_levels_tune; lo8_bits.cuh): tiles and rows again give the same bits
    // as each other, with the wave kernel's default, 3 blocks a SM (wg 3), row groups of 64 (4) and 256-row weight
    // tiles (7).
    if (c.prompt) {
      cuda::matmul_mma_levels_tune(3);
      std::vector<float> r3(poison.size());
      gpu().upload(yr, poison.data(), poison.size() * 4);
      gpu().set_prompt_pass(true);
      gpu().expert_ffn(args_for(br.bind(), x, c.x_rows, yr, y_rows, c.s, all_acts()[2]));
      gpu().set_prompt_pass(false);
      gpu().download(r3.data(), yr, r3.size() * 4);
      for (const int wg : {0, 3, 4, 7}) {
        gpu().upload(yt, poison.data(), poison.size() * 4);
        cuda::moe_wave_blocks_tune(wg == 3 ? 3 : -1);
        cuda::moe_wave_bn_tune(wg == 4 ? 64 : -1);
        cuda::moe_group_mw_tune(wg == 7 ? 2 : -1);
        gpu().set_prompt_pass(true);
        gpu().expert_ffn(args_for(bt.bind(), x, c.x_rows, yt, y_rows, c.s, all_acts()[2]));
        gpu().set_prompt_pass(false);
        cuda::moe_wave_blocks_tune(-1);
        cuda::moe_wave_bn_tune(-1);
        cuda::moe_group_mw_tune(-1);
        gpu().download(t.data(), yt, t.size() * 4);
        EXPECT_TRUE(bits_equal((std::string(c.what) + ": lo as E4M3, tiles vs rows, wave " + std::to_string(wg)).c_str(), r3, t));
      }
      cuda::matmul_mma_levels_tune(-1);
    }
    // The load-set sizes the benchmark sweeps at one row per expert change the speed, not the bits; nor
    // does x staged in shared memory for the down projections (matmul_mxt_xsmem_tune; with the default
    // set, and with a set of 2, whose register cap differs).
    for (const auto& [units, xsmem] : {std::pair{2, 0}, {8, 0}, {14, 0}, {0, 1}, {2, 1}}) {
      if (c.prompt || *std::max_element(c.m.begin(), c.m.end()) != 1) break;
      gpu().upload(yt, poison.data(), poison.size() * 4);
      cuda::matmul_mxt_set_tune(units);
      cuda::matmul_mxt_xsmem_tune(xsmem);
      gpu().expert_ffn(args_for(bt.bind(), x, c.x_rows, yt, y_rows, c.s, all_acts()[2]));
      cuda::matmul_mxt_set_tune(0);
      cuda::matmul_mxt_xsmem_tune(-1);
      gpu().download(t.data(), yt, t.size() * 4);
      EXPECT_TRUE(bits_equal((std::string(c.what) + ": tiles, set of " + std::to_string(units) + ", x in shared memory " +
                              std::to_string(xsmem)).c_str(), r, t));
    }
    // The lean loop (matmul_mxt_lean_tune; on by default) off, and for the down projections only: the same bits.
    for (const int lean : {0, 2}) {
      if (c.prompt || *std::max_element(c.m.begin(), c.m.end()) != 1) break;
      gpu().upload(yt, poison.data(), poison.size() * 4);
      cuda::matmul_mxt_lean_tune(lean);
      gpu().expert_ffn(args_for(bt.bind(), x, c.x_rows, yt, y_rows, c.s, all_acts()[2]));
      cuda::matmul_mxt_lean_tune(-1);
      gpu().download(t.data(), yt, t.size() * 4);
      EXPECT_TRUE(bits_equal((std::string(c.what) + ": tiles, lean loop " + std::to_string(lean)).c_str(), r, t));
    }
    // The plain matmul of one tiled matrix (gate, then down) against its rows.
    for (const bool prompt : {false, true})
      for (const int64_t n : {1, 2, 4, 5, 8, 16, 100}) {
        if (!prompt && n > 16) continue;
        for (const int z : {0, 2}) {
          const Weight& wr = z == 0 ? rows[0].gate : rows[0].down;
          const Weight& wt = z == 0 ? tiles[0].gate : tiles[0].down;
          const auto xm = random_floats(static_cast<size_t>(n * wr.cols), seed + 3 + static_cast<uint32_t>(n));
          Buf xb(gpu(), xm.size()), o1(gpu(), static_cast<size_t>(n * wr.rows)), o2(gpu(), static_cast<size_t>(n * wr.rows));
          gpu().upload(xb, xm.data(), xm.size() * 4);
          gpu().set_prompt_pass(prompt);
          gpu().matmul(wr, xb, n, o1);
          gpu().matmul(wt, xb, n, o2);
          gpu().set_prompt_pass(false);
          std::vector<float> a(static_cast<size_t>(n * wr.rows)), b(a.size());
          gpu().download(a.data(), o1, a.size() * 4);
          gpu().download(b.data(), o2, b.size() * 4);
          EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
              << c.what << ": matmul " << (z == 0 ? "gate" : "down") << " n=" << n << " prompt=" << prompt;
        }
      }
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// A batch that mixes resident experts (mxfp4 tiles) with experts in rows is refused by name, and the CPU
// back-end refuses a tiled matrix (it reads rows only).
TEST_F(Ops, MxTilesMixedWithRowsAreRefusedByName) {
#if FERRY_WITH_CUDA
  const Shape s{WType::mxfp4, 512, 384};
  RandomExperts rows(gpu(), s.t, 2, s.in, s.inter, 700), tiles(gpu(), s.t, 2, s.in, s.inter, 700);
  tiles.prepare_resident();
  Batch b = random_batch(rows, 0, {1, 1}, 1, 701);
  b.calls[1] = ExpertCall{tiles[1].gate, tiles[1].up, tiles[1].down};
  const auto xv = random_floats(static_cast<size_t>(s.in), 702);
  Buf x(gpu(), xv.size()), y(gpu(), static_cast<size_t>(2 * s.in));
  gpu().upload(x, xv.data(), xv.size() * 4);
  try {
    gpu().expert_ffn(args_for(b.bind(), x, 1, y, 2, s, all_acts()[2]));
    ADD_FAILURE() << "a mixed batch ran";
  } catch (const TensorError& e) {
    EXPECT_NE(std::string(e.what()).find("mxfp4 tiles"), std::string::npos) << e.what();
  }
  Weight w = tiles[0].gate;
  Buf xc(cpu(), static_cast<size_t>(s.in)), yc(cpu(), static_cast<size_t>(s.inter));
  EXPECT_THROW(cpu().matmul(w, xc, 1, yc), TensorError);
  // One matrix of a call that the tiles do not take (cols % 128 != 0) keeps every matrix of it in rows.
  RandomExperts odd(gpu(), s.t, 1, 256 + 32, 384, 703), fine(gpu(), s.t, 1, s.in, s.inter, 704);
  Weight a = fine[0].gate, c = odd[0].gate;
  Weight* both_ws[2] = {&a, &c};
  gpu().prepare_expert_weights(both_ws, 2);
  EXPECT_EQ(a.layout, WLayout::rows);
  EXPECT_EQ(c.layout, WLayout::rows);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

TEST_F(Ops, ExpertFfnRowInABatchOfSixteenEqualsTheRowAlone) {
  const Shape s{WType::mxfp4, 3584, 3072};
  RandomExperts ex(gpu(), s.t, 16, s.in, s.inter, 50);
  std::vector<int64_t> m(16);
  for (size_t i = 0; i < m.size(); ++i) m[i] = 1 + static_cast<int64_t>(i % 4);
  Batch big = random_batch(ex, 0, m, 8, 51);
  const int64_t y_rows = rows_of(m);
  auto x = both(random_floats(static_cast<size_t>(8 * s.in), 52));
  auto yb = poisoned_pair(static_cast<size_t>(y_rows * s.in));
  gpu().expert_ffn(args_for(big.bind(), x.gpu(), 8, yb.gpu(), y_rows, s, all_acts()[2]));
  const auto b = get(gpu(), yb.gpu(), yb.g.size());
  auto y1 = poisoned_pair(static_cast<size_t>(s.in));
  int bad = 0;
  for (size_t i = 0; i < big.calls.size(); ++i)
    for (size_t r = 0; r < big.rows[i].size(); ++r) {
      Batch one;
      one.add(ex[i], {big.rows[i][r]}, {0});
      gpu().expert_ffn(args_for(one.bind(), x.gpu(), 8, y1.gpu(), 1, s, all_acts()[2]));
      const auto a = get(gpu(), y1.gpu(), static_cast<size_t>(s.in));
      if (first_bit_diff(a.data(), b.data() + big.dst[i][r] * s.in, s.in) >= 0) ++bad;
    }
  std::printf("[gpu-op] expert_ffn row alone vs in a 16-expert batch: %d rows differ\n", bad);
  EXPECT_EQ(bad, 0);
}

TEST_F(Ops, MoeCombineIsBitIdenticalToCpu) {
  // n*k <= 512 takes the weights as kernel parameters, above that from device memory.
  for (const auto& [n, k, dim] : {std::tuple{int64_t{1}, int64_t{16}, int64_t{3584}},
                                  std::tuple{int64_t{16}, int64_t{16}, int64_t{3584}},
                                  std::tuple{int64_t{100}, int64_t{8}, int64_t{96}}}) {
    auto y = both(random_floats(static_cast<size_t>(n * k * dim), 60, -3.0f, 3.0f));
    auto w = random_floats(static_cast<size_t>(n * k), 61, 0.0f, 2.5f);
    w[0] = 0.0f;
    auto acc = poisoned_pair(static_cast<size_t>(n * dim)), seq = poisoned_pair(static_cast<size_t>(n * dim));
    cpu().moe_combine(y.cpu(), w.data(), n, k, dim, acc.cpu());
    gpu().moe_combine(y.gpu(), w.data(), n, k, dim, acc.gpu());
    axpy_sequence(gpu(), y.gpu(), w.data(), n, k, dim, seq.gpu());
    auto [c, g] = results(acc);
    const std::string what = "moe_combine n=" + std::to_string(n) + " k=" + std::to_string(k);
    EXPECT_TRUE(bits_equal(what.c_str(), c, g));
    EXPECT_TRUE(bits_equal((what + " vs cuda axpy").c_str(), get(gpu(), seq.gpu(), seq.g.size()), g));
  }
}

// Host-side time per K3 decode batch (16 experts, 1 row each, 3072x3584 MXFP4), per-expert sequence vs
// expert_ffn, synchronised after each batch: launch overhead plus kernel time, as the decode loop sees it.
TEST_F(Ops, MoeBenchDecodeBatch) {
  const Shape s{WType::mxfp4, 3584, 3072};
  RandomExperts ex(gpu(), s.t, 16, s.in, s.inter, 70);
  Batch b = random_batch(ex, 0, std::vector<int64_t>(16, 1), 1, 71);
  auto x = both(random_floats(static_cast<size_t>(s.in), 72));
  Buf y(gpu(), static_cast<size_t>(16 * s.in));
  const auto a = args_for(b.bind(), x.gpu(), 1, y, 16, s, all_acts()[2]);
  auto time = [&](const auto& f) {
    for (int i = 0; i < 5; ++i) f();
    gpu().synchronize();
    constexpr int kReps = 200;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) {
      f();
      gpu().synchronize();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kReps;
  };
  const double seq = time([&] { per_expert_sequence(gpu(), a); });
  const double fused = time([&] { gpu().expert_ffn(a); });
  const double floor_s = 16.0 * 3 * static_cast<double>(ex[0].gate.nbytes()) / 4.8e12;
  std::printf("[bench] K3 decode batch (16 experts 3072x3584 mxfp4, 1 row): per-expert %.1f us, expert_ffn %.1f us "
              "(x%.1f), HBM floor %.1f us\n", seq * 1e6, fused * 1e6, seq / fused, floor_s * 1e6);
}

#if FERRY_WITH_CUDA
// Device time per expert_ffn call: events around 50 back-to-back calls (no host sync between them),
// the median of 5 such runs.
double device_time_per_call(Backend& be, const ExpertFfnArgs& a) {
  auto& cb = static_cast<cuda::CudaBackend&>(be);
  for (int i = 0; i < 5; ++i) be.expert_ffn(a);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> t;
  constexpr int kCalls = 50;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(e0, cb.stream());
    for (int i = 0; i < kCalls; ++i) be.expert_ffn(a);
    cudaEventRecord(e1, cb.stream());
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    t.push_back(ms * 1e-3 / kCalls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
#endif

// Device time of a batch of 16 K3 experts (3072x3584 MXFP4, 17.5 MB each) with m = 1, 2, 4, 16 rows
// each: the expert weights are read once per batch, so bytes / time is the kernel's weight bandwidth.
// The defaults first, then swept over the fast path's speed knobs (stage depth, spread); results
// never change.
TEST_F(Ops, MoeBenchExpertBatchBandwidth) {
#if FERRY_WITH_CUDA
  const Shape s{WType::mxfp4, 3584, 3072};
  RandomExperts ex(gpu(), s.t, 16, s.in, s.inter, 80);
  const double bytes = 16.0 * 3 * static_cast<double>(ex[0].gate.nbytes());
  for (const int64_t m : {1, 2, 4, 16}) {
    Batch b = random_batch(ex, 0, std::vector<int64_t>(16, m), m, 81);
    auto x = both(random_floats(static_cast<size_t>(m * s.in), 82));
    Buf y(gpu(), static_cast<size_t>(16 * m * s.in));
    const auto a = args_for(b.bind(), x.gpu(), m, y, 16 * m, s, all_acts()[2]);
    for (const auto& [depth, spread] : {std::pair{0, 0}, std::pair{1, 1}, std::pair{1, 2}, std::pair{2, 1},
                                         std::pair{2, 2}}) {
      cuda::matmul_fast_tune(spread, depth);
      const double t = device_time_per_call(gpu(), a);
      std::printf("[bench] expert batch 16 x 3072x3584 mxfp4, m=%2lld rows each, depth=%d spread=%d: %7.1f us  "
                  "%5.0f GB/s  (floor at 4.8 TB/s %.1f us)\n",
                  static_cast<long long>(m), depth, spread, t * 1e6, bytes / t / 1e9, bytes / 4.8e12 * 1e6);
    }
    cuda::matmul_fast_tune(0, 0);
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The same batches on resident experts in mxfp4 tiles (kernels/cuda/matmul_mxt.cuh) against the row
// layout, one call: same bits (Ops.MxTilesExpertsGiveTheBitsOfTheRowLayout), so only the time differs.
TEST_F(Ops, MoeBenchExpertBatchMxTiles) {
#if FERRY_WITH_CUDA
  const Shape s{WType::mxfp4, 3584, 3072};
  RandomExperts rows(gpu(), s.t, 16, s.in, s.inter, 80), tiles(gpu(), s.t, 16, s.in, s.inter, 80);
  tiles.prepare_resident();
  const double bytes = 16.0 * 3 * static_cast<double>(rows[0].gate.nbytes());
  for (const int64_t m : {1, 2, 4, 8, 16}) {
    Batch br = random_batch(rows, 0, std::vector<int64_t>(16, m), m, 81);
    Batch bt = random_batch(tiles, 0, std::vector<int64_t>(16, m), m, 81);
    auto x = both(random_floats(static_cast<size_t>(m * s.in), 82));
    Buf y(gpu(), static_cast<size_t>(16 * m * s.in));
    const double tr = device_time_per_call(gpu(), args_for(br.bind(), x.gpu(), m, y, 16 * m, s, all_acts()[2]));
    // Set sizes, and the down projections' x in shared memory (matmul_mxt_xsmem_tune), at one row.
    for (const auto& [units, xsmem] : {std::pair{0, 0}, {2, 0}, {8, 0}, {14, 0}, {0, 1}, {8, 1}}) {
      if ((units != 0 || xsmem != 0) && m != 1) continue;
      cuda::matmul_mxt_set_tune(units);
      cuda::matmul_mxt_xsmem_tune(xsmem);
      const double tt = device_time_per_call(gpu(), args_for(bt.bind(), x.gpu(), m, y, 16 * m, s, all_acts()[2]));
      std::printf("[bench] expert batch 16 x 3072x3584 mxfp4, m=%2lld rows each: rows %7.1f us %5.0f GB/s, mxfp4 "
                  "tiles (set %d, x in shared memory %d) %7.1f us %5.0f GB/s (x%.2f)\n",
                  static_cast<long long>(m), tr * 1e6, bytes / tr / 1e9, units, xsmem, tt * 1e6, bytes / tt / 1e9,
                  tr / tt);
    }
    cuda::matmul_mxt_set_tune(0);
    cuda::matmul_mxt_xsmem_tune(-1);
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// A prompt pass's routed experts at the K3.1 slice's shape (1,024 tokens x 16 experts over 896 experts of
// 3072x3584 mxfp4 tiles, 18 rows each; 32 distinct weight sets cycled, 560 MB, so the weights come from
// HBM), device time per expert_ffn with a wave of tables per launch and with a launch per table
// (moe_wave_tune), and with 256-row expert tiles (FERRY_MMA_GROUP_MW is read once per process: run with it
// set for that arm). TFLOP/s of the experts' own FLOPs (the tensor cores do twice that: hi and lo).
TEST_F(Ops, MoeBenchPromptPassExpertWave) {
#if FERRY_WITH_CUDA
  const Shape s{WType::mxfp4, 3584, 3072};
  constexpr int kDistinct = 32, kExperts = 896;
  constexpr int64_t kTokens = 1024, kRows = 18;
  RandomExperts ex(gpu(), s.t, kDistinct, s.in, s.inter, 90);
  ex.prepare_resident();
  std::mt19937 rng(91);
  std::vector<int32_t> tokens(kTokens);
  std::iota(tokens.begin(), tokens.end(), 0);
  Batch b;
  int32_t slot = 0;
  for (int e = 0; e < kExperts; ++e) {
    std::shuffle(tokens.begin(), tokens.end(), rng);
    std::vector<int32_t> r(tokens.begin(), tokens.begin() + kRows), d(kRows);
    std::iota(d.begin(), d.end(), slot);
    slot += static_cast<int32_t>(kRows);
    b.add(ex[static_cast<size_t>(e % kDistinct)], std::move(r), std::move(d));
  }
  auto x = both(random_floats(static_cast<size_t>(kTokens * s.in), 92));
  Buf y(gpu(), static_cast<size_t>(slot) * static_cast<size_t>(s.in));
  const auto a = args_for(b.bind(), x.gpu(), kTokens, y, slot, s, all_acts()[1]);
  const double flop = 2.0 * 3 * static_cast<double>(s.in) * static_cast<double>(s.inter) * slot;
  auto& cb = static_cast<cuda::CudaBackend&>(gpu());
  gpu().set_prompt_pass(true);
  // wave 2: a wave per launch on wgmma (moe_wave_wgmma_tune; an H100 / H200 only).
  for (const int wave : {1, 0, 2, 1, 0, 2}) {
    cuda::moe_wave_tune(wave ? 1 : 0);
    cuda::moe_wave_wgmma_tune(wave == 2 ? 1 : 0);
    for (int i = 0; i < 2; ++i) gpu().expert_ffn(a);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> t;
    for (int rep = 0; rep < 3; ++rep) {
      cudaEventRecord(e0, cb.stream());
      for (int i = 0; i < 3; ++i) gpu().expert_ffn(a);
      cudaEventRecord(e1, cb.stream());
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      t.push_back(ms * 1e-3 / 3);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(t.begin(), t.end());
    std::printf("[bench] prompt pass experts (%d x 18 rows, 3072x3584 mxfp4 tiles), %s: %8.2f ms %6.1f TFLOP/s\n",
                kExperts, wave == 2 ? "a wave per launch on wgmma" : wave ? "a wave per launch" : "a launch per table",
                t[1] * 1e3, flop / t[1] / 1e12);
  }
  cuda::moe_wave_tune(-1);
  cuda::moe_wave_wgmma_tune(-1);
  gpu().set_prompt_pass(false);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The router's selection on the device (cuda::device_route: route.cu, a warp per row) gives route_rows's ids and
// weights to the bit: K3's rule (896 experts, top 16), DeepSeek-V3's groups (256 in 8, 4 kept, top 8), a rule with
// every expert picked, for 1, 2, 16 and 1,024 rows, with sigmoid scores, quarter-step scores (ties everywhere) and
// a bias; with the switch off the back-end declines and queues nothing, and by default it selects calls of
// kDeviceRouteMinRows rows or more.
TEST_F(Ops, RouterSelectionOnTheDeviceGivesTheHostsIdsAndWeightBits) {
#if FERRY_WITH_CUDA
  std::mt19937 rng(16);
  struct Case { int64_t e, k, ng, tg; bool renorm; double scale; };
  for (const Case rc : {Case{896, 16, 1, 1, true, 2.827}, Case{256, 8, 8, 4, true, 2.5}, Case{40, 40, 1, 1, true, 1.0},
                        Case{64, 6, 1, 1, false, 1.0}})
    for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{16}, int64_t{1024}})
      for (const bool ties : {false, true}) {
        RouteRule rule;
        rule.e = rc.e, rule.k = rc.k, rule.n_group = rc.ng, rule.topk_group = rc.tg, rule.renormalize = rc.renorm;
        rule.routed_scale = rc.scale;
        std::vector<float> s(static_cast<size_t>(n * rc.e)), bias(static_cast<size_t>(rc.e));
        for (float& v : s) {
          const float u = static_cast<float>(rng() % 10000) / 10000.0f;
          v = ties ? std::round(u * 4) / 4 : 1.0f / (1.0f + std::exp(-8 * (u - 0.5f)));
        }
        for (float& b : bias) b = ties ? 0.0f : static_cast<float>(rng() % 100) / 1000.0f - 0.05f;
        auto sg = both(s), bg = both(bias);
        const size_t nk = static_cast<size_t>(n * rc.k);
        std::vector<int32_t> want_ids(nk);
        std::vector<float> want_w(nk);
        route_rows(s.data(), bias.data(), rule, 0, n, want_ids.data(), want_w.data());
        std::vector<uint32_t> picked(2 * nk, 0xFFFFFFFFu);
        cuda::device_route_tune(0);
        EXPECT_FALSE(gpu().route_select_start(sg.gpu(), bg.gpu(), rule, n, picked.data()));
        cuda::device_route_tune(2);  // the default: prompt passes' calls only
        const bool by_rows = gpu().route_select_start(sg.gpu(), bg.gpu(), rule, n, picked.data());
        EXPECT_EQ(n >= cuda::kDeviceRouteMinRows, by_rows) << "rows " << n;
        gpu().download_wait();
        cuda::device_route_tune(1);
        ASSERT_TRUE(gpu().route_select_start(sg.gpu(), bg.gpu(), rule, n, picked.data()));
        gpu().download_wait();
        std::vector<int32_t> ids(nk);
        std::vector<float> w(nk);
        std::memcpy(ids.data(), picked.data(), nk * sizeof(int32_t));
        std::memcpy(w.data(), picked.data() + nk, nk * sizeof(float));
        EXPECT_EQ(ids, want_ids) << "e " << rc.e << " k " << rc.k << " groups " << rc.ng << " rows " << n << " ties " << ties;
        EXPECT_EQ(0, std::memcmp(w.data(), want_w.data(), nk * sizeof(float)))
            << "weights' bits: e " << rc.e << " k " << rc.k << " rows " << n << " ties " << ties;
      }
  cuda::device_route_tune(-1);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

}  // namespace
}  // namespace ferry::test
