// CPU matmul and embed: accuracy against a double reference, and the exactness properties the engine
// relies on (row invariance, thread-count invariance, quantized == f32 on the dequantized weights).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "io/errors.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/quant.hpp"
#include "tests/kernels/cpu/test_util.hpp"

namespace ferry {
namespace {

using test::random_floats;

// A weight of one type with its exact dequantized values (double).
struct TestWeight {
  std::vector<float> f32;
  std::vector<BlockQ8_0> q8;
  std::vector<BlockMxfp4> mx;
  std::vector<double> deq;  // [rows, cols]
  Weight w;
};

TestWeight make_weight(WType t, int64_t rows, int64_t cols, uint32_t seed) {
  TestWeight tw;
  const size_t n = static_cast<size_t>(rows * cols);
  if (t == WType::f32) {
    tw.f32 = random_floats(n, seed);
    tw.deq = test::to_double(tw.f32);
    tw.w = {t, rows, cols, tw.f32.data()};
  } else if (t == WType::q8_0) {
    tw.q8 = test::random_q8_0(n / kQK, seed);
    tw.deq = test::dequant_ref(tw.q8);
    tw.w = {t, rows, cols, tw.q8.data()};
  } else {
    tw.mx = test::random_mxfp4(n / kQK, seed);
    tw.deq = test::dequant_ref(tw.mx);
    tw.w = {t, rows, cols, tw.mx.data()};
  }
  return tw;
}

std::vector<float> run_matmul(Backend& be, const Weight& w, const std::vector<float>& x, int64_t n) {
  auto y = test::poisoned(static_cast<size_t>(n * w.rows));
  be.matmul(w, x.data(), n, y.data());
  return y;
}

class MatmulTypes : public ::testing::TestWithParam<WType> {};

// Error bound: each output is a float sum of `cols` products; float rounding grows at most like
// cols * 2^-24 * sum|x*w| (with 32 lanes, really ~ (cols/32 + 5) * 2^-24), so 1e-5 of sum|x*w| for
// cols <= 1000 is a safe and still tight bound (a wrong element or block would be ~1e-1).
TEST_P(MatmulTypes, MatchesDoubleReference) {
  auto be = make_cpu_backend(2);
  const int64_t rows = 37, cols = GetParam() == WType::f32 ? 999 : 992, n = 19;  // odd sizes, >16 rows
  auto tw = make_weight(GetParam(), rows, cols, 1);
  auto x = random_floats(static_cast<size_t>(n * cols), 2);
  auto y = run_matmul(*be, tw.w, x, n);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < rows; ++o) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        ref += x[r * cols + c] * tw.deq[o * cols + c];
        mag += std::fabs(x[r * cols + c] * tw.deq[o * cols + c]);
      }
      ASSERT_NEAR(y[r * rows + o], ref, 1e-5 * mag) << "row " << r << " out " << o;
    }
}

TEST_P(MatmulTypes, RowInvariantOneRowVsSixteen) {
  auto be = make_cpu_backend(2);
  const int64_t rows = 45, cols = 1024 + 96, n = 16;
  auto tw = make_weight(GetParam(), rows, cols, 3);
  auto x = random_floats(static_cast<size_t>(n * cols), 4);
  auto all = run_matmul(*be, tw.w, x, n);
  for (int64_t r : {0, 5, 15}) {
    std::vector<float> xr(x.begin() + r * cols, x.begin() + (r + 1) * cols);
    auto one = run_matmul(*be, tw.w, xr, 1);
    EXPECT_EQ(test::first_bit_diff(one.data(), all.data() + r * rows, rows), -1) << "row " << r;
  }
  // Also a row sitting in the second group of 16 of a 40-row call.
  std::vector<float> x40 = random_floats(static_cast<size_t>(40 * cols), 5);
  std::copy(x.begin(), x.begin() + cols, x40.begin() + 33 * cols);
  auto y40 = run_matmul(*be, tw.w, x40, 40);
  EXPECT_EQ(test::first_bit_diff(all.data(), y40.data() + 33 * rows, rows), -1);
}

TEST_P(MatmulTypes, ThreadCountInvariant) {
  auto be1 = make_cpu_backend(1), be2 = make_cpu_backend(2), be3 = make_cpu_backend(3);
  const int64_t rows = 301, cols = 512, n = 5;
  auto tw = make_weight(GetParam(), rows, cols, 6);
  auto x = random_floats(static_cast<size_t>(n * cols), 7);
  auto y1 = run_matmul(*be1, tw.w, x, n);
  EXPECT_TRUE(test::bitwise_equal(y1, run_matmul(*be2, tw.w, x, n)));
  EXPECT_TRUE(test::bitwise_equal(y1, run_matmul(*be3, tw.w, x, n)));
}

TEST_P(MatmulTypes, PortableAndAvx2KernelsAgreeBitwise) {
  auto be = make_cpu_backend(2);
  const int64_t rows = 64, cols = 1536, n = 17;
  auto tw = make_weight(GetParam(), rows, cols, 8);
  auto x = random_floats(static_cast<size_t>(n * cols), 9);
  auto fast = run_matmul(*be, tw.w, x, n);
  cpu::force_portable_kernels(true);
  auto portable = run_matmul(*be, tw.w, x, n);
  cpu::force_portable_kernels(false);
  EXPECT_TRUE(test::bitwise_equal(fast, portable));
}

// The quantized kernels decode blocks exactly and reuse the f32 dot, so they must equal the f32
// matmul of the dequantized weights bit for bit.
TEST_P(MatmulTypes, QuantizedEqualsF32OnDequantizedWeights) {
  if (GetParam() == WType::f32) GTEST_SKIP() << "f32 is the reference here";
  auto be = make_cpu_backend(2);
  const int64_t rows = 40, cols = 2048, n = 18;
  auto tw = make_weight(GetParam(), rows, cols, 10);
  auto deq = test::to_float(tw.deq);
  Weight wf{WType::f32, rows, cols, deq.data()};
  auto x = random_floats(static_cast<size_t>(n * cols), 11);
  EXPECT_TRUE(test::bitwise_equal(run_matmul(*be, tw.w, x, n), run_matmul(*be, wf, x, n)));
}

INSTANTIATE_TEST_SUITE_P(Cpu, MatmulTypes, ::testing::Values(WType::f32, WType::q8_0, WType::mxfp4),
                         [](const auto& info) {
                           return std::string(info.param == WType::f32    ? "f32"
                                              : info.param == WType::q8_0 ? "q8_0"
                                                                          : "mxfp4");
                         });

// Scale bytes 0 and 1 give float denormal scales (ggml's E8M0_TO_FP32_HALF special case).
TEST(Matmul, Mxfp4DenormalScalesDecodeExactly) {
  auto be = make_cpu_backend(1);
  auto mx = test::random_mxfp4(4, 12, 0, 1);
  const auto deq = test::dequant_ref(mx);
  Weight w{WType::mxfp4, 4, 32, mx.data()};
  for (int o = 0; o < 4; ++o) {
    std::vector<float> x(32, 0.0f);
    for (int c = 0; c < 32; ++c) {
      x.assign(32, 0.0f);
      x[c] = 1.0f;
      auto y = run_matmul(*be, w, x, 1);
      ASSERT_EQ(static_cast<double>(y[o]), deq[o * 32 + c]) << "block " << o << " elem " << c;
    }
  }
}

TEST(Matmul, RowBytesAndErrors) {
  EXPECT_EQ((Weight{WType::f32, 2, 10, nullptr}.row_bytes()), 40u);
  EXPECT_EQ((Weight{WType::q8_0, 2, 64, nullptr}.row_bytes()), 68u);
  EXPECT_EQ((Weight{WType::mxfp4, 3, 64, nullptr}.nbytes()), 102u);
  EXPECT_THROW((Weight{WType::mxfp4, 2, 40, nullptr}.row_bytes()), std::exception);
  auto be = make_cpu_backend(1);
  float x[4] = {1, 2, 3, 4}, y[4];
  EXPECT_THROW(be->matmul(Weight{WType::f32, 1, 4, nullptr}, x, 1, y), std::exception);
}

// A weight in another back-end's layout (the CUDA back-end's q8_0 tiles) is refused by name, never read
// as rows; the CPU back-end's prepare_matmul_weight leaves a weight as it is.
TEST(Matmul, AWeightInTheCudaTilesLayoutIsRefusedAndCpuPrepareKeepsRows) {
  auto be = make_cpu_backend(1);
  std::vector<uint8_t> bytes(Weight{WType::q8_0, 16, 256, nullptr}.nbytes());
  Weight w{WType::q8_0, 16, 256, bytes.data()};
  be->prepare_matmul_weight(w);
  EXPECT_EQ(w.layout, WLayout::rows);
  std::vector<float> x(256, 1.0f), y(16 * 256);
  be->matmul(w, x.data(), 1, y.data());
  w.layout = WLayout::q8_tiles;
  for (const auto& op : std::vector<std::function<void()>>{[&] { be->matmul(w, x.data(), 1, y.data()); },
                                                          [&] {
                                                            const int32_t id = 0;
                                                            be->embed(w, &id, 1, y.data());
                                                          }}) {
    try {
      op();
      ADD_FAILURE() << "a q8_0-tiles weight was read as rows";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("q8_0 tiles"), std::string::npos) << e.what();
    }
  }
}

TEST(Embed, F32AndQ8RowsAndBadId) {
  auto be = make_cpu_backend(2);
  const int64_t rows = 10, cols = 64;
  auto f = random_floats(rows * cols, 13);
  auto q = test::random_q8_0(rows * cols / kQK, 14);
  const auto qd = test::dequant_ref(q);
  const int32_t ids[3] = {7, 0, 7};
  auto y = test::poisoned(3 * cols);
  be->embed(Weight{WType::f32, rows, cols, f.data()}, ids, 3, y.data());
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < cols; ++c) ASSERT_EQ(y[i * cols + c], f[ids[i] * cols + c]);
  y = test::poisoned(3 * cols);
  be->embed(Weight{WType::q8_0, rows, cols, q.data()}, ids, 3, y.data());
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < cols; ++c) ASSERT_EQ(static_cast<double>(y[i * cols + c]), qd[ids[i] * cols + c]);
  const int32_t bad = 10;
  EXPECT_THROW(be->embed(Weight{WType::f32, rows, cols, f.data()}, &bad, 1, y.data()), std::exception);
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Throughput of the mxfp4 matmul on a K3 expert-sized weight (3072 x 3584). Run with
// --gtest_also_run_disabled_tests --gtest_filter='*Bench*'. Also printed: bytes per CPU-second (all
// threads' CPU time), which stays meaningful on a machine shared with other jobs.
TEST(MatmulBench, DISABLED_Mxfp4Throughput) {
  for (int threads : {1, 2}) {
    auto be = make_cpu_backend(threads);
    const int64_t rows = 3072, cols = 3584;
    auto tw = make_weight(WType::mxfp4, rows, cols, 15);
    for (int64_t n : {1, 16}) {
      auto x = random_floats(static_cast<size_t>(n * cols), 16);
      std::vector<float> y(static_cast<size_t>(n * rows));
      be->matmul(tw.w, x.data(), n, y.data());  // warm
      const int iters = n == 1 ? 50 : 10;
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = process_cpu_seconds();
      for (int i = 0; i < iters; ++i) be->matmul(tw.w, x.data(), n, y.data());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      const double cpu = (process_cpu_seconds() - c0) / iters;
      std::printf("mxfp4 %lldx%lld, %d thread(s), %2lld row(s): %.3f ms, %.2f GB/s of weights, %.2f GFLOP/s"
                  " (%.2f GB/s per CPU-second)\n",
                  static_cast<long long>(rows), static_cast<long long>(cols), threads, static_cast<long long>(n),
                  s * 1e3, tw.w.nbytes() / s / 1e9, 2.0 * rows * cols * n / s / 1e9, tw.w.nbytes() / cpu / 1e9);
    }
  }
}

}  // namespace
}  // namespace ferry
