// Thread-count invariance of the non-matmul ops (matmul has its own in matmul_test.cpp): every op run
// on back-ends with 1, 2 and 3 threads gives the same bits, because each output is computed by one
// thread in a fixed order.
#include <gtest/gtest.h>

#include <functional>

#include "kernels/backend.hpp"
#include "tests/kernels/cpu/test_util.hpp"

namespace ferry {
namespace {

using test::random_floats;

// Runs `op` (writing into the returned vector) on 1, 2 and 3 threads and compares the bits.
void expect_thread_invariant(size_t out_size, const std::function<void(Backend&, float*)>& op, const char* what) {
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    auto be = make_cpu_backend(threads);
    auto out = test::poisoned(out_size);
    op(*be, out.data());
    if (first.empty())
      first = out;
    else
      EXPECT_TRUE(test::bitwise_equal(first, out)) << what << " differs with " << threads << " threads";
  }
}

TEST(ThreadCount, NormsAndElementwise) {
  const int64_t rows = 24, dim = 4096;  // enough work for the pool to split
  auto x = random_floats(rows * dim, 1), w = random_floats(dim, 2), b = random_floats(rows * dim, 3);
  expect_thread_invariant(x.size(), [&](Backend& be, float* y) { be.rmsnorm(x.data(), w.data(), rows, dim, 1e-5f, y); },
                          "rmsnorm");
  expect_thread_invariant(
      x.size(), [&](Backend& be, float* y) { be.layernorm(x.data(), w.data(), w.data(), rows, dim, 1e-6f, y); },
      "layernorm");
  expect_thread_invariant(x.size(), [&](Backend& be, float* y) { be.situ(x.data(), b.data(), rows * dim, 4, 25, y); },
                          "situ");
}

TEST(ThreadCount, KdaOps) {
  const int64_t T = 70, H = 5, K = 16, V = 16, C = H * K;
  auto q = random_floats(T * H * K, 4), k = random_floats(T * H * K, 5), v = random_floats(T * H * V, 6);
  auto g = random_floats(T * H * K, 7, -3, -0.01f), beta = random_floats(T * H, 8, 0.1f, 0.9f);
  auto s0 = random_floats(H * K * V, 9), w = random_floats(C * 4, 10), cs0 = random_floats(3 * C, 11);
  for (bool chunked : {false, true})
    expect_thread_invariant(T * H * V + H * K * V, [&](Backend& be, float* out) {
      std::copy(s0.begin(), s0.end(), out + T * H * V);  // the final state is checked too
      if (chunked)
        be.kda_chunked(q.data(), k.data(), v.data(), g.data(), beta.data(), T, H, K, V, 32, out + T * H * V, out);
      else
        be.kda_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), T, H, K, V, out + T * H * V, out);
    }, chunked ? "kda_chunked" : "kda_recurrent");
  expect_thread_invariant(T * C + 3 * C, [&](Backend& be, float* out) {
    std::copy(cs0.begin(), cs0.end(), out + T * C);
    be.conv1d_silu(q.data(), T, C, w.data(), 4, out + T * C, out);
  }, "conv1d_silu");
}

TEST(ThreadCount, AttentionAndIndexer) {
  const int64_t T = 12, L = 40, Hq = 8, Hk = 2, D = 32, p0 = 28, Hi = 4, topk = 8;
  auto q = random_floats(T * Hq * D, 12), kv = random_floats(L * Hk * D, 13), iw = random_floats(T * Hi, 14);
  std::vector<int32_t> sel(T * topk);
  make_cpu_backend(1)->indexer_topk(q.data(), kv.data(), iw.data(), T, L, Hi, D, p0, topk, sel.data());
  for (int threads : {2, 3}) {
    std::vector<int32_t> s2(T * topk);
    make_cpu_backend(threads)->indexer_topk(q.data(), kv.data(), iw.data(), T, L, Hi, D, p0, topk, s2.data());
    EXPECT_EQ(sel, s2) << threads << " threads";
  }
  for (bool sparse : {false, true})
    expect_thread_invariant(T * Hq * D, [&](Backend& be, float* out) {
      AttentionArgs a;
      a.q = q.data(), a.q_tok_stride = Hq * D, a.q_head_stride = D;
      a.k = kv.data(), a.k_tok_stride = Hk * D, a.k_head_stride = D;
      a.v = kv.data(), a.v_tok_stride = Hk * D, a.v_head_stride = D;
      a.out = out, a.T = T, a.L = L, a.Hq = Hq, a.Hk = Hk, a.Dk = D, a.Dv = D, a.q_pos0 = p0, a.scale = 0.2f;
      if (sparse) a.sel = sel.data(), a.sel_k = topk;
      be.attention(a);
    }, sparse ? "attention(sel)" : "attention");
}

}  // namespace
}  // namespace ferry
