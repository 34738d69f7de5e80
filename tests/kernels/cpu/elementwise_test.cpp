// CPU normalisation and element-wise ops against double-precision references.
#include <gtest/gtest.h>

#include "kernels/backend.hpp"
#include "tests/kernels/cpu/test_util.hpp"

namespace ferry {
namespace {

using test::random_floats;

// Norms: the float result is x * r (* w) with r from a double sum, i.e. 2-3 float roundings of a value of
// size |x*w|: 4 ulp (5e-7 relative) per element is the bound.
constexpr double kNormRel = 5e-7;

void expect_rel(const std::vector<float>& got, const std::vector<double>& ref, double rel, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], rel * std::max(1e-30, std::fabs(ref[i])) + 1e-37) << what << " at " << i;
}

TEST(Norms, RmsnormWithAndWithoutWeight) {
  auto be = make_cpu_backend(2);
  const int64_t rows = 5, dim = 333;
  auto x = random_floats(rows * dim, 1, -3, 3), w = random_floats(dim, 2);
  for (bool with_w : {true, false}) {
    auto y = test::poisoned(x.size());
    be->rmsnorm(x.data(), with_w ? w.data() : nullptr, rows, dim, 1e-5f, y.data());
    std::vector<double> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1 / std::sqrt(ss / dim + 1e-5);
      for (int64_t i = 0; i < dim; ++i) ref[r * dim + i] = x[r * dim + i] * inv * (with_w ? w[i] : 1.0);
    }
    expect_rel(y, ref, kNormRel, with_w ? "rmsnorm(w)" : "rmsnorm");
  }
}

TEST(Norms, RmsnormRowInvariant) {
  auto be = make_cpu_backend(2);
  const int64_t rows = 9, dim = 4096;  // large enough to be split over threads
  auto x = random_floats(rows * dim, 3), w = random_floats(dim, 4);
  auto all = test::poisoned(x.size()), one = test::poisoned(dim);
  be->rmsnorm(x.data(), w.data(), rows, dim, 1e-6f, all.data());
  be->rmsnorm(x.data() + 7 * dim, w.data(), 1, dim, 1e-6f, one.data());
  EXPECT_EQ(test::first_bit_diff(one.data(), all.data() + 7 * dim, dim), -1);
}

TEST(Norms, LayernormAndL2norm) {
  auto be = make_cpu_backend(2);
  const int64_t rows = 4, dim = 128;
  auto x = random_floats(rows * dim, 5, 1, 3), w = random_floats(dim, 6), b = random_floats(dim, 7);
  auto y = test::poisoned(x.size()), z = test::poisoned(x.size());
  be->layernorm(x.data(), w.data(), b.data(), rows, dim, 1e-6f, y.data());
  be->l2norm(x.data(), rows, dim, 1e-6f, z.data());
  std::vector<double> ry(x.size()), rz(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0, ss = 0;
    for (int64_t i = 0; i < dim; ++i) m += x[r * dim + i], ss += double(x[r * dim + i]) * x[r * dim + i];
    m /= dim;
    for (int64_t i = 0; i < dim; ++i) v += (x[r * dim + i] - m) * (x[r * dim + i] - m);
    v /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      ry[r * dim + i] = (x[r * dim + i] - m) / std::sqrt(v + 1e-6) * w[i] + b[i];
      rz[r * dim + i] = x[r * dim + i] / std::sqrt(ss + 1e-6);
    }
  }
  // layernorm: x - mean rounds to float (relative error grows where x ~ mean) and + b can cancel, so
  // the bound is absolute, in units of the normalised magnitude (|w|,|b| <= 1, |x-m|*r <~ 2).
  for (size_t i = 0; i < ry.size(); ++i) ASSERT_NEAR(y[i], ry[i], 2e-6) << "layernorm " << i;
  expect_rel(z, rz, kNormRel, "l2norm");
}

// Element-wise: one or two float roundings of each elementary function (libm's expf/tanhf are
// within 1-2 ulp), so 1e-6 relative per element (about 8 ulp) covers every op here.
TEST(Elementwise, AllOpsMatchDoubleReference) {
  auto be = make_cpu_backend(2);
  const int64_t n = 70000;  // above the threading grain
  auto a = random_floats(n, 8, -8, 8), b = random_floats(n, 9, -30, 30);
  auto run = [&](auto op) {
    auto y = test::poisoned(n);
    op(y.data());
    return y;
  };
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  auto check = [&](const std::vector<float>& y, auto ref, const char* what) {
    std::vector<double> r(n);
    for (int64_t i = 0; i < n; ++i) r[i] = ref(double(a[i]), double(b[i]));
    expect_rel(y, r, 1e-6, what);
  };
  // axpy rounds a*x before adding, so its error is relative to the terms, not to the (cancelling) sum.
  auto check_terms = [&](const std::vector<float>& y, auto ref, auto terms, const char* what) {
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(y[i], ref(double(a[i]), double(b[i])), 1e-6 * terms(double(a[i]), double(b[i]))) << what << i;
  };
  check(run([&](float* y) { be->add(a.data(), b.data(), n, y); }), [](double x, double y) { return x + y; }, "add");
  check(run([&](float* y) { be->swiglu(a.data(), b.data(), n, y); }),
        [&](double g, double u) { return g * sig(g) * u; }, "swiglu");
  check(run([&](float* y) { be->situ(a.data(), b.data(), n, 4.0f, 25.0f, y); }),
        [&](double g, double u) { return 4 * std::tanh(g / 4) * sig(g) * 25 * std::tanh(u / 25); }, "situ");
  check(run([&](float* y) { be->situ(a.data(), b.data(), n, 4.0f, 0.0f, y); }),
        [&](double g, double u) { return 4 * std::tanh(g / 4) * sig(g) * u; }, "situ(no lbeta)");
  check(run([&](float* y) { be->sigmoid(a.data(), n, y); }), [&](double x, double) { return sig(x); }, "sigmoid");
  check(run([&](float* y) { be->sigmoid_mul(a.data(), b.data(), n, y); }),
        [&](double x, double g) { return x * sig(g); }, "sigmoid_mul");
  auto s = a;
  be->scale(s.data(), 0.37f, n);
  check(s, [](double x, double) { return x * double(0.37f); }, "scale");
  auto ax = b;
  be->axpy(-1.5f, a.data(), n, ax.data());
  check_terms(
      ax, [](double x, double y) { return y - 1.5 * x; },
      [](double x, double y) { return std::fabs(y) + std::fabs(1.5 * x); }, "axpy");
}

TEST(Elementwise, Copy2dStrided) {
  auto be = make_cpu_backend(1);
  auto src = random_floats(5 * 10, 10);
  auto dst = test::poisoned(5 * 7);
  be->copy2d(src.data() + 2, 10, dst.data(), 7, 5, 6);
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 6; ++c) ASSERT_EQ(dst[r * 7 + c], src[r * 10 + 2 + c]);
    EXPECT_TRUE(std::isnan(dst[r * 7 + 6])) << "wrote past cols";
  }
}

TEST(Memory, AllocIsZeroedAndCopiesRoundTrip) {
  auto be = make_cpu_backend(1);
  Buf b(*be, 100);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b.get()[i], 0.0f);
  auto x = random_floats(100, 11);
  be->upload(b, x.data(), 400);
  Buf c(*be, 100);
  be->copy(c, b, 400);
  std::vector<float> back(100);
  be->download(back.data(), c, 400);
  EXPECT_TRUE(test::bitwise_equal(back, x));
}

}  // namespace
}  // namespace ferry
