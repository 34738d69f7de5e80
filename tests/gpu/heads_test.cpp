// Backend::matmul_heads on CUDA (every head in one launch of the generic matmul kernel) against the CPU
// back-end's per-head matmuls: bit-identical, since the generic kernel keeps the CPU's reduction order,
// for the two shapes of MLA's absorbed decode (f32 W_uk^T per head, q8_0 value rows of kv_b with a head
// stride) and a row alone equals the same row in a block of 16.
#include <string>

#include "tests/gpu/gpu_util.hpp"

namespace ferry::test {
namespace {

using Ops = GpuOps;

std::vector<uint8_t> weight_bytes(WType t, int64_t rows, int64_t cols, uint32_t seed) {
  const Weight w{t, rows, cols, nullptr};
  std::vector<uint8_t> b(w.nbytes());
  if (t == WType::f32) {
    const auto f = random_floats(static_cast<size_t>(rows * cols), seed);
    std::memcpy(b.data(), f.data(), b.size());
  } else {
    const auto q = random_q8_0(static_cast<size_t>(rows * cols / 32), seed);
    std::memcpy(b.data(), q.data(), b.size());
  }
  return b;
}

struct Shape {
  const char* name;
  WType type;
  int64_t heads, rows, cols, w_head_rows, w_first_row;  // weight rows of head h: w_first_row + h*w_head_rows
};

TEST_F(Ops, MatmulHeadsIsBitIdenticalToCpuAndRowInvariant) {
  // K3-like MLA: 64 heads, dn = dv = 128, kv_lora_rank 512; x slices strided inside wider rows.
  for (const Shape s : {Shape{"uk f32", WType::f32, 64, 512, 128, 512, 0},
                        Shape{"uv q8_0", WType::q8_0, 64, 128, 512, 256, 128},
                        Shape{"small f32", WType::f32, 3, 40, 96, 40, 0}}) {
    const int64_t total_rows = s.w_first_row + s.heads * s.w_head_rows;
    const auto bytes = weight_bytes(s.type, total_rows, s.cols, 11);
    auto wb = both_bytes(bytes.data(), bytes.size());
    const size_t off = static_cast<size_t>(s.w_first_row) * Weight{s.type, 1, s.cols, nullptr}.row_bytes();
    const Weight wc{s.type, s.rows, s.cols, static_cast<const char*>(wb->c) + off};
    const Weight wg{s.type, s.rows, s.cols, static_cast<const char*>(wb->g) + off};
    const int64_t x_head = s.cols + 64;  // slices with a gap, like q_nope inside [dn + dr]
    HeadsLayout l{s.heads, s.w_head_rows, s.heads * x_head, x_head, s.heads * s.rows, s.rows};
    for (const int64_t n : {1, 3, 16}) {
      SCOPED_TRACE(std::string(s.name) + ", " + std::to_string(n) + " rows");
      auto x = both(random_floats(static_cast<size_t>(n * l.x_tok), 12));
      auto y = poisoned_pair(static_cast<size_t>(n * l.y_tok));
      cpu().matmul_heads(wc, l, x.cpu(), n, y.cpu());
      gpu().matmul_heads(wg, l, x.gpu(), n, y.gpu());
      const auto [c, g] = results(y);
      EXPECT_TRUE(bits_equal((std::string(s.name) + " vs cpu").c_str(), c, g));
      if (n == 16) {  // each row alone
        auto yp = poisoned_pair(static_cast<size_t>(n * l.y_tok));
        for (int64_t t = 0; t < n; ++t) gpu().matmul_heads(wg, l, x.gpu() + t * l.x_tok, 1, yp.gpu() + t * l.y_tok);
        EXPECT_TRUE(bits_equal("16-row block vs plain rows", get(gpu(), yp.gpu(), yp.g.size()), g));
      }
    }
  }
}

}  // namespace
}  // namespace ferry::test
