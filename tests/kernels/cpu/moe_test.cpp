// Backend::expert_ffn and Backend::moe_combine on the CPU back-end: bit for bit the per-expert op
// sequence and the axpy sequence they replace (so the model's exactness tests keep their references),
// a row's result independent of the batch around it, and clear errors on bad batches.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "io/errors.hpp"
#include "tests/kernels/cpu/moe_util.hpp"

namespace ferry {
namespace {

using test::Batch;
using test::RandomExperts;

constexpr int64_t kIn = 256, kInter = 128, kXRows = 24;

// Runs `batch` through expert_ffn and through the per-expert sequence on y buffers poisoned with NaN
// (so rows a call fails to write, or writes that land elsewhere, show), and returns both.
std::pair<std::vector<float>, std::vector<float>> both_ways(Backend& be, Batch& batch, const std::vector<float>& x,
                                                            const ExpertAct& act) {
  const auto calls = batch.bind();
  int64_t y_rows = 0;
  for (const auto& c : calls) y_rows += c.m;
  ExpertFfnArgs a;
  a.calls = calls.data();
  a.n_calls = calls.size();
  a.x = x.data();
  a.x_rows = kXRows;
  a.in = kIn;
  a.inter = kInter;
  a.act = act;
  a.y_rows = y_rows;
  auto fused = test::poisoned(static_cast<size_t>(y_rows * kIn)), seq = fused;
  a.y = fused.data();
  be.expert_ffn(a);
  a.y = seq.data();
  test::per_expert_sequence(be, a);
  return {fused, seq};
}

TEST(ExpertFfn, BatchIsBitIdenticalToThePerExpertSequence) {
  auto be = make_cpu_backend(2);
  RandomExperts ex(*be, WType::mxfp4, 16, kIn, kInter, 100);
  const auto x = test::random_floats(static_cast<size_t>(kXRows * kIn), 1);
  std::mt19937 rng(7);
  for (const ExpertAct& act : test::all_acts())
    for (const int64_t e : {1, 2, 5, 16}) {
      std::vector<int64_t> m(static_cast<size_t>(e));
      for (auto& v : m) v = 1 + static_cast<int64_t>(rng() % 16);
      Batch b = test::random_batch(ex, 0, m, kXRows, static_cast<uint32_t>(e));
      const auto [fused, seq] = both_ways(*be, b, x, act);
      EXPECT_EQ(test::first_bit_diff(fused.data(), seq.data(), static_cast<int64_t>(fused.size())), -1)
          << e << " experts, situ=" << act.situ << " lbeta=" << act.lbeta;
      for (float v : fused) ASSERT_TRUE(std::isfinite(v)) << "a y row was not written";
    }
}

TEST(ExpertFfn, Q8ExpertsAreBitIdenticalToThePerExpertSequence) {
  auto be = make_cpu_backend(2);
  RandomExperts ex(*be, WType::q8_0, 4, kIn, kInter, 200);
  const auto x = test::random_floats(static_cast<size_t>(kXRows * kIn), 2);
  Batch b = test::random_batch(ex, 0, {3, 1, 16, 7}, kXRows, 3);
  const auto [fused, seq] = both_ways(*be, b, x, test::all_acts()[2]);
  EXPECT_TRUE(test::bitwise_equal(fused, seq));
}

// The exactness rule for batches: each row of each expert in a batch of 16 experts equals that row
// run as a batch of one expert with one row.
TEST(ExpertFfn, RowInABatchOfSixteenEqualsTheRowAlone) {
  auto be = make_cpu_backend(2);
  RandomExperts ex(*be, WType::mxfp4, 16, kIn, kInter, 300);
  const auto x = test::random_floats(static_cast<size_t>(kXRows * kIn), 4);
  std::vector<int64_t> m(16);
  for (size_t i = 0; i < m.size(); ++i) m[i] = 1 + static_cast<int64_t>(i * 5 % 16);
  Batch big = test::random_batch(ex, 0, m, kXRows, 5);
  const auto [fused, seq] = both_ways(*be, big, x, test::all_acts()[1]);
  (void)seq;
  for (size_t i = 0; i < big.calls.size(); ++i)
    for (size_t r = 0; r < big.rows[i].size(); ++r) {
      Batch one;
      one.add(ex[i], {big.rows[i][r]}, {0});
      const auto [alone, alone_seq] = both_ways(*be, one, x, test::all_acts()[1]);
      (void)alone_seq;
      EXPECT_EQ(test::first_bit_diff(alone.data(), fused.data() + big.dst[i][r] * kIn, kIn), -1)
          << "expert " << i << " row " << r;
    }
}

// Prompt-pass batches run in waves of buffers (2048 rows): an expert larger than a wave, and waves
// cut between experts, change no bit.
TEST(ExpertFfn, PromptBatchLargerThanAWaveIsBitIdentical) {
  auto be = make_cpu_backend(2);
  const int64_t in = 64, inter = 32, x_rows = 2500;
  RandomExperts ex(*be, WType::mxfp4, 4, in, inter, 600);
  const std::vector<int64_t> m{1500, 900, 10, 2300};
  Batch b = test::random_batch(ex, 0, m, x_rows, 601);
  const auto calls = b.bind();
  const auto x = test::random_floats(static_cast<size_t>(x_rows * in), 602);
  const int64_t y_rows = 1500 + 900 + 10 + 2300;
  auto fused = test::poisoned(static_cast<size_t>(y_rows * in)), seq = fused;
  ExpertFfnArgs a;
  a.calls = calls.data();
  a.n_calls = calls.size();
  a.x = x.data();
  a.x_rows = x_rows;
  a.y_rows = y_rows;
  a.in = in;
  a.inter = inter;
  a.act = test::all_acts()[2];
  a.y = fused.data();
  be->expert_ffn(a);
  a.y = seq.data();
  test::per_expert_sequence(*be, a);
  EXPECT_TRUE(test::bitwise_equal(fused, seq));
  for (float v : fused) ASSERT_TRUE(std::isfinite(v));
}

// y rows no call names keep their contents (the MoE layer relies on nothing else, but a back-end
// must not scribble over them).
TEST(ExpertFfn, LeavesRowsNoCallNamesUntouched) {
  auto be = make_cpu_backend(1);
  RandomExperts ex(*be, WType::mxfp4, 2, kIn, kInter, 400);
  const auto x = test::random_floats(static_cast<size_t>(kXRows * kIn), 6);
  Batch b;
  b.add(ex[0], {3, 9}, {1, 4});
  b.add(ex[1], {9}, {2});
  ExpertFfnArgs a;
  const auto calls = b.bind();
  a.calls = calls.data();
  a.n_calls = calls.size();
  a.x = x.data();
  a.x_rows = kXRows;
  a.in = kIn;
  a.inter = kInter;
  auto y = test::random_floats(static_cast<size_t>(6 * kIn), 7);
  const auto before = y;
  a.y = y.data();
  a.y_rows = 6;
  be->expert_ffn(a);
  for (int64_t row : {0, 3, 5})
    EXPECT_EQ(test::first_bit_diff(y.data() + row * kIn, before.data() + row * kIn, kIn), -1) << "row " << row;
}

TEST(ExpertFfn, BadBatchesThrowNamingTheCallAndField) {
  auto be = make_cpu_backend(1);
  RandomExperts ex(*be, WType::mxfp4, 1, kIn, kInter, 500);
  const auto x = test::random_floats(static_cast<size_t>(kXRows * kIn), 8);
  std::vector<float> y(static_cast<size_t>(4 * kIn));
  auto run = [&](Batch& b, int64_t inter) {
    ExpertFfnArgs a;
    const auto calls = b.bind();
    a.calls = calls.data();
    a.n_calls = calls.size();
    a.x = x.data();
    a.x_rows = kXRows;
    a.y = y.data();
    a.y_rows = 4;
    a.in = kIn;
    a.inter = inter;
    be->expert_ffn(a);
  };
  auto message = [&](Batch& b, int64_t inter) -> std::string {
    try {
      run(b, inter);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  Batch bad_row;
  bad_row.add(ex[0], {1, kXRows}, {0, 1});
  EXPECT_THROW(run(bad_row, kInter), LimitError);
  EXPECT_NE(message(bad_row, kInter).find("expert call 0 rows_host[1] = 24 outside [0, 24)"), std::string::npos)
      << message(bad_row, kInter);
  Batch bad_dst;
  bad_dst.add(ex[0], {1}, {-1});
  EXPECT_NE(message(bad_dst, kInter).find("dst_host[0] = -1"), std::string::npos) << message(bad_dst, kInter);
  Batch ok;
  ok.add(ex[0], {1}, {0});
  EXPECT_THROW(run(ok, kInter * 2), TensorError);
  EXPECT_NE(message(ok, kInter * 2).find("expert call 0 gate is [128, 256], expected [256, 256]"), std::string::npos)
      << message(ok, kInter * 2);
}

TEST(MoeCombine, IsBitIdenticalToTheAxpySequence) {
  auto be = make_cpu_backend(2);
  for (const auto& [n, k, dim] : {std::tuple{int64_t{1}, int64_t{16}, int64_t{3584}},
                                  std::tuple{int64_t{7}, int64_t{4}, int64_t{256}},
                                  std::tuple{int64_t{33}, int64_t{8}, int64_t{100}}}) {
    const auto y = test::random_floats(static_cast<size_t>(n * k * dim), 9, -3.0f, 3.0f);
    auto w = test::random_floats(static_cast<size_t>(n * k), 10, 0.0f, 2.5f);
    w[0] = 0.0f;  // 0 * negative y = -0: the sequence's 0 + -0 = +0 must be reproduced
    auto fused = test::poisoned(static_cast<size_t>(n * dim)), seq = fused, dflt = fused;
    be->moe_combine(y.data(), w.data(), n, k, dim, fused.data());
    test::axpy_sequence(*be, y.data(), w.data(), n, k, dim, seq.data());
    be->Backend::moe_combine(y.data(), w.data(), n, k, dim, dflt.data());  // the composed default
    EXPECT_TRUE(test::bitwise_equal(fused, seq)) << "n=" << n << " k=" << k << " dim=" << dim;
    EXPECT_TRUE(test::bitwise_equal(dflt, seq)) << "default, n=" << n;
  }
  // One rank of weight 0 over negative values: the products are -0, the sequence gives 0 + -0 = +0.
  const std::vector<float> neg{-1.0f, -2.0f}, w0{0.0f};
  std::vector<float> out(2, 1.0f);
  be->moe_combine(neg.data(), w0.data(), 1, 1, 2, out.data());
  EXPECT_FALSE(std::signbit(out[0]) || std::signbit(out[1]));
}

TEST(MoeCombine, ThreadCountDoesNotChangeBits) {
  const int64_t n = 5, k = 16, dim = 4096;
  const auto y = test::random_floats(static_cast<size_t>(n * k * dim), 11);
  const auto w = test::random_floats(static_cast<size_t>(n * k), 12, 0.0f, 1.0f);
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    auto be = make_cpu_backend(threads);
    auto out = test::poisoned(static_cast<size_t>(n * dim));
    be->moe_combine(y.data(), w.data(), n, k, dim, out.data());
    if (first.empty()) first = out;
    EXPECT_TRUE(test::bitwise_equal(first, out)) << threads << " threads";
  }
}

}  // namespace
}  // namespace ferry
