// Backend::matmul_heads (MLA's absorbed decode, every head in one call) equals one plain matmul per head
// on that head's weight rows and input slice, bit for bit, and leaves the gaps between output slices alone.
#include <cstring>

#include <gtest/gtest.h>

#include "kernels/backend.hpp"
#include "tests/kernels/cpu/test_util.hpp"

namespace ferry::test {
namespace {

TEST(MatmulHeads, EqualsOneMatmulPerHeadOnItsRowsAndSlice) {
  auto be = make_cpu_backend(2);
  const int64_t heads = 5, rows = 24, cols = 64, w_head_rows = 30, n = 3;
  const auto wf = random_floats(static_cast<size_t>(heads * w_head_rows * cols), 1);
  const HeadsLayout l{heads, w_head_rows, heads * (cols + 8), cols + 8, heads * (rows + 4), rows + 4};
  const auto x = random_floats(static_cast<size_t>(n * l.x_tok), 2);
  std::vector<float> y(static_cast<size_t>(n * l.y_tok), -7.0f);
  const Weight w{WType::f32, rows, cols, wf.data()};
  be->matmul_heads(w, l, x.data(), n, y.data());
  for (int64_t h = 0; h < heads; ++h) {
    const Weight wh{WType::f32, rows, cols, wf.data() + h * w_head_rows * cols};
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> want(static_cast<size_t>(rows));
      be->matmul(wh, x.data() + t * l.x_tok + h * l.x_head, 1, want.data());
      const float* got = y.data() + t * l.y_tok + h * l.y_head;
      EXPECT_EQ(std::memcmp(got, want.data(), want.size() * sizeof(float)), 0) << "head " << h << " row " << t;
      for (int64_t g = rows; g < l.y_head; ++g) EXPECT_EQ(got[g], -7.0f) << "gap written at head " << h;
    }
  }
}

}  // namespace
}  // namespace ferry::test
