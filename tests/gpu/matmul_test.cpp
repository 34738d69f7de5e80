// CUDA matmul and embed against the CPU back-end, the exactness rule on the GPU (a row alone = the same
// row in a block of 3, 7 or 16), and the weight-bandwidth benchmark (MatmulBench: achieved GB/s
// against the HBM floor).
//
// Tolerance: the CUDA fast path (q8_0/mxfp4 with cols % 512 == 0, kernels/cuda/matmul.cuh) sums in
// its own fixed order (per-lane 16-weight FMA chains, block scale applied once per chain, a lane
// butterfly), not the CPU's, so it agrees to rounding only: max|d| / max|cpu| <= 1e-5 (float32 sums
// of a few thousand terms differ by ~1e-7 relative). The generic path (f32 weights, other shapes)
// keeps the CPU order and stays bit-identical to it. Block-vs-single stays bitwise on both paths.
#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>

#include "io/errors.hpp"
#include "tests/gpu/gpu_util.hpp"
#if FERRY_WITH_CUDA
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"
#include "kernels/cuda/mma_rate_probe.cuh"
#include "kernels/cuda/sm90a/wgmma_probe.cuh"
#endif

namespace ferry::test {
namespace {

using Ops = GpuOps;

// Random weight bytes of a type: f32 values, q8_0 or mxfp4 blocks.
std::vector<uint8_t> random_weight(WType t, int64_t rows, int64_t cols, uint32_t seed) {
  const Weight w{t, rows, cols, nullptr};
  std::vector<uint8_t> b(w.nbytes());
  const size_t nb = static_cast<size_t>(rows * cols / kQK);
  if (t == WType::f32) {
    const auto f = random_floats(static_cast<size_t>(rows * cols), seed);
    std::memcpy(b.data(), f.data(), b.size());
  } else if (t == WType::q8_0) {
    const auto q = random_q8_0(nb, seed);
    std::memcpy(b.data(), q.data(), b.size());
  } else {
    const auto q = random_mxfp4(nb, seed);
    std::memcpy(b.data(), q.data(), b.size());
  }
  return b;
}

const char* tname(WType t) { return t == WType::f32 ? "f32" : t == WType::q8_0 ? "q8_0" : "mxfp4"; }

// Whether the CUDA back-end runs this matmul (outside a prompt pass) in its own order: on the tensor
// cores (matmul_dec.cuh) or on the CUDA-core fast path. Tolerance, not bits.
bool fast_path(const Weight& w, const float* x) {
#if FERRY_WITH_CUDA
  return cuda::matmul_dec_supported(w) || cuda::matmul_fast_supported(w, x);
#else
  (void)w, (void)x;
  return false;
#endif
}

constexpr double kFastPathTol = 1e-5;  // see the file comment

// Fast path: within kFastPathTol of the CPU; generic path: bit-identical to it.
bool matches_cpu(const std::string& what, bool fast, const std::vector<float>& c, const std::vector<float>& g) {
  if (!fast) return bits_equal(what.c_str(), c, g);
  return rel_err((what + " (fast)").c_str(), c, g) <= kFastPathTol;
}

TEST_F(Ops, MatmulMatchesCpuForEveryTypeAndRowCount) {
  struct Shape { WType t; int64_t rows, cols; };
  for (const Shape s : {Shape{WType::f32, 67, 96}, Shape{WType::f32, 33, 100}, Shape{WType::f32, 129, 2200},
                        Shape{WType::f32, 896, 7168}, Shape{WType::f32, 40, 1056},  // the routers; a short chunk
                        Shape{WType::q8_0, 67, 2304}, Shape{WType::q8_0, 5, 7168}, Shape{WType::q8_0, 45, 1536},
                        Shape{WType::mxfp4, 67, 3584}, Shape{WType::mxfp4, 130, 4160},
                        Shape{WType::mxfp4, 33, 1024}}) {
    const auto bytes = random_weight(s.t, s.rows, s.cols, 1);
    auto wb = both_bytes(bytes.data(), bytes.size());
    for (int64_t n : {1, 2, 3, 8, 16, 37}) {
      auto x = both(random_floats(static_cast<size_t>(n * s.cols), 2 + static_cast<uint32_t>(n)));
      auto y = poisoned_pair(static_cast<size_t>(n * s.rows));
      const Weight wg{s.t, s.rows, s.cols, wb->g};
      cpu().matmul(Weight{s.t, s.rows, s.cols, wb->c}, x.cpu(), n, y.cpu());
      gpu().matmul(wg, x.gpu(), n, y.gpu());
      auto [c, g] = results(y);
      const std::string what = std::string("matmul ") + tname(s.t) + " " + std::to_string(s.rows) + "x" +
                               std::to_string(s.cols) + " n=" + std::to_string(n);
      EXPECT_TRUE(matches_cpu(what, fast_path(wg, x.gpu()), c, g)) << what;
    }
  }
}

// The f32 tile kernel (matmul_f32_tile_kernel: many rows, a prompt pass's routers) keeps the generic
// kernel's order, so the CPU's bits: a router at 1,024 rows, tiles partial in outputs and rows (40x1056 at
// 37 rows: 33 column blocks, a partial last stage; 67x96 at 70; 33x288 at 100), and per head (8 heads of
// 512x128 at 40 rows, x slices with a gap inside wider rows); pipelined (2: the next stage's copies in flight),
// plain (1) and off (0: the generic kernel runs; the same check).
TEST_F(Ops, F32TileKernelKeepsTheCpuBitsPlainAndPerHead) {
#if FERRY_WITH_CUDA
  struct Shape {
    int64_t rows, cols, n;
  };
  for (const int on : {2, 1, 0}) {
    cuda::matmul_f32_tile_tune(on);
    for (const Shape sh : {Shape{896, 7168, 1024}, Shape{40, 1056, 37}, Shape{67, 96, 70}, Shape{33, 288, 100}}) {
      const auto bytes = random_weight(WType::f32, sh.rows, sh.cols, 41);
      auto wb = both_bytes(bytes.data(), bytes.size());
      auto x = both(random_floats(static_cast<size_t>(sh.n * sh.cols), 42));
      auto y = poisoned_pair(static_cast<size_t>(sh.n * sh.rows));
      cpu().matmul(Weight{WType::f32, sh.rows, sh.cols, wb->c}, x.cpu(), sh.n, y.cpu());
      gpu().matmul(Weight{WType::f32, sh.rows, sh.cols, wb->g}, x.gpu(), sh.n, y.gpu());
      const auto [c, g] = results(y);
      const std::string what = "tile=" + std::to_string(on) + " f32 " + std::to_string(sh.rows) + "x" +
                               std::to_string(sh.cols) + " n=" + std::to_string(sh.n);
      EXPECT_TRUE(bits_equal(what.c_str(), c, g)) << what;
    }
    const int64_t heads = 8, rows = 512, cols = 128, x_head = cols + 64, n = 40;
    const auto bytes = random_weight(WType::f32, heads * rows, cols, 43);
    auto wb = both_bytes(bytes.data(), bytes.size());
    HeadsLayout l{heads, rows, heads * x_head, x_head, heads * rows, rows};
    auto x = both(random_floats(static_cast<size_t>(n * l.x_tok), 44));
    auto y = poisoned_pair(static_cast<size_t>(n * l.y_tok));
    cpu().matmul_heads(Weight{WType::f32, rows, cols, wb->c}, l, x.cpu(), n, y.cpu());
    gpu().matmul_heads(Weight{WType::f32, rows, cols, wb->g}, l, x.gpu(), n, y.gpu());
    const auto [c, g] = results(y);
    EXPECT_TRUE(bits_equal(("tile=" + std::to_string(on) + " heads n=40").c_str(), c, g));
  }
  cuda::matmul_f32_tile_tune(-1);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The one-row f32 kernels (matmul_f32_row1_kernel: routers and MLA's per-head matrices at one row; and
// matmul_f32_short_kernel, several rows per warp, for rows of up to 256 columns) keep the generic kernel's
// order, so the CPU's bits, for rows in whole batches of 32 blocks (896x7168: 7), with a partial last batch
// (40x1056: 33 blocks), rows of 1 to 8 blocks with the last warp's rows partial (67x96, 1000x256, 5x32,
// 33x64), plain and per head (512x128); with the kernels off the generic kernel runs (the same check). on = 2:
// the one-row kernel with its rows bulk-copied into shared memory (matmul_f32_row_bulk_tune), the same bits.
TEST_F(Ops, F32OneRowKernelKeepsTheCpuBitsPlainAndPerHead) {
#if FERRY_WITH_CUDA
  for (const int on : {2, 1, 0}) {
    cuda::matmul_f32_row1_tune(on > 0 ? 1 : 0);
    cuda::matmul_f32_row_bulk_tune(on == 2 ? 1 : 0);
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{896, 7168}, {40, 1056}, {67, 96}, {7, 4096}, {1000, 256},
                                     {5, 32}, {33, 64}, {9, 8192}, {3, 8224}, {11, 288}}) {
      const auto bytes = random_weight(WType::f32, rows, cols, 21);
      auto wb = both_bytes(bytes.data(), bytes.size());
      auto x = both(random_floats(static_cast<size_t>(cols), 22));
      auto y = poisoned_pair(static_cast<size_t>(rows));
      cpu().matmul(Weight{WType::f32, rows, cols, wb->c}, x.cpu(), 1, y.cpu());
      gpu().matmul(Weight{WType::f32, rows, cols, wb->g}, x.gpu(), 1, y.gpu());
      const auto [c, g] = results(y);
      const std::string what = "row1=" + std::to_string(on) + " f32 " + std::to_string(rows) + "x" + std::to_string(cols);
      EXPECT_TRUE(bits_equal(what.c_str(), c, g)) << what;
    }
    // 64 heads of 512x128 (MLA's W_uk^T), x slices with a gap inside wider rows.
    const int64_t heads = 64, rows = 512, cols = 128, x_head = cols + 64;
    const auto bytes = random_weight(WType::f32, heads * rows, cols, 23);
    auto wb = both_bytes(bytes.data(), bytes.size());
    HeadsLayout l{heads, rows, heads * x_head, x_head, heads * rows, rows};
    auto x = both(random_floats(static_cast<size_t>(l.x_tok), 24));
    auto y = poisoned_pair(static_cast<size_t>(l.y_tok));
    cpu().matmul_heads(Weight{WType::f32, rows, cols, wb->c}, l, x.cpu(), 1, y.cpu());
    gpu().matmul_heads(Weight{WType::f32, rows, cols, wb->g}, l, x.gpu(), 1, y.gpu());
    const auto [c, g] = results(y);
    EXPECT_TRUE(bits_equal(("row1=" + std::to_string(on) + " heads").c_str(), c, g));
  }
  cuda::matmul_f32_row1_tune(-1);
  cuda::matmul_f32_row_bulk_tune(-1);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// ---- prompt passes on the tensor cores (kernels/cuda/matmul_mma.cuh) ----------------------------------
// Inside a prompt pass q8_0 / mxfp4 matmuls run as fp16 mma with exact weights and x as hi (+ lo at two
// levels) halves of a per-row power-of-two scaling: within mma_tol(levels) of the CPU, and a row's bits independent of the
// pass's row count and of where the row sits in it.
constexpr double kMmaTol = 1e-5;
// With x as hi only (11 of its 24 bits: matmul_mma_levels_tune(1), FERRY_MMA_LEVELS=1, --prompt-x-bits 11) each
// product is off by at most 2^-12 of itself; over these random rows the largest error measured 2.2e-4 of the
// largest output (H100, 2026-12-07).
constexpr double kMmaTol1 = 1e-3;
// With x's lo as E4M3 for mxfp4 weights (levels 3: matmul_mma_levels_tune(3), FERRY_MMA_LEVELS=3; lo8_bits.cuh) x
// keeps ~15 bits: each product within ~2^-16 of itself, a sixteenth of one level's error. q8_0 weights keep both
// fp16 levels there.
constexpr double kMmaTol3 = 1e-4;
inline double mma_tol(int levels, WType t) {
  if (levels == 1) return kMmaTol1;
  return levels == 3 && t == WType::mxfp4 ? kMmaTol3 : kMmaTol;
}
#if FERRY_WITH_CUDA
// The tolerance of a prompt pass's matmul of a weight of type t at the levels in force (the default, or
// FERRY_MMA_LEVELS).
inline double prompt_tol(WType t) { return mma_tol(cuda::mma_levels(), t); }
#endif

// Backend::set_prompt_pass(true) for a scope.
struct PromptPass {
  Backend& be;
  explicit PromptPass(Backend& b) : be(b) { be.set_prompt_pass(true); }
  ~PromptPass() { be.set_prompt_pass(false); }
};

bool mma_path(const Weight& w) {
#if FERRY_WITH_CUDA
  return cuda::matmul_mma_supported(w);
#else
  (void)w;
  return false;
#endif
}

TEST_F(Ops, PromptPassMatmulOnTensorCoresMatchesCpuForEveryRowCount) {
  struct Shape { WType t; int64_t rows, cols; std::vector<int64_t> ns; };
  for (const Shape& s : {Shape{WType::q8_0, 300, 1152, {1, 2, 16, 37, 1024}}, Shape{WType::q8_0, 136, 7168, {1, 16, 65}},
                         Shape{WType::mxfp4, 200, 3072, {1, 2, 16, 37, 1024}}, Shape{WType::mxfp4, 64, 128, {3, 70}}}) {
    const auto bytes = random_weight(s.t, s.rows, s.cols, 5);
    auto wb = both_bytes(bytes.data(), bytes.size());
    const Weight wg{s.t, s.rows, s.cols, wb->g};
    EXPECT_TRUE(mma_path(wg)) << tname(s.t) << " " << s.rows << "x" << s.cols;
    for (const int lv : {2, 1, 3})
      for (int64_t n : s.ns) {
        auto x = both(random_floats(static_cast<size_t>(n * s.cols), 6 + static_cast<uint32_t>(n)));
        auto y = poisoned_pair(static_cast<size_t>(n * s.rows));
        cpu().matmul(Weight{s.t, s.rows, s.cols, wb->c}, x.cpu(), n, y.cpu());
        {
          PromptPass on(gpu());
          cuda::matmul_mma_levels_tune(lv);
          gpu().matmul(wg, x.gpu(), n, y.gpu());
          cuda::matmul_mma_levels_tune(-1);
        }
        auto [c, g] = results(y);
        const std::string what = std::string("mma ") + tname(s.t) + " " + std::to_string(s.rows) + "x" +
                                 std::to_string(s.cols) + " n=" + std::to_string(n) + " L=" + std::to_string(lv);
        EXPECT_LE(rel_err(what.c_str(), c, g), mma_tol(lv, s.t)) << what;
      }
  }
}

TEST_F(Ops, PromptPassMatmulRowHasTheSameBitsAloneAndAnywhereInAPassOf1024Rows) {
  const int64_t n = 1024;
  for (const auto& [t, rows, cols] : {std::tuple{WType::q8_0, int64_t{257}, int64_t{1536}},
                                      std::tuple{WType::mxfp4, int64_t{384}, int64_t{1024}}}) {
    const auto bytes = random_weight(t, rows, cols, 7);
    auto wb = both_bytes(bytes.data(), bytes.size());
    const Weight w{t, rows, cols, wb->g};
    auto x = both(random_floats(static_cast<size_t>(n * cols), 8));
    PromptPass on(gpu());
    // The default levels, and x's lo as E4M3 for mxfp4 (3; q8_0 keeps two fp16 levels there).
    for (const int lv : {-1, 3}) {
      cuda::matmul_mma_levels_tune(lv);
      auto all = poisoned_pair(static_cast<size_t>(n * rows));
      gpu().matmul(w, x.gpu(), n, all.gpu());
      const auto a = get(gpu(), all.gpu(), all.g.size());
      for (const auto& [r0, m] : {std::pair{0, 1}, std::pair{511, 1}, std::pair{64, 64}, std::pair{1000, 24},
                                  std::pair{333, 37}, std::pair{7, 100}}) {
        auto part = poisoned_pair(static_cast<size_t>(m * rows));
        gpu().matmul(w, x.gpu() + r0 * cols, m, part.gpu());
        const auto p = get(gpu(), part.gpu(), part.g.size());
        const int64_t d = first_bit_diff(p.data(), a.data() + r0 * rows, m * rows);
        std::printf("[gpu-op] mma %s L=%d rows %d..%d alone vs in 1024: %s\n", tname(t), lv, r0, r0 + m - 1,
                    d < 0 ? "bit-identical" : "DIFFERENT");
        EXPECT_LT(d, 0) << tname(t) << " L=" << lv << " rows " << r0 << " + " << m;
      }
      cuda::matmul_mma_levels_tune(-1);
    }
  }
}

// Rows of zeros, of tiny and of huge values (the per-row scaling keeps each in fp16's range), and
// mxfp4 exponents from the bottom of E8M0 (2^-127, a subnormal scale) to the top of real checkpoints'
// range: each row within kMmaTol of the CPU's row. A prompt pass's kernel keeps y * 2^k in its
// accumulator, so huge exponents against tiny rows can overflow it (matmul_mma.cuh); the decode kernel
// undoes the scaling per block and also takes exponents up to 252 against rows of 2^-100.
template <class Both, class BothBytes>
void check_row_scaling(Backend& cpu, Backend& gpu, bool prompt, Both both, BothBytes both_bytes) {
  const int64_t rows = 130, cols = 1024, n = 6;
  const float row_scale[n] = {0.0f, 1.0f, 0x1p-20f, 0x1p20f, 1e-3f, 3e4f};
  // x scaled with the exponents so that the products stay normal floats on the CPU.
  std::vector<std::tuple<int, int, float>> ranges{{0, 3, 0x1p100f}, {2, 16, 0x1p100f}, {118, 130, 1.0f},
                                                  {140, 150, 0x1p-20f}};
  if (!prompt) ranges.emplace_back(236, 252, 0x1p-100f);
  for (const auto& [e_lo, e_hi, xfac] : ranges) {
    const auto q = random_mxfp4(static_cast<size_t>(rows * cols / kQK), 13, e_lo, e_hi);
    auto wb = both_bytes(q.data(), q.size() * sizeof(q[0]));
    auto xv = random_floats(static_cast<size_t>(n * cols), 14);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < cols; ++c) xv[static_cast<size_t>(r * cols + c)] *= row_scale[r] * xfac;
    auto x = both(xv);
    auto y = both(poisoned(static_cast<size_t>(n * rows)));
    const Weight wg{WType::mxfp4, rows, cols, wb->g};
    cpu.matmul(Weight{WType::mxfp4, rows, cols, wb->c}, x.cpu(), n, y.cpu());
    gpu.set_prompt_pass(prompt);
    gpu.matmul(wg, x.gpu(), n, y.gpu());
    gpu.set_prompt_pass(false);
    std::vector<float> c(y.c.size()), g(y.g.size());
    cpu.download(c.data(), y.cpu(), c.size() * 4);
    gpu.download(g.data(), y.gpu(), g.size() * 4);
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<float> cr(c.begin() + r * rows, c.begin() + (r + 1) * rows);
      const std::vector<float> gr(g.begin() + r * rows, g.begin() + (r + 1) * rows);
      const std::string what = std::string(prompt ? "mma" : "dec") + " e [" + std::to_string(e_lo) + "," +
                               std::to_string(e_hi) + "] row x" + std::to_string(row_scale[r]);
      EXPECT_LE(rel_err(what.c_str(), cr, gr), prompt_tol(WType::mxfp4)) << what;
    }
  }
}

TEST_F(Ops, PromptPassMatmulScalesEachRowIntoRange) {
  check_row_scaling(cpu(), gpu(), true, [](const std::vector<float>& v) { return both(v); },
                    [](const void* p, size_t n) { return both_bytes(p, n); });
}

// ---- decode steps and verify blocks on the tensor cores (kernels/cuda/matmul_dec.cuh) ------------------
// Outside prompt passes q8_0 / mxfp4 matmuls with cols % 128 == 0 run as fp16 mma with the prompt pass's
// exact arithmetic but their own order: within kMmaTol of the CPU, and a row's bits the same alone, in
// a verify block of up to 16 rows, and in larger calls (groups of 16).

bool dec_path(const Weight& w) {
#if FERRY_WITH_CUDA
  return cuda::matmul_dec_supported(w);
#else
  (void)w;
  return false;
#endif
}

TEST_F(Ops, DecodeMatmulOnTensorCoresMatchesCpuForEveryRowCount) {
  DecodeOnTensorCores on;
  struct Shape { WType t; int64_t rows, cols; };
  // cols % 512 (512-column stages for up to 4 rows) and cols % 128 only; rows not a multiple of 16.
  for (const Shape& s : {Shape{WType::q8_0, 300, 1152}, Shape{WType::q8_0, 136, 7168}, Shape{WType::q8_0, 37, 512},
                         Shape{WType::mxfp4, 200, 3072}, Shape{WType::mxfp4, 64, 128}, Shape{WType::mxfp4, 48, 1664}}) {
    const auto bytes = random_weight(s.t, s.rows, s.cols, 15);
    auto wb = both_bytes(bytes.data(), bytes.size());
    const Weight wg{s.t, s.rows, s.cols, wb->g};
    EXPECT_TRUE(dec_path(wg)) << tname(s.t) << " " << s.rows << "x" << s.cols;
    std::vector<int64_t> ns{1, 2, 3, 4, 5, 8, 9, 16, 17, 40};
    if (s.rows == 300) ns.push_back(1024);  // 64 groups of 16 (a long verify call, not a prompt pass)
    for (int64_t n : ns) {
      auto x = both(random_floats(static_cast<size_t>(n * s.cols), 16 + static_cast<uint32_t>(n)));
      auto y = poisoned_pair(static_cast<size_t>(n * s.rows));
      cpu().matmul(Weight{s.t, s.rows, s.cols, wb->c}, x.cpu(), n, y.cpu());
      gpu().matmul(wg, x.gpu(), n, y.gpu());
      auto [c, g] = results(y);
      const std::string what = std::string("dec ") + tname(s.t) + " " + std::to_string(s.rows) + "x" +
                               std::to_string(s.cols) + " n=" + std::to_string(n);
      EXPECT_LE(rel_err(what.c_str(), c, g), prompt_tol(s.t)) << what;
    }
  }
}

// The stage width (512 columns for up to 4 rows, 128 above) and the rows per weight read (1, 4, 8, 16)
// change with the row count: neither may change a row's bits.
TEST_F(Ops, DecodeMatmulRowHasTheSameBitsAloneAndInEveryBlockUpTo16AndBeyond) {
  DecodeOnTensorCores on;
  const int64_t n = 40;
  for (const auto& [t, rows, cols] : {std::tuple{WType::q8_0, int64_t{257}, int64_t{1536}},
                                      std::tuple{WType::q8_0, int64_t{96}, int64_t{1152}},
                                      std::tuple{WType::mxfp4, int64_t{384}, int64_t{1024}}}) {
    const auto bytes = random_weight(t, rows, cols, 17);
    auto wb = both_bytes(bytes.data(), bytes.size());
    const Weight w{t, rows, cols, wb->g};
    auto x = both(random_floats(static_cast<size_t>(n * cols), 18));
    auto all = poisoned_pair(static_cast<size_t>(n * rows));
    gpu().matmul(w, x.gpu(), n, all.gpu());
    const auto a = get(gpu(), all.gpu(), all.g.size());
    for (const auto& [r0, m] : {std::pair{0, 1}, std::pair{5, 1}, std::pair{39, 1}, std::pair{0, 2}, std::pair{3, 4},
                                std::pair{7, 5}, std::pair{9, 8}, std::pair{11, 9}, std::pair{0, 16}, std::pair{20, 16},
                                std::pair{2, 17}}) {
      auto part = poisoned_pair(static_cast<size_t>(m * rows));
      gpu().matmul(w, x.gpu() + r0 * cols, m, part.gpu());
      const auto p = get(gpu(), part.gpu(), part.g.size());
      const int64_t d = first_bit_diff(p.data(), a.data() + r0 * rows, m * rows);
      std::printf("[gpu-op] dec %s %lldx%lld rows %d..%d alone vs in 40: %s\n", tname(t), static_cast<long long>(rows),
                  static_cast<long long>(cols), r0, r0 + m - 1, d < 0 ? "bit-identical" : "DIFFERENT");
      EXPECT_LT(d, 0) << tname(t) << " rows " << r0 << " + " << m;
    }
  }
}

TEST_F(Ops, DecodeMatmulScalesEachRowIntoRangeAndTakesHugeExponents) {
  DecodeOnTensorCores on;
  check_row_scaling(cpu(), gpu(), false, [](const std::vector<float>& v) { return both(v); },
                    [](const void* p, size_t n) { return both_bytes(p, n); });
}

#if FERRY_WITH_CUDA
// A fixed number of K parts (splitk.cuh) for every q8_0 matmul while it lives.
struct FixedKParts {
  explicit FixedKParts(int parts) { cuda::matmul_ksplit_tune(parts); }
  ~FixedKParts() { cuda::matmul_ksplit_tune(-1); }
};

// The split-K decode matmuls (both kernels, splitk.cuh): the split follows the weight's shape; each part
// count agrees with the CPU; a row alone has the bits of the same row in calls of 2-17 rows; a call
// repeated gives the same bits (the counters are back at zero after each launch).
TEST_F(Ops, SplitKDecodeMatmulMatchesCpuKeepsRowBitsAndRepeatsForEveryPartCount) {
  EXPECT_EQ(cuda::matmul_ksplit(Weight{WType::q8_0, 128, 7168, nullptr}).parts, 7);   // 8 tiles: a part per unit
  EXPECT_EQ(cuda::matmul_ksplit(Weight{WType::q8_0, 576, 7168, nullptr}).parts, 6);   // 36 tiles
  EXPECT_EQ(cuda::matmul_ksplit(Weight{WType::q8_0, 12288, 7168, nullptr}).parts, 1);  // 768 tiles
  EXPECT_EQ(cuda::matmul_ksplit(Weight{WType::q8_0, 7168, 7168, nullptr}).parts, 1);   // 448 tiles, short rows
  EXPECT_EQ(cuda::matmul_ksplit(Weight{WType::q8_0, 7168, 12288, nullptr}).parts, 3);  // long rows
  EXPECT_EQ(cuda::matmul_ksplit(Weight{WType::mxfp4, 128, 7168, nullptr}).parts, 1);   // experts: never
  EXPECT_EQ(cuda::matmul_ksplit(Weight{WType::q8_0, 128, 2560, nullptr}).unit, 512);
  const int64_t n = 17;
  for (const auto mode : {cuda::DecMode::off, cuda::DecMode::all}) {
    const cuda::DecMode old = cuda::matmul_dec_mode(mode);
    const char* kern = mode == cuda::DecMode::off ? "cores" : "tensor";
    for (const auto& [rows, cols] : {std::pair{int64_t{100}, int64_t{7168}}, std::pair{int64_t{40}, int64_t{2560}}}) {
      const auto bytes = random_weight(WType::q8_0, rows, cols, 21);
      auto wb = both_bytes(bytes.data(), bytes.size());
      const Weight wg{WType::q8_0, rows, cols, wb->g};
      auto x = both(random_floats(static_cast<size_t>(n * cols), 22));
      auto y = poisoned_pair(static_cast<size_t>(n * rows));
      cpu().matmul(Weight{WType::q8_0, rows, cols, wb->c}, x.cpu(), n, y.cpu());
      for (const int parts : {1, 2, 3, 7}) {
        FixedKParts fix(parts);
        ASSERT_EQ(cuda::matmul_ksplit(wg).parts, std::min<int64_t>(parts, cols / cuda::matmul_ksplit(wg).unit));
        gpu().matmul(wg, x.gpu(), n, y.gpu());
        auto [c, g] = results(y);
        const std::string what = std::string("split-K ") + kern + " " + std::to_string(rows) + "x" +
                                 std::to_string(cols) + " parts=" + std::to_string(parts);
        EXPECT_LE(rel_err(what.c_str(), c, g), prompt_tol(WType::q8_0)) << what;
        auto again = poisoned_pair(static_cast<size_t>(n * rows));
        gpu().matmul(wg, x.gpu(), n, again.gpu());
        EXPECT_LT(first_bit_diff(get(gpu(), again.gpu(), again.g.size()).data(), g.data(), n * rows), 0)
            << what << ": a repeated call";
        for (const auto& [r0, m] : {std::pair{0, 1}, std::pair{16, 1}, std::pair{3, 2}, std::pair{5, 4},
                                    std::pair{1, 9}, std::pair{0, 16}}) {
          auto part = poisoned_pair(static_cast<size_t>(m * rows));
          gpu().matmul(wg, x.gpu() + r0 * cols, m, part.gpu());
          const int64_t d = first_bit_diff(get(gpu(), part.gpu(), part.g.size()).data(), g.data() + r0 * rows, m * rows);
          EXPECT_LT(d, 0) << what << " rows " << r0 << " + " << m;
        }
      }
    }
    cuda::matmul_dec_mode(old);
  }
}
#endif

// The shapes of the real models take the fast path (a fallback would silently cost 10x).
TEST_F(Ops, MatmulModelShapesTakeTheFastPath) {
  auto x = both(random_floats(7168, 1));
  for (const auto& [t, cols] : {std::pair{WType::mxfp4, int64_t{3584}}, std::pair{WType::mxfp4, int64_t{3072}},
                                std::pair{WType::q8_0, int64_t{7168}}, std::pair{WType::q8_0, int64_t{1536}},
                                std::pair{WType::q8_0, int64_t{512}}}) {
    const auto bytes = random_weight(t, 16, cols, 2);
    auto wb = both_bytes(bytes.data(), bytes.size());
    EXPECT_TRUE(fast_path(Weight{t, 16, cols, wb->g}, x.gpu())) << tname(t) << " cols " << cols;
  }
  EXPECT_FALSE(fast_path(Weight{WType::f32, 16, 512, x.gpu()}, x.gpu()));
}

// mxfp4 block exponents at both ends of E8M0 (the fast path moves part of 2^(e-113) into the decoded
// values above e = 240); x scaled so the products stay normal floats.
TEST_F(Ops, MatmulMxfp4ExtremeScalesMatchCpu) {
  const int64_t rows = 37, cols = 1024, n = 3;
  for (const auto& [e_lo, e_hi, xscale] : {std::tuple{2, 16, 0x1p100f}, std::tuple{236, 252, 0x1p-100f}}) {
    const auto q = random_mxfp4(static_cast<size_t>(rows * cols / kQK), 11, e_lo, e_hi);
    auto wb = both_bytes(q.data(), q.size() * sizeof(q[0]));
    auto xv = random_floats(static_cast<size_t>(n * cols), 12);
    for (auto& v : xv) v *= xscale;
    auto x = both(xv);
    auto y = poisoned_pair(static_cast<size_t>(n * rows));
    const Weight wg{WType::mxfp4, rows, cols, wb->g};
    cpu().matmul(Weight{WType::mxfp4, rows, cols, wb->c}, x.cpu(), n, y.cpu());
    gpu().matmul(wg, x.gpu(), n, y.gpu());
    auto [c, g] = results(y);
    EXPECT_TRUE(fast_path(wg, x.gpu()));
    EXPECT_TRUE(matches_cpu("matmul mxfp4 e in [" + std::to_string(e_lo) + "," + std::to_string(e_hi) + "]", true, c, g));
  }
}

// A weight view that starts mid-buffer (the model slices kv_b per head).
TEST_F(Ops, MatmulOnAWeightViewMatchesCpu) {
  for (const int64_t cols : {512, 544}) {  // fast path; generic path (row bytes not a multiple of 16)
    const int64_t rows = 40;
    for (WType t : {WType::q8_0, WType::mxfp4}) {
      const auto bytes = random_weight(t, rows, cols, 3);
      auto wb = both_bytes(bytes.data(), bytes.size());
      const size_t rb = Weight{t, rows, cols, nullptr}.row_bytes();
      auto x = both(random_floats(static_cast<size_t>(3 * cols), 4));
      auto y = poisoned_pair(3 * 7);
      const Weight wg{t, 7, cols, static_cast<uint8_t*>(wb->g) + 11 * rb};
      cpu().matmul(Weight{t, 7, cols, static_cast<uint8_t*>(wb->c) + 11 * rb}, x.cpu(), 3, y.cpu());
      gpu().matmul(wg, x.gpu(), 3, y.gpu());
      auto [c, g] = results(y);
      EXPECT_TRUE(matches_cpu(std::string("matmul view ") + tname(t) + " cols " + std::to_string(cols),
                              fast_path(wg, x.gpu()), c, g));
    }
  }
}

// DESIGN.md exactness on the GPU: each row of a 3-, 7- or 16-row call equals the same row run alone
// (both matmul paths; the row count changes only how many rows share a weight read).
TEST_F(Ops, MatmulSixteenRowBlockEqualsSixteenPlainRows) {
  for (WType t : {WType::f32, WType::q8_0, WType::mxfp4}) {
    const int64_t rows = 3072, cols = t == WType::f32 ? 1024 : 3584;
    const auto bytes = random_weight(t, rows, cols, 5);
    auto wb = both_bytes(bytes.data(), bytes.size());
    const Weight w{t, rows, cols, wb->g};
    for (const int64_t n : {3, 7, 16}) {
      auto x = both(random_floats(static_cast<size_t>(n * cols), 6));
      auto yb = poisoned_pair(static_cast<size_t>(n * rows)), yp = poisoned_pair(static_cast<size_t>(n * rows));
      gpu().matmul(w, x.gpu(), n, yb.gpu());
      for (int64_t r = 0; r < n; ++r) gpu().matmul(w, x.gpu() + r * cols, 1, yp.gpu() + r * rows);
      const auto b = get(gpu(), yb.gpu(), yb.g.size()), p = get(gpu(), yp.gpu(), yp.g.size());
      EXPECT_TRUE(bits_equal((std::to_string(n) + "-row block vs plain " + tname(t)).c_str(), p, b));
    }
  }
}

// Backend::download_start / download_wait (the router's scores, Model::route_start): the bytes arrive at
// the wait, ops queued in between run first; a start whose wait never came (an op threw in between) is
// dropped by the next start, which then works.
TEST_F(Ops, DownloadStartedThenWaitedGetsTheBytesAndAnAbandonedOneIsDropped) {
  auto& be = gpu();
  const std::vector<float> va = {1, 2, 3, 4}, vb = {5, 6, 7, 8};
  Buf a(be, 4), b(be, 4);
  be.upload(a, va.data(), 16);
  be.upload(b, vb.data(), 16);
  std::vector<float> d(4, -1.0f);
  be.download_start(d.data(), a, 16);
  be.scale(a, 2.0f, 4);  // queued after the copy: the copy sees the values before it
  be.download_wait();
  EXPECT_EQ(d, va);
  std::vector<float> lost(4, -1.0f), kept(4, -1.0f);
  be.download_start(lost.data(), a, 16);
  be.download_start(kept.data(), b, 16);
  be.download_wait();
  EXPECT_EQ(kept, vb);
  EXPECT_EQ(lost, std::vector<float>(4, -1.0f));
  be.download_wait();  // nothing pending: returns at once
}

TEST_F(Ops, EmbedIsBitIdenticalToCpu) {
  const std::vector<int32_t> ids = {5, 0, 99, 5, 42};
  for (WType t : {WType::f32, WType::q8_0}) {
    const int64_t rows = 100, cols = 320;
    const auto bytes = random_weight(t, rows, cols, 7);
    auto wb = both_bytes(bytes.data(), bytes.size());
    auto y = poisoned_pair(ids.size() * cols);
    cpu().embed(Weight{t, rows, cols, wb->c}, ids.data(), static_cast<int64_t>(ids.size()), y.cpu());
    gpu().embed(Weight{t, rows, cols, wb->g}, ids.data(), static_cast<int64_t>(ids.size()), y.gpu());
    auto [c, g] = results(y);
    EXPECT_TRUE(bits_equal(t == WType::f32 ? "embed f32" : "embed q8_0", c, g));
  }
  const std::vector<int32_t> bad = {100};
  EXPECT_THROW(gpu().embed(Weight{WType::f32, 100, 32, nullptr}, bad.data(), 1, nullptr), Error);
}

#if FERRY_WITH_CUDA
// Median device time per call of call(0..calls-1) over 7 replays of one graph of them (no launch gaps;
// plain launches if capture fails, which require_graph makes a test failure).
double time_calls(Backend& be, const std::function<void(int)>& call, int calls, int warmups, bool require_graph) {
  auto& cb = static_cast<cuda::CudaBackend&>(be);
  cudaStream_t st = cb.stream();
  for (int i = 0; i < warmups; ++i) call(i);  // first-call attribute setting, scratch growth
  auto run_all = [&] {
    for (int i = 0; i < calls; ++i) call(i);
  };
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool graphed = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (graphed) {
    run_all();
    graphed = cudaStreamEndCapture(st, &graph) == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  }
  if (!graphed) {
    (void)cudaGetLastError();
    if (require_graph) ADD_FAILURE() << "graph capture failed";
    std::printf("[bench] graph capture failed: timing plain launches (includes launch gaps)\n");
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> t;
  for (int rep = 0; rep < 7; ++rep) {
    cudaEventRecord(e0, st);
    if (graphed)
      cudaGraphLaunch(exec, st);
    else
      run_all();
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    t.push_back(ms * 1e-3 / calls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The q8_0 spine shapes of the K3.1 slice (the split-K and q8_0-tiles sweeps).
constexpr std::pair<int64_t, int64_t> kSliceSpineShapes[] = {
    {12288, 7168}, {7168, 12288}, {33792, 7168}, {7168, 33792}, {7168, 7168}, {6144, 7168}, {7168, 6144},
    {3584, 7168},  {7168, 3584},  {1536, 7168},  {576, 7168},   {128, 7168},  {18432, 1536}, {8192, 1536}};

// Copies of one random q8_0 matrix, enough to read ~200 MB per round (past the 50 MB L2), and x and y for
// up to 16 rows: the sweeps' setup. The copies are freed with it.
struct SpineCopies {
  Backend& be;
  std::vector<uint8_t> bytes;
  std::vector<Weight> ws;
  Buf x, y;
  SpineCopies(Backend& b, int64_t rows, int64_t cols)
      : be(b), bytes(random_weight(WType::q8_0, rows, cols, 9)), x(b, static_cast<size_t>(16 * cols)),
        y(b, static_cast<size_t>(16 * rows)) {
    const int copies = static_cast<int>(std::clamp<size_t>(size_t{200} * 1000 * 1000 / bytes.size() + 1, 1, 24));
    for (int i = 0; i < copies; ++i) {
      ws.push_back(Weight{WType::q8_0, rows, cols, be.alloc(bytes.size())});
      be.upload(const_cast<void*>(ws.back().data), bytes.data(), bytes.size());
    }
    const auto xv = random_floats(static_cast<size_t>(16 * cols), 10);
    be.upload(x, xv.data(), xv.size() * 4);
  }
  ~SpineCopies() {
    for (const Weight& w : ws) be.release(const_cast<void*>(w.data));
  }
};

// Median time per matmul call, rotating over `copies` weight copies so the weights come from HBM, not the
// 50 MB L2.
double time_matmul(Backend& be, const std::vector<Weight>& ws, const float* x, int64_t n, float* y) {
  return time_calls(
      be, [&](int i) { be.matmul(ws[static_cast<size_t>(i) % ws.size()], x, n, y); }, 96, 8, false);
}

// The small ops' timing: 64 calls per graph.
double time_graph(Backend& be, const std::function<void(int)>& fn) { return time_calls(be, fn, 64, 4, true); }

double copy_bandwidth(Backend& be) {  // device copy, bytes read + written per second
  const size_t bytes = size_t{2} << 30;
  void* a = be.alloc(bytes);
  void* b = be.alloc(bytes);
  auto& cb = static_cast<cuda::CudaBackend&>(be);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  be.copy(b, a, bytes);
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(e0, cb.stream());
    be.copy(b, a, bytes);
    cudaEventRecord(e1, cb.stream());
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    t.push_back(2.0 * bytes / (ms * 1e-3));
  }
  be.release(a);
  be.release(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
#endif

#if FERRY_WITH_CUDA
// Time the benchmark matrices at 1..16 rows; `label` prefixes each line.
void bench_matrices(Backend& be, const std::string& label) {
  struct Case { const char* name; WType t; int64_t rows, cols; int copies; };
  for (const Case c : {Case{"mxfp4 expert 3072x3584", WType::mxfp4, 3072, 3584, 24},
                       Case{"q8_0 spine 7168x7168", WType::q8_0, 7168, 7168, 3},
                       Case{"q8_0 spine 12288x7168", WType::q8_0, 12288, 7168, 2},
                       Case{"q8_0 ffn 7168x33792", WType::q8_0, 7168, 33792, 1}}) {
    // FERRY_BENCH_CASE=substring times one matrix only (profilers: scripts/gpu-decode-ncu.sh).
    const char* only = std::getenv("FERRY_BENCH_CASE");
    if (only && !std::string(c.name).starts_with(only)) continue;
    const auto bytes = random_weight(c.t, c.rows, c.cols, 9);
    std::vector<void*> bufs;
    std::vector<Weight> ws;
    for (int i = 0; i < c.copies; ++i) {
      bufs.push_back(be.alloc(bytes.size()));
      be.upload(bufs.back(), bytes.data(), bytes.size());
      ws.push_back(Weight{c.t, c.rows, c.cols, bufs.back()});
    }
    const auto xv = random_floats(static_cast<size_t>(16 * c.cols), 10);
    Buf x(be, xv.size()), y(be, static_cast<size_t>(16 * c.rows));
    be.upload(x, xv.data(), xv.size() * 4);
    const double floor_s = static_cast<double>(bytes.size()) / 4.8e12;
    for (int64_t n : {1, 2, 4, 8, 16}) {
      const double s = time_matmul(be, ws, x.get(), n, y.get());
      std::printf("[bench] %s%-24s n=%2lld  %8.2f us  %7.0f GB/s  floor %6.2f us  time/floor %5.2f\n", label.c_str(),
                  c.name, static_cast<long long>(n), s * 1e6, bytes.size() / s / 1e9, floor_s * 1e6, s / floor_s);
    }
    std::vector<float> out(static_cast<size_t>(c.rows));
    be.download(out.data(), y.get(), out.size() * 4);
    for (float v : out) ASSERT_TRUE(std::isfinite(v));
    for (void* p : bufs) be.release(p);
  }
}
#endif

TEST_F(Ops, MatmulBenchWeightBandwidth) {
#if FERRY_WITH_CUDA
  const double copy_bw = copy_bandwidth(gpu());
  std::printf("[bench] device copy (read+write): %.0f GB/s; HBM floor below uses 4800 GB/s\n", copy_bw / 1e9);
  bench_matrices(gpu(), "");
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The fast path's speed knobs (stage depth; one tile per thread block or resident blocks walking runs
// of tiles), for tuning their defaults; results never change.
TEST_F(Ops, MatmulBenchDepthAndSpreadSweep) {
#if FERRY_WITH_CUDA
  for (int depth : {1, 2}) {
    for (int spread : {1, 2}) {
      cuda::matmul_fast_tune(spread, depth);
      bench_matrices(gpu(), "depth=" + std::to_string(depth) + " spread=" + std::to_string(spread) + " ");
    }
  }
  cuda::matmul_fast_tune(0, 0);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The decode step's small ops in graph replays (device time only, no launch gaps): the routers (f32
// 896x7168, the generic kernel), attn_res (a pointer upload and two launches) and rmsnorm of one row.
// A one-warp-per-row router kernel, thinner generic blocks for the routers and a one-launch attn_res were
// measured slower and dropped (docs/BENCHMARKS.md "where a decode step's time goes").
TEST_F(Ops, SmallOpBenchRoutersAndAttnRes) {
#if FERRY_WITH_CUDA
  auto& be = gpu();
  {
    const int64_t rows = 896, cols = 7168;
    const auto bytes = random_weight(WType::f32, rows, cols, 3);
    std::vector<void*> bufs;
    std::vector<Weight> ws;
    for (int i = 0; i < 8; ++i) {
      bufs.push_back(be.alloc(bytes.size()));
      be.upload(bufs.back(), bytes.data(), bytes.size());
      ws.push_back(Weight{WType::f32, rows, cols, bufs.back()});
    }
    const auto xv = random_floats(static_cast<size_t>(16 * cols), 4);
    Buf x(be, xv.size()), y(be, static_cast<size_t>(16 * rows));
    be.upload(x, xv.data(), xv.size() * 4);
    for (int64_t n : {1, 2, 16}) {
      const double t = time_graph(be, [&](int i) { be.matmul(ws[static_cast<size_t>(i) % ws.size()], x.get(), n, y.get()); });
      std::printf("[smallop] router f32 896x7168 n=%2lld %8.2f us %6.0f GB/s\n", static_cast<long long>(n), t * 1e6,
                  bytes.size() / t / 1e9);
    }
    for (const int on : {0, 1}) {  // the one-row kernel (matmul_f32_row1_kernel) against the generic one
      cuda::matmul_f32_row1_tune(on);
      const double t = time_graph(be, [&](int i) { be.matmul(ws[static_cast<size_t>(i) % ws.size()], x.get(), 1, y.get()); });
      std::printf("[smallop] router f32 896x7168 n= 1 row1=%d %8.2f us %6.0f GB/s\n", on, t * 1e6, bytes.size() / t / 1e9);
    }
    cuda::matmul_f32_row1_tune(-1);
    for (void* p : bufs) be.release(p);
  }
  {
    const int64_t D = 7168;
    std::vector<Buf> vs;
    std::vector<const float*> ptrs;
    for (int s = 0; s < 9; ++s) {
      const auto v = random_floats(static_cast<size_t>(D), 30 + static_cast<uint32_t>(s), -2, 2);
      vs.emplace_back(be, v.size());
      be.upload(vs.back(), v.data(), v.size() * 4);
      ptrs.push_back(vs.back().get());
    }
    const auto wv = random_floats(static_cast<size_t>(D), 40);
    Buf w(be, wv.size()), out(be, static_cast<size_t>(D));
    be.upload(w, wv.data(), wv.size() * 4);
    for (int64_t nv : {2, 9}) {
      const double t = time_graph(be, [&](int) { be.attn_res(ptrs.data(), nv, w.get(), 1, D, 1e-5f, out.get()); });
      std::printf("[smallop] attn_res T=1 D=7168 nv=%lld %8.2f us\n", static_cast<long long>(nv), t * 1e6);
    }
    const double t = time_graph(be, [&](int) { be.rmsnorm(ptrs[0], w.get(), 1, D, 1e-5f, out.get()); });
    std::printf("[smallop] rmsnorm 1x7168 %8.2f us\n", t * 1e6);
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// With the small kernels launched as programmatic dependents (FERRY_PDL), a kernel that reads what a copy
// just staged still reads the new bytes: attn_res uploads its table of source pointers before its first
// kernel, right after a long matmul, and alternating tables give the bits of each table's call without
// programmatic launches (common.cuh stream_copied: the first launch after a copy is a plain one).
TEST_F(Ops, ProgrammaticLaunchAfterAStagedCopyReadsTheNewBytes) {
#if FERRY_WITH_CUDA
  auto& be = gpu();
  const int64_t rows = 12288, cols = 7168, D = 7168;
  const auto wb = random_weight(WType::q8_0, rows, cols, 90);
  Weight big{WType::q8_0, rows, cols, be.alloc(wb.size())};
  be.upload(const_cast<void*>(big.data), wb.data(), wb.size());
  be.prepare_matmul_weight(big);
  const auto xv = random_floats(static_cast<size_t>(cols), 91);
  Buf x(be, xv.size()), y(be, static_cast<size_t>(rows));
  be.upload(x, xv.data(), xv.size() * 4);
  std::vector<Buf> vs;
  for (int s = 0; s < 4; ++s) {
    const auto v = random_floats(static_cast<size_t>(D), 92 + static_cast<uint32_t>(s), -2, 2);
    vs.emplace_back(be, v.size());
    be.upload(vs.back(), v.data(), v.size() * 4);
  }
  const std::vector<const float*> tables[2] = {{vs[0].get(), vs[1].get()}, {vs[2].get(), vs[3].get()}};
  const auto wv = random_floats(static_cast<size_t>(D), 96);
  Buf w(be, wv.size());
  be.upload(w, wv.data(), wv.size() * 4);
  constexpr int kCalls = 24;
  std::vector<Buf> outs;
  for (int i = 0; i < kCalls; ++i) outs.emplace_back(be, static_cast<size_t>(D));
  const auto run = [&](int pdl) {
    cuda::launch_pdl_tune(pdl);
    for (int i = 0; i < kCalls; ++i) {
      be.matmul(big, x.get(), 1, y.get());
      be.attn_res(tables[i % 2].data(), 2, w.get(), 1, D, 1e-5f, outs[static_cast<size_t>(i)].get());
    }
    std::vector<std::vector<float>> got;
    for (int i = 0; i < kCalls; ++i) got.push_back(get(be, outs[static_cast<size_t>(i)].get(), static_cast<size_t>(D)));
    cuda::launch_pdl_tune(-1);
    return got;
  };
  const auto plain = run(0), programmatic = run(1);
  for (int i = 0; i < kCalls; ++i) {
    const auto& want = plain[static_cast<size_t>(i % 2)];
    EXPECT_LT(first_bit_diff(want.data(), programmatic[static_cast<size_t>(i)].data(), D), 0)
        << "call " << i << " (table " << i % 2 << ")";
    EXPECT_LT(first_bit_diff(want.data(), plain[static_cast<size_t>(i)].data(), D), 0) << "plain call " << i;
  }
  be.release(const_cast<void*>(big.data));
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The split of K (splitk.cuh) on both decode kernels for the K3.1 slice's spine shapes: the default
// rule's parts and fixed part counts, at 1 and 16 rows, for tuning matmul_ksplit's rule. Results never
// depend on the time; the bits depend on the parts (each count is checked against the CPU above).
TEST_F(Ops, MatmulBenchSplitKSweep) {
#if FERRY_WITH_CUDA
  auto& be = gpu();
  for (const auto& [rows, cols] : kSliceSpineShapes) {
    SpineCopies m(be, rows, cols);
    const std::vector<uint8_t>& bytes = m.bytes;
    std::vector<Weight>& ws = m.ws;
    Buf &x = m.x, &y = m.y;
    const int def = cuda::matmul_ksplit(ws[0]).parts;
    const int units = static_cast<int>(cols / cuda::matmul_ksplit(ws[0]).unit);
    for (const auto mode : {cuda::DecMode::off, cuda::DecMode::all}) {
      const cuda::DecMode old = cuda::matmul_dec_mode(mode);
      for (const int parts : {1, 2, 3, 4, 6, 8, 12}) {
        if (parts > units) break;
        FixedKParts fix(parts);
        for (int64_t n : {1, 16}) {
          const double t = time_matmul(be, ws, x.get(), n, y.get());
          std::printf("[splitk] q8_0 %5lldx%-5lld %-6s parts=%2d%s n=%2lld %8.2f us %6.0f GB/s\n",
                      static_cast<long long>(rows), static_cast<long long>(cols),
                      mode == cuda::DecMode::off ? "cores" : "tensor", parts, parts == def ? "*" : " ",
                      static_cast<long long>(n), t * 1e6, bytes.size() / t / 1e9);
        }
      }
      cuda::matmul_dec_mode(old);
    }
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

}  // namespace
}  // namespace ferry::test

namespace ferry::test {
namespace {

// ---- q8_0 tiles (kernels/cuda/matmul_q8t.cuh) -----------------------------------------------------------
#if FERRY_WITH_CUDA
// A fixed number of K parts for q8_0-tiles matmuls while it lives.
struct FixedQ8tParts {
  explicit FixedQ8tParts(int parts) { cuda::matmul_q8t_split_tune(parts); }
  ~FixedQ8tParts() { cuda::matmul_q8t_split_tune(-1); }
};
#endif

// prepare_matmul_weight repacks a q8_0 weight of rows % 16 == 0 and cols % 256 == 0 in place; its matmul
// then agrees with the CPU for every row count and split of K, in decode steps and in prompt passes, and
// a row alone has the bits of the same row in a call of 2..40 rows (in prompt passes: of the row in a
// pass, with one or two 16-row tiles a warp). Other weights stay as they are.
TEST_F(Ops, Q8TilesMatmulMatchesCpuForEverySplitAndKeepsRowBits) {
#if FERRY_WITH_CUDA
  struct Shape { int64_t rows, cols; };
  for (const Shape s : {Shape{48, 256}, Shape{96, 768}, Shape{256, 1536}, Shape{128, 7168}, Shape{64, 2560},
                        Shape{32, 16896}}) {
    const auto bytes = random_weight(WType::q8_0, s.rows, s.cols, 31);
    auto wb = both_bytes(bytes.data(), bytes.size());
    Weight w{WType::q8_0, s.rows, s.cols, wb->g};
    gpu().prepare_matmul_weight(w);
    ASSERT_EQ(w.layout, WLayout::q8_tiles) << s.rows << "x" << s.cols;
    EXPECT_EQ(w.data, wb->g);
    const Weight wc{WType::q8_0, s.rows, s.cols, wb->c};
    const int64_t n = 40;
    auto x = both(random_floats(static_cast<size_t>(n * s.cols), 32));
    auto yc = poisoned_pair(static_cast<size_t>(n * s.rows));
    cpu().matmul(wc, x.cpu(), n, yc.cpu());
    const auto c = get(cpu(), yc.cpu(), yc.c.size());
    const std::string shape = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    for (const int parts : {-1, 1, 2, 3, 7}) {
      FixedQ8tParts fix(parts);
      auto all = poisoned_pair(static_cast<size_t>(n * s.rows));
      gpu().matmul(w, x.gpu(), n, all.gpu());
      const auto a = get(gpu(), all.gpu(), all.g.size());
      const std::string what = "q8t " + shape + " parts " + std::to_string(parts);
      EXPECT_LE(rel_err((what + " n=40").c_str(), c, a), kMmaTol) << what;
      for (const auto& [r0, m] : {std::pair{0, 1}, std::pair{39, 1}, std::pair{3, 2}, std::pair{5, 4}, std::pair{7, 5},
                                  std::pair{9, 8}, std::pair{11, 9}, std::pair{20, 16}, std::pair{2, 17}}) {
        auto part = poisoned_pair(static_cast<size_t>(m * s.rows));
        gpu().matmul(w, x.gpu() + r0 * s.cols, m, part.gpu());
        const auto p = get(gpu(), part.gpu(), part.g.size());
        EXPECT_LT(first_bit_diff(p.data(), a.data() + r0 * s.rows, m * s.rows), 0) << what << " rows " << r0 << "+" << m;
      }
    }
    // Prompt passes (their own kernel: groups of 64 rows, 128-row tiles): a row's bits are those of the
    // row anywhere in a pass, with x as hi + lo and as hi only (matmul_mma_levels_tune; 3 keeps q8_0's two levels).
    for (const int lv : {2, 1, 3}) {
      cuda::matmul_mma_levels_tune(lv);
      const int64_t np = 130;
      auto xp = both(random_floats(static_cast<size_t>(np * s.cols), 34));
      auto pc = poisoned_pair(static_cast<size_t>(np * s.rows));
      cpu().matmul(wc, xp.cpu(), np, pc.cpu());
      auto pass = poisoned_pair(static_cast<size_t>(np * s.rows));
      {
        PromptPass on(gpu());
        gpu().matmul(w, xp.gpu(), np, pass.gpu());
      }
      const auto pa = get(gpu(), pass.gpu(), pass.g.size());
      EXPECT_LE(rel_err(("q8t prompt pass " + shape + " L=" + std::to_string(lv)).c_str(),
                        get(cpu(), pc.cpu(), pc.c.size()), pa),
                mma_tol(lv, WType::q8_0));
      for (const auto& [r0, m] : {std::pair{0, 1}, std::pair{17, 3}, std::pair{24, 16}, std::pair{60, 9}, std::pair{129, 1}}) {
        auto part = poisoned_pair(static_cast<size_t>(m * s.rows));
        {
          PromptPass on(gpu());
          gpu().matmul(w, xp.gpu() + r0 * s.cols, m, part.gpu());
        }
        const auto p = get(gpu(), part.gpu(), part.g.size());
        EXPECT_LT(first_bit_diff(p.data(), pa.data() + r0 * s.rows, m * s.rows), 0) << "prompt pass rows " << r0 << "+" << m << " L=" << lv;
      }
      // One and two 16-row tiles per warp fixed (128- and 256-row blocks; the last one partial for 48, 96 and
      // 64 rows), and one with the swizzled x, give the bits of the rule's choice, whole pass and a row alone.
      // mw 3 stands for one tile a warp with x swizzled and two blocks a SM (matmul_q8t_prompt_swz_tune), mw 4
      // for two tiles a warp on wgmma (matmul_q8t_prompt_wgmma_tune), mw 5 for it with the tiles' batches
      // overlapped; 1-3 with wgmma off.
      for (const int mw : {1, 2, 3, 4, 5})
        for (const auto& [r0, m] : {std::pair{0, np}, std::pair{0, int64_t{1}}, std::pair{60, int64_t{9}}}) {
          auto fixed = poisoned_pair(static_cast<size_t>(m * s.rows));
          {
            PromptPass on(gpu());
            cuda::matmul_q8t_prompt_mw_tune(mw == 3 ? 1 : mw >= 4 ? 2 : mw);
            cuda::matmul_q8t_prompt_swz_tune(mw == 3 ? 1 : 0);
            cuda::matmul_q8t_prompt_wgmma_tune(mw >= 4 ? mw - 3 : 0);
            gpu().matmul(w, xp.gpu() + r0 * s.cols, m, fixed.gpu());
            cuda::matmul_q8t_prompt_mw_tune(-1);
            cuda::matmul_q8t_prompt_swz_tune(-1);
            cuda::matmul_q8t_prompt_wgmma_tune(-1);
          }
          const auto p = get(gpu(), fixed.gpu(), fixed.g.size());
          EXPECT_LT(first_bit_diff(p.data(), pa.data() + r0 * s.rows, m * s.rows), 0)
              << "prompt pass, "
              << (mw == 3 ? "swizzled x, 1" : mw == 4 ? "wgmma, 2" : mw == 5 ? "wgmma overlapped, 2" : std::to_string(mw))
              << " tiles a warp, rows " << r0 << "+" << m << " " << shape << " L=" << lv;
        }
      cuda::matmul_mma_levels_tune(-1);
    }
  }
  // Shapes without whole tiles or units, and other types, keep their layout.
  for (const Weight& o : {Weight{WType::q8_0, 40, 256, nullptr}, Weight{WType::q8_0, 48, 1152, nullptr},
                          Weight{WType::mxfp4, 48, 256, nullptr}, Weight{WType::f32, 48, 256, nullptr}}) {
    const auto bytes = random_weight(o.type, o.rows, o.cols, 33);
    auto wb = both_bytes(bytes.data(), bytes.size());
    Weight w{o.type, o.rows, o.cols, wb->g};
    gpu().prepare_matmul_weight(w);
    EXPECT_EQ(w.layout, WLayout::rows) << tname(o.type) << " " << o.rows << "x" << o.cols;
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The q8_0 tiles' stream split (splitk.cuh: the tiles' units dealt to W workers in equal runs; a tile's
// parts are where the runs cut it): agrees with the CPU, a row alone has the bits of the row in a call of
// 2..40 rows (one and several row groups), two runs give the same bits, and where no run boundary falls
// inside a tile (W = 1, W = the tiles) every output has the unsplit kernel's bits.
TEST_F(Ops, Q8TilesStreamSplitMatchesCpuKeepsRowBitsAndUnsplitBitsWhereNoTileIsCut) {
#if FERRY_WITH_CUDA
  struct Shape { int64_t rows, cols; };
  struct StreamTune {
    explicit StreamTune(int w) { cuda::matmul_q8t_stream_tune(w); }
    ~StreamTune() { cuda::matmul_q8t_stream_tune(-1); }
  };
  for (const Shape s : {Shape{48, 768}, Shape{64, 2560}, Shape{128, 7168}, Shape{112, 3584}}) {
    const auto bytes = random_weight(WType::q8_0, s.rows, s.cols, 41);
    auto wb = both_bytes(bytes.data(), bytes.size());
    Weight w{WType::q8_0, s.rows, s.cols, wb->g};
    gpu().prepare_matmul_weight(w);
    ASSERT_EQ(w.layout, WLayout::q8_tiles);
    const Weight wc{WType::q8_0, s.rows, s.cols, wb->c};
    const int64_t n = 40, tiles = s.rows / 16, units = tiles * (s.cols / 256);
    auto x = both(random_floats(static_cast<size_t>(n * s.cols), 42));
    auto yc = poisoned_pair(static_cast<size_t>(n * s.rows));
    cpu().matmul(wc, x.cpu(), n, yc.cpu());
    const auto c = get(cpu(), yc.cpu(), yc.c.size());
    const std::string shape = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    auto run = [&](int workers, int64_t r0, int64_t m) {
      StreamTune tune(workers);
      FixedQ8tParts unsplit(workers == 0 ? 1 : -1);
      auto y = poisoned_pair(static_cast<size_t>(m * s.rows));
      gpu().matmul(w, x.gpu() + r0 * s.cols, m, y.gpu());
      return get(gpu(), y.gpu(), y.g.size());
    };
    const auto plain = run(0, 0, n);
    for (const int64_t workers : {int64_t{1}, tiles, int64_t{3}, int64_t{7}, units / 2, units}) {
      if (workers < 1 || workers > units) continue;
      StreamTune probe(static_cast<int>(workers));
      ASSERT_EQ(cuda::matmul_q8t_split(w).stream, workers) << shape;
      const std::string what = "q8t stream " + shape + " W=" + std::to_string(workers);
      const auto a = run(static_cast<int>(workers), 0, n);
      EXPECT_LE(rel_err((what + " n=40").c_str(), c, a), kMmaTol) << what;
      EXPECT_LT(first_bit_diff(run(static_cast<int>(workers), 0, n).data(), a.data(), n * s.rows), 0) << what << " twice";
      if (workers == 1 || workers == tiles) {
        EXPECT_LT(first_bit_diff(a.data(), plain.data(), n * s.rows), 0) << what << ": no tile cut, the unsplit bits";
      }
      for (const auto& [r0, m] : {std::pair{int64_t{0}, int64_t{1}}, std::pair{int64_t{39}, int64_t{1}},
                                  std::pair{int64_t{5}, int64_t{4}}, std::pair{int64_t{20}, int64_t{16}},
                                  std::pair{int64_t{2}, int64_t{17}}}) {
        const auto p = run(static_cast<int>(workers), r0, m);
        EXPECT_LT(first_bit_diff(p.data(), a.data() + r0 * s.rows, m * s.rows), 0) << what << " rows " << r0 << "+" << m;
      }
    }
  }
  // The rule (used under FERRY_Q8T_STREAM=1) takes the one-partial-wave matrices: 7,168 rows (448 tiles) and
  // 3,584 (224 tiles, 2 parts today), not 12,288 (768 tiles), nor short rows (8 units a worker at least).
  for (const auto& [rows, cols, want] : {std::tuple{int64_t{7168}, int64_t{12288}, true},
                                         std::tuple{int64_t{7168}, int64_t{3584}, true},
                                         std::tuple{int64_t{7168}, int64_t{2048}, false},
                                         std::tuple{int64_t{12288}, int64_t{7168}, false},
                                         std::tuple{int64_t{3584}, int64_t{7168}, true},
                                         std::tuple{int64_t{1536}, int64_t{7168}, false}})
    EXPECT_EQ(cuda::matmul_q8t_stream_rule(Weight{WType::q8_0, rows, cols, nullptr, WLayout::q8_tiles}), want)
        << rows << "x" << cols;
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// Backend::matmul_group with x prepared once for its q8_0-tiles weights (matmul_group_tune(1)): a launch
// per weight, the unsplit ones in one launch (matmul_group_launch_tune), or the split ones in it too, each
// with its own partials (matmul_group_split_tune), with and without the early launch of dependents
// (matmul_q8t_early_tune): every output has the bits of its matmul alone, the group's other weights (f32,
// q8_0 rows, another width) included, in decode calls of 1-40 rows and in a prompt pass.
TEST_F(Ops, Q8TilesMatmulGroupGivesEachOutputTheBitsOfItsMatmulAlone) {
#if FERRY_WITH_CUDA
  struct Shape { WType t; int64_t rows, cols; bool tiles; };
  const std::vector<Shape> shapes = {{WType::q8_0, 128, 3072, true},  // split K (few tiles: 3 parts)
                                     {WType::q8_0, 6144, 3072, true},
                                     {WType::q8_0, 48, 3072, true},  // split too: its own partials in the joint launch
                                     {WType::q8_0, 40, 3072, false},  // rows % 16: row layout
                                     {WType::f32, 33, 3072, false},
                                     {WType::q8_0, 64, 1024, true}};  // another width: alone
  std::vector<std::unique_ptr<Bytes>> bufs;
  std::vector<Weight> ws;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    const auto bytes = random_weight(s.t, s.rows, s.cols, 40 + static_cast<uint32_t>(i));
    bufs.push_back(both_bytes(bytes.data(), bytes.size()));
    ws.push_back(Weight{s.t, s.rows, s.cols, bufs.back()->g});
    gpu().prepare_matmul_weight(ws.back());
    EXPECT_EQ(ws.back().layout == WLayout::q8_tiles, s.tiles) << i;
  }
  ASSERT_GT(cuda::matmul_q8t_split(ws[0]).parts, 1);  // the split weights the joint launch must handle
  ASSERT_GT(cuda::matmul_q8t_split(ws[2]).parts, 1);
  ASSERT_EQ(cuda::matmul_q8t_split(ws[1]).parts, 1);
  cuda::matmul_group_tune(1);
  for (const int early : {0, 1})  // matmul_q8t_early_tune: dependents launched as the last block starts
  for (const int one_launch : {0, 1, 2})  // 2: the split weight (128x3072) in the launch too
  for (const bool prompt : {false, true}) {
    cuda::matmul_group_launch_tune(one_launch > 0);
    cuda::matmul_group_split_tune(one_launch == 2);
    cuda::matmul_q8t_early_tune(early);
    for (const int64_t n : {1, 3, 16, 40}) {
      auto x = both(random_floats(static_cast<size_t>(n * 3072), 50 + static_cast<uint32_t>(n)));
      auto x2 = both(random_floats(static_cast<size_t>(n * 1024), 60 + static_cast<uint32_t>(n)));
      std::vector<Pair> alone, grouped;
      std::vector<MatmulOut> outs;
      for (size_t i = 0; i < ws.size(); ++i) {
        alone.push_back(poisoned_pair(static_cast<size_t>(n * ws[i].rows)));
        grouped.push_back(poisoned_pair(static_cast<size_t>(n * ws[i].rows)));
      }
      if (prompt) gpu().set_prompt_pass(true);
      for (size_t i = 0; i < ws.size(); ++i) {
        const float* xi = ws[i].cols == 3072 ? x.gpu() : x2.gpu();
        gpu().matmul(ws[i], xi, n, alone[i].gpu());
        if (ws[i].cols == 3072) outs.push_back(MatmulOut{&ws[i], grouped[i].gpu()});
      }
      gpu().matmul_group(outs.data(), outs.size(), x.gpu(), n);
      const MatmulOut other{&ws.back(), grouped.back().gpu()};
      gpu().matmul_group(&other, 1, x2.gpu(), n);
      if (prompt) gpu().set_prompt_pass(false);
      for (size_t i = 0; i < ws.size(); ++i) {
        const auto a = get(gpu(), alone[i].gpu(), alone[i].g.size());
        const auto g = get(gpu(), grouped[i].gpu(), grouped[i].g.size());
        EXPECT_LT(first_bit_diff(a.data(), g.data(), static_cast<int64_t>(a.size())), 0)
            << "weight " << i << " n=" << n << (prompt ? " prompt pass" : "") << " one launch " << one_launch
            << " early " << early;
      }
    }
  }
  cuda::matmul_q8t_early_tune(-1);
  cuda::matmul_group_launch_tune(-1);
  cuda::matmul_group_split_tune(-1);
  cuda::matmul_group_tune(-1);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// A KDA layer's decode projections as one matmul_group (4 unsplit 12288x7168 q8_0 tiles, 128x7168 and
// 96x7168 split), one row: the unsplit ones in one launch against one launch each, with and without the early
// launch of dependents (same bits: Ops.Q8TilesMatmulGroupGivesEachOutputTheBitsOfItsMatmulAlone). 376 MB of
// weights: past the L2.
TEST_F(Ops, MatmulBenchQ8TilesGroupLaunch) {
#if FERRY_WITH_CUDA
  auto& be = gpu();
  const std::vector<int64_t> rows = {12288, 12288, 12288, 128, 96, 12288};
  constexpr int64_t kCols = 7168;
  std::vector<Weight> ws;
  std::vector<Buf> ys;
  double bytes = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto b = random_weight(WType::q8_0, rows[i], kCols, 70 + static_cast<uint32_t>(i));
    ws.push_back(Weight{WType::q8_0, rows[i], kCols, be.alloc(b.size())});
    be.upload(const_cast<void*>(ws.back().data), b.data(), b.size());
    be.prepare_matmul_weight(ws.back());
    ASSERT_EQ(ws.back().layout, WLayout::q8_tiles);
    ys.emplace_back(be, static_cast<size_t>(rows[i]));
    bytes += static_cast<double>(b.size());
  }
  std::vector<MatmulOut> outs;
  for (size_t i = 0; i < ws.size(); ++i) outs.push_back(MatmulOut{&ws[i], ys[i].get()});
  const auto xv = random_floats(static_cast<size_t>(kCols), 77);
  Buf x(be, xv.size());
  be.upload(x, xv.data(), xv.size() * 4);
  cuda::matmul_group_tune(1);
  for (const int early : {0, 1})
    for (const int one : {0, 1, 0, 1}) {
      cuda::matmul_group_launch_tune(one);
      cuda::matmul_q8t_early_tune(early);
      const double t = time_calls(be, [&](int) { be.matmul_group(outs.data(), outs.size(), x.get(), 1); }, 32, 8, false);
      std::printf("[q8t] KDA decode group (4 x 12288x7168 + 128x7168 + 96x7168), %s, early %d: %8.2f us %6.0f GB/s\n",
                  one ? "one launch for the unsplit" : "one launch per weight", early, t * 1e6, bytes / t / 1e9);
    }
  cuda::matmul_q8t_early_tune(-1);
  cuda::matmul_group_launch_tune(-1);
  cuda::matmul_group_tune(-1);
  for (const Weight& w : ws) be.release(const_cast<void*>(w.data));
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The q8_0 tiles against the row layout's kernels (the default decode path) for the K3.1 slice's spine
// shapes at 1, 4 and 16 rows, and the q8_0 tiles' split of K swept at one row.
TEST_F(Ops, MatmulBenchQ8Tiles) {
#if FERRY_WITH_CUDA
  auto& be = gpu();
  for (const auto& [rows, cols] : kSliceSpineShapes) {
    SpineCopies m(be, rows, cols);
    const std::vector<uint8_t>& bytes = m.bytes;
    std::vector<Weight>& ws = m.ws;
    Buf &x = m.x, &y = m.y;
    const double floor_s = static_cast<double>(bytes.size()) / 4.2e12;
    auto line = [&](const char* what, int parts, int64_t n, double t) {
      std::printf("[q8t] q8_0 %5lldx%-5lld %-6s parts=%2d n=%2lld %8.2f us %6.0f GB/s  time/copy-floor %5.2f\n",
                  static_cast<long long>(rows), static_cast<long long>(cols), what, parts,
                  static_cast<long long>(n), t * 1e6, bytes.size() / t / 1e9, t / floor_s);
    };
    for (int64_t n : {1, 4, 16}) line("rows", cuda::matmul_ksplit(ws[0]).parts, n, time_matmul(be, ws, x.get(), n, y.get()));
    for (Weight& w : ws) be.prepare_matmul_weight(w);
    ASSERT_EQ(ws[0].layout, WLayout::q8_tiles);
    const int def = cuda::matmul_q8t_split(ws[0]).parts;
    for (int64_t n : {1, 4, 16}) line("tiles", def, n, time_matmul(be, ws, x.get(), n, y.get()));
    for (const int parts : {1, 2, 3, 4, 5, 6, 7, 8}) {
      if (rows >= 6144 && parts > 2) break;  // measured: unsplit is fastest there
      FixedQ8tParts fix(parts);
      const int p = cuda::matmul_q8t_split(ws[0]).parts;
      if (p != parts) break;
      line("tiles", p, 1, time_matmul(be, ws, x.get(), 1, y.get()));
    }
    // The stream split (splitk.cuh) with the rule's 528 workers, at 1, 4 and 16 rows (rule: whether
    // FERRY_Q8T_STREAM=1 would take the shape: "stream*").
    if (ws[0].rows / 16 * (ws[0].cols / 256) >= 8 * cuda::splitk::kStreamWorkers) {
      cuda::matmul_q8t_stream_tune(cuda::splitk::kStreamWorkers);
      const int p = cuda::matmul_q8t_split(ws[0]).parts;
      for (int64_t n : {1, 4, 16})
        line(cuda::matmul_q8t_stream_rule(ws[0]) ? "stream*" : "stream", p, n, time_matmul(be, ws, x.get(), n, y.get()));
      cuda::matmul_q8t_stream_tune(-1);
    }
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// mma.sync's rates for fp16 m16n8k16 and E4M3 m16n8k32 (kernels/cuda/mma_rate_probe.cuh): whether x's lo as
// E4M3 (FERRY_MMA_LEVELS=3) can save tensor time, not only x's bytes. A benchmark (not in the default GPU suite).
TEST_F(Ops, MmaSyncRateBenchE4m3VersusFp16) {
  const cuda::MmaRates r = cuda::mma_sync_rates();
  std::printf("[mma-rate] mma.sync fp16 m16n8k16: %.1f TFLOP/s; e4m3 m16n8k32: %.1f TFLOP/s (%.2fx)\n", r.fp16_tflops,
              r.e4m3_tflops, r.e4m3_tflops / r.fp16_tflops);
  EXPECT_GT(r.fp16_tflops, 0.0);
  EXPECT_GT(r.e4m3_tflops, 0.0);
}

// The wgmma probe (kernels/cuda/sm90a/wgmma_probe.cuh): a chain of 4 wgmma.m64nNk16 with A in registers
// reproduces the products (against a double reference) with x in shared memory as K-major core matrices
// (8 rows x 16 bytes), the descriptor's leading byte offset the step between K's two core matrices (128) and
// its stride byte offset the step between 8-row groups (256) -- the reading the H100 confirmed on
// 2026-12-06 (the swapped one read past the block's shared memory) -- for N = 8 and 24 and A of E2M1
// values and of int8 values (the prompt kernels' weights), x's first two steps hi-sized and the last two
// lo-sized (a prompt kernel's quant block); and every one of the 64 x N sums has the bits of the same
// fragments' mma.sync chain (the H100, 2026-12-06: 4,096 of 4,096), which the wgmma prompt kernel
// (sm90a/q8t_prompt_wgmma.cuh) relies on to keep today's logits.
TEST_F(Ops, WgmmaProbeChainsGiveTheBitsOfMmaSyncChains) {
#if FERRY_WITH_CUDA
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major != 9) GTEST_SKIP() << "wgmma (sm_90a) needs an H100 / H200";
  constexpr int K = cuda::kWgmmaProbeK;
  std::mt19937 rng(4242);
  // fp16 bits and value of sign * (1 + m / 1024) * 2^e (e in fp16's normal range).
  auto half_of = [](int sign, int e, int m, double& v) {
    v = (sign ? -1.0 : 1.0) * (1.0 + m / 1024.0) * std::ldexp(1.0, e);
    return static_cast<uint16_t>((sign << 15) | ((e + 15) << 10) | m);
  };
  auto exact_half = [&](double x, double& v) -> uint16_t {  // x: 0 or an integer / E2M1 value (exact in fp16)
    v = x;
    if (x == 0.0) return 0;
    int e = 0;
    const double f = std::frexp(std::fabs(x), &e);  // |x| = f 2^e, f in [0.5, 1)
    const int m = static_cast<int>((f * 2.0 - 1.0) * 1024.0);
    double unused;
    return half_of(x < 0, e - 1, m, unused);
  };
  const double e2m1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  for (const int n : {8, 24})
    for (const bool int8 : {false, true}) {
      std::vector<uint16_t> a(64 * K), x(static_cast<size_t>(n) * K);
      std::vector<double> av(a.size()), xv(x.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const double q = int8 ? static_cast<double>(static_cast<int>(rng() % 256) - 128)
                              : (rng() & 1 ? -1.0 : 1.0) * e2m1[rng() % 8];
        a[i] = exact_half(q, av[i]);
      }
      for (int r = 0; r < n; ++r)
        for (int k = 0; k < K; ++k) {
          const size_t i = static_cast<size_t>(r) * K + k;
          const int e = k < 32 ? 10 + static_cast<int>(rng() % 5) : -3 + static_cast<int>(rng() % 7);
          x[i] = half_of(static_cast<int>(rng() & 1), e, static_cast<int>(rng() % 1024), xv[i]);
        }
      std::vector<double> ref(static_cast<size_t>(64) * n), mag(ref.size());
      for (int i = 0; i < 64; ++i)
        for (int j = 0; j < n; ++j)
          for (int k = 0; k < K; ++k) {
            const double p = av[static_cast<size_t>(i) * K + k] * xv[static_cast<size_t>(j) * K + k];
            ref[static_cast<size_t>(i) * n + j] += p;
            mag[static_cast<size_t>(i) * n + j] += std::fabs(p);
          }
      std::vector<float> dw(ref.size()), dm(ref.size());
      if (!cuda::wgmma_probe(n, a.data(), x.data(), 128, 256, 128, 256, dw.data(), dm.data()))
        GTEST_SKIP() << "this build has no sm_90a code for the probe";
      int bad_w = 0, bad_m = 0, bits = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const double tol = 1e-6 * mag[i] + 1e-30;
        bad_w += !(std::fabs(dw[i] - ref[i]) <= tol);
        bad_m += !(std::fabs(dm[i] - ref[i]) <= tol);
        bits += std::memcmp(&dw[i], &dm[i], 4) != 0;
      }
      EXPECT_EQ(bad_w, 0) << "wgmma chains against the reference, n=" << n << (int8 ? ", int8" : ", E2M1");
      EXPECT_EQ(bad_m, 0) << "mma.sync chains against the reference, n=" << n << (int8 ? ", int8" : ", E2M1");
      EXPECT_EQ(bits, 0) << "wgmma sums with other bits than mma.sync's, n=" << n << (int8 ? ", int8" : ", E2M1");
      std::printf("[probe] wgmma m64n%dk16 x4, A %s: %d of %zu sums off the reference; %d with other bits than "
                  "mma.sync's\n",
                  n, int8 ? "int8" : "E2M1", bad_w, ref.size(), bits);
    }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The q8_0 tiles' prompt kernel (a prompt pass's spine matmuls, x prepared per call as in the pass) for the
// K3.1 slice's prompt shapes at 1,024 rows, per variant: the rule's choice, one or two 16-row tiles a warp,
// and the swizzled x with two blocks a SM; TFLOP/s of the matmul's own FLOPs (2 rows cols n; the tensor
// cores do twice that: hi and lo). Speed only: every variant has the same bits (Q8Tiles test above).
TEST_F(Ops, MatmulBenchQ8TilesPromptPass) {
#if FERRY_WITH_CUDA
  auto& be = gpu();
  constexpr int64_t n = 1024;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{12288, 7168}, {33792, 7168}, {7168, 12288},
                                   {7168, 33792}, {3584, 7168}, {1536, 7168}, {128, 7168}, {18432, 1536}}) {
    const auto bytes = random_weight(WType::q8_0, rows, cols, 19);
    Weight w{WType::q8_0, rows, cols, be.alloc(bytes.size())};
    be.upload(const_cast<void*>(w.data), bytes.data(), bytes.size());
    be.prepare_matmul_weight(w);
    ASSERT_EQ(w.layout, WLayout::q8_tiles);
    const auto xv = random_floats(static_cast<size_t>(n * cols), 20);
    Buf x(be, xv.size()), y(be, static_cast<size_t>(n * rows));
    be.upload(x, xv.data(), xv.size() * 4);
    struct Arm { const char* name; int mw, swz, wg; };
    for (const Arm arm : {Arm{"rule", -1, 0, -1}, Arm{"mw1", 1, 0, 0}, Arm{"mw2", 2, 0, 0}, Arm{"wgmma", 2, 0, 1},
                          Arm{"wgmma-ov", 2, 0, 2}, Arm{"swizzled", 1, 1, 0}}) {
      cuda::matmul_q8t_prompt_mw_tune(arm.mw);
      cuda::matmul_q8t_prompt_swz_tune(arm.swz);
      cuda::matmul_q8t_prompt_wgmma_tune(arm.wg);
      PromptPass on(be);
      const double t = time_calls(be, [&](int) { be.matmul(w, x.get(), n, y.get()); }, 8, 2, false);
      std::printf("[q8tp] q8_0 %5lldx%-5lld n=%lld %-8s %9.1f us %6.1f TFLOP/s\n", static_cast<long long>(rows),
                  static_cast<long long>(cols), static_cast<long long>(n), arm.name, t * 1e6,
                  2.0 * rows * cols * n / t / 1e12);
    }
    cuda::matmul_q8t_prompt_mw_tune(-1);
    cuda::matmul_q8t_prompt_swz_tune(-1);
    cuda::matmul_q8t_prompt_wgmma_tune(-1);
    be.release(const_cast<void*>(w.data));
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// Backend::rmsnorm_kept / attn_res_norm: the norm's launch also prepares its output for the decode
// matmuls (CUDA, rows of up to 8,192), or the first matmul of the kept x prepares it (longer rows), and
// every matmul of x until drop_x reads that preparation. Every output has the bits of the unfused ops
// (rmsnorm, then each matmul preparing x itself): q8_0-tiles weights alone and in a group, a q8_0 weight
// in the row layout (rows % 16 != 0) and an f32 one, at 1, 2 and 16 rows. After drop_x, x rewritten by a
// plain rmsnorm is prepared afresh (no stale preparation); in a prompt pass nothing is prepared early.
TEST_F(Ops, KeptNormOutputGivesEveryMatmulTheBitsOfTheUnfusedOps) {
  for (const int64_t D : {int64_t{7168}, int64_t{2048}, int64_t{9216}}) {
    struct Shape { WType t; int64_t rows; };
    const std::vector<Shape> shapes = {{WType::q8_0, 256}, {WType::q8_0, 1024}, {WType::q8_0, 512},
                                       {WType::q8_0, 40}, {WType::f32, 24}};
    std::vector<std::unique_ptr<Bytes>> bufs;
    std::vector<Weight> ws;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto bytes = random_weight(shapes[i].t, shapes[i].rows, D, 80 + static_cast<uint32_t>(i));
      bufs.push_back(both_bytes(bytes.data(), bytes.size()));
      ws.push_back(Weight{shapes[i].t, shapes[i].rows, D, bufs.back()->g});
      gpu().prepare_matmul_weight(ws.back());
    }
    ASSERT_EQ(ws[0].layout, WLayout::q8_tiles);
    ASSERT_EQ(ws[3].layout, WLayout::rows);
    auto nw = both(random_floats(static_cast<size_t>(D), 90, 0.5f, 1.5f));
    for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{16}})
      for (const bool prompt : {false, true})
        for (const int via : {0, 1}) {  // 0: rmsnorm_kept, 1: attn_res_norm (two inputs)
          const std::string what = "D=" + std::to_string(D) + " n=" + std::to_string(n) + (prompt ? " prompt" : "") +
                                   (via ? " attn_res_norm" : " rmsnorm_kept");
          const size_t nd = static_cast<size_t>(n * D);
          auto a = both(random_floats(nd, 91 + static_cast<uint32_t>(n), -2, 2));
          auto b = both(random_floats(nd, 92 + static_cast<uint32_t>(n), -2, 2));
          auto rw = both(random_floats(static_cast<size_t>(D), 93));
          const float* vs[2] = {a.gpu(), b.gpu()};
          // The unfused ops.
          auto h_ref = poisoned_pair(nd), x_ref = poisoned_pair(nd);
          if (prompt) gpu().set_prompt_pass(true);
          if (via) {
            gpu().attn_res(vs, 2, rw.gpu(), n, D, 1e-6f, h_ref.gpu());
            gpu().rmsnorm(h_ref.gpu(), nw.gpu(), n, D, 1e-6f, x_ref.gpu());
          } else {
            gpu().rmsnorm(a.gpu(), nw.gpu(), n, D, 1e-6f, x_ref.gpu());
          }
          std::vector<Pair> ref, out;
          for (const Weight& w : ws) {
            ref.push_back(poisoned_pair(static_cast<size_t>(n * w.rows)));
            out.push_back(poisoned_pair(static_cast<size_t>(n * w.rows)));
            gpu().matmul(w, x_ref.gpu(), n, ref.back().gpu());
          }
          // Kept: ws[0] alone, then ws[0..2] as a group, the others alone, ws[0] again.
          auto h = poisoned_pair(nd), x = poisoned_pair(nd);
          if (via)
            gpu().attn_res_norm(vs, 2, rw.gpu(), n, D, 1e-6f, h.gpu(), nw.gpu(), 1e-6f, x.gpu());
          else
            gpu().rmsnorm_kept(a.gpu(), nw.gpu(), n, D, 1e-6f, x.gpu());
          auto first = poisoned_pair(static_cast<size_t>(n * ws[0].rows));
          gpu().matmul(ws[0], x.gpu(), n, first.gpu());
          std::vector<MatmulOut> group;
          for (size_t i = 0; i < 3; ++i) group.push_back(MatmulOut{&ws[i], out[i].gpu()});
          gpu().matmul_group(group.data(), group.size(), x.gpu(), n);
          for (size_t i = 3; i < ws.size(); ++i) gpu().matmul(ws[i], x.gpu(), n, out[i].gpu());
          auto again = poisoned_pair(static_cast<size_t>(n * ws[0].rows));
          gpu().matmul(ws[0], x.gpu(), n, again.gpu());
          const auto kept_x = get(gpu(), x.gpu(), x.g.size());
          gpu().drop_x(x.gpu());
          // x rewritten after the drop: prepared afresh.
          auto x2_ref = poisoned_pair(nd), fresh_ref = poisoned_pair(static_cast<size_t>(n * ws[0].rows));
          gpu().rmsnorm(b.gpu(), nw.gpu(), n, D, 1e-6f, x2_ref.gpu());
          gpu().matmul(ws[0], x2_ref.gpu(), n, fresh_ref.gpu());
          gpu().rmsnorm(b.gpu(), nw.gpu(), n, D, 1e-6f, x.gpu());
          auto fresh = poisoned_pair(static_cast<size_t>(n * ws[0].rows));
          gpu().matmul(ws[0], x.gpu(), n, fresh.gpu());
          if (prompt) gpu().set_prompt_pass(false);
          const auto g = [&](const Pair& p) { return get(gpu(), p.gpu(), p.g.size()); };
          EXPECT_TRUE(bits_equal((what + " x").c_str(), g(x_ref), kept_x)) << what;
          EXPECT_TRUE(bits_equal((what + " first").c_str(), g(ref[0]), g(first))) << what;
          EXPECT_TRUE(bits_equal((what + " again").c_str(), g(ref[0]), g(again))) << what;
          for (size_t i = 0; i < ws.size(); ++i)
            EXPECT_TRUE(bits_equal((what + " w" + std::to_string(i)).c_str(), g(ref[i]), g(out[i]))) << what << " " << i;
          EXPECT_TRUE(bits_equal((what + " after drop").c_str(), g(fresh_ref), g(fresh))) << what;
          if (via) {
            EXPECT_TRUE(bits_equal((what + " h").c_str(), g(h_ref), g(h))) << what;
          }
        }
  }
}

// Backend::gate_kept (CUDA: the activation and its preparation for the decode matmuls in one launch)
// gives the activation's bits and the matmul after it the bits of swiglu / situ / sigmoid_mul then the
// matmul, at 1 and 16 rows, for rows the fused kernel takes (2048, 12288, 33792; 992: a q8_0 weight in rows) and
// unaligned ones (the ops one by one).
TEST_F(Ops, GateKeptGivesTheBitsOfTheActivationThenTheMatmul) {
  cuda::fused_gate_tune(1);  // the fused kernel, off by default
  const GateAct acts[] = {{GateOp::swiglu}, {GateOp::situ, 1.5f, 2.0f}, {GateOp::situ, 3.0f, 0.0f},
                          {GateOp::sigmoid_mul}};
  // Rows of 1 to 8 blocks of a cluster (992: one, 2048: two, 12288: eight, two float4 a thread) and longer
  // (33792: eight blocks of five float4 a thread, the dense FFN's).
  for (const int64_t cols : {int64_t{2048}, int64_t{12288}, int64_t{992}, int64_t{33792}})
    for (const int64_t shift : {int64_t{0}, int64_t{1}}) {
      const auto bytes = random_weight(WType::q8_0, 256, cols, 95);
      auto wb = both_bytes(bytes.data(), bytes.size());
      Weight w{WType::q8_0, 256, cols, wb->g};
      gpu().prepare_matmul_weight(w);
      for (const int64_t n : {int64_t{1}, int64_t{16}})
        for (const GateAct& act : acts) {
          const size_t nc = static_cast<size_t>(n * cols);
          auto a = both(random_floats(nc + 1, 96, -4, 4)), b = both(random_floats(nc + 1, 97, -4, 4));
          auto y_ref = poisoned_pair(nc + 1), y = poisoned_pair(nc + 1);
          auto o_ref = poisoned_pair(static_cast<size_t>(n * 256)), o = poisoned_pair(static_cast<size_t>(n * 256));
          // shift 1: every row one float off 16-byte alignment
          const float *ag = a.gpu() + shift, *bg = b.gpu() + shift;
          float *yr = y_ref.gpu() + shift, *yg = y.gpu() + shift;
          if (act.op == GateOp::situ) gpu().situ(ag, bg, n * cols, act.beta, act.lbeta, yr);
          else if (act.op == GateOp::swiglu) gpu().swiglu(ag, bg, n * cols, yr);
          else gpu().sigmoid_mul(ag, bg, n * cols, yr);
          gpu().matmul(w, yr, n, o_ref.gpu());
          gpu().gate_kept(act, ag, bg, n, cols, yg);
          gpu().matmul(w, yg, n, o.gpu());
          gpu().drop_x(yg);
          const std::string what = "gate_kept op " + std::to_string(static_cast<int>(act.op)) + " " +
                                   std::to_string(n) + "x" + std::to_string(cols) + (shift ? " unaligned" : "");
          const auto g = [&](const Pair& p) { return get(gpu(), p.gpu(), p.g.size()); };
          EXPECT_TRUE(bits_equal((what + " y").c_str(), g(y_ref), g(y))) << what;
          EXPECT_TRUE(bits_equal((what + " matmul").c_str(), g(o_ref), g(o))) << what;
        }
    }
  cuda::fused_gate_tune(-1);
}

}  // namespace
}  // namespace ferry::test
