// CUDA against CPU: norms, element-wise ops and KDA, on random inputs with NaN-poisoned outputs.
#include <cmath>

#include "tests/gpu/gpu_util.hpp"

namespace ferry::test {
namespace {

using Ops = GpuOps;

// Norms: both back-ends sum in double (different orders), then round the scale once to float; the
// outputs differ by at most an ulp or two of the float result: 1e-6 of the output scale.
constexpr double kNormTol = 1e-6;
// exp / tanh / log1p: CUDA's single-precision functions are within 2 ulp of glibc's; an op chains a
// few of them: 2e-6 of the output scale (~16 ulp).
constexpr double kTranscTol = 2e-6;

// Rows of one part, of the cluster kernel's parts and longer (one block per row).
TEST_F(Ops, NormsMatchCpu) {
  for (const int64_t dim : {1000, 7168, 9000}) {
    const int64_t rows = 7;
    auto x = both(random_floats(rows * dim, 1, -3, 3));
    auto w = both(random_floats(dim, 2));
    auto b = both(random_floats(dim, 3));
    for (int which = 0; which < 4; ++which) {
      auto y = poisoned_pair(rows * dim);
      for (Backend* be : {cpu_, gpu_}) {
        const bool g = be == gpu_;
        const float* xi = g ? x.gpu() : x.cpu();
        float* yo = g ? y.gpu() : y.cpu();
        switch (which) {
          case 0: be->rmsnorm(xi, g ? w.gpu() : w.cpu(), rows, dim, 1e-6f, yo); break;
          case 1: be->rmsnorm(xi, nullptr, rows, dim, 1e-6f, yo); break;
          case 2: be->layernorm(xi, g ? w.gpu() : w.cpu(), g ? b.gpu() : b.cpu(), rows, dim, 1e-5f, yo); break;
          case 3: be->l2norm(xi, rows, dim, 1e-6f, yo); break;
        }
      }
      auto [c, gv] = results(y);
      const char* names[] = {"rmsnorm", "rmsnorm(no weight)", "layernorm", "l2norm"};
      EXPECT_LE(rel_err(names[which], c, gv), kNormTol) << names[which] << " dim " << dim;
    }
  }
}

// Head-sized rows (<= 256 floats: one warp per row on the GPU, the block kernels' order), many rows, in
// place as the model calls them.
TEST_F(Ops, NormsOfHeadSizedRowsMatchCpuInPlace) {
  for (const int64_t dim : {32, 64, 100, 128, 256}) {
    const int64_t rows = 1003;
    const auto xv = random_floats(static_cast<size_t>(rows * dim), 4, -3, 3);
    auto w = both(random_floats(static_cast<size_t>(dim), 5));
    for (int which = 0; which < 3; ++which) {
      auto y = both(xv);
      for (Backend* be : {cpu_, gpu_}) {
        const bool g = be == gpu_;
        float* yo = g ? y.gpu() : y.cpu();
        if (which == 0) be->rmsnorm(yo, g ? w.gpu() : w.cpu(), rows, dim, 1e-6f, yo);
        if (which == 1) be->rmsnorm(yo, nullptr, rows, dim, 1e-6f, yo);
        if (which == 2) be->l2norm(yo, rows, dim, 1e-6f, yo);
      }
      auto [c, gv] = results(y);
      const std::string what = std::string(which == 2 ? "l2norm" : which ? "rmsnorm(no weight)" : "rmsnorm") +
                               " dim " + std::to_string(dim);
      EXPECT_LE(rel_err(what.c_str(), c, gv), kNormTol) << what;
    }
  }
}

TEST_F(Ops, AddRowsIsBitIdenticalToCpu) {
  const int64_t rows = 1025, dim = 3072;
  auto x = both(random_floats(static_cast<size_t>(rows * dim), 6));
  auto b = both(random_floats(static_cast<size_t>(dim), 7));
  auto y = poisoned_pair(static_cast<size_t>(rows * dim));
  cpu().add_rows(x.cpu(), b.cpu(), rows, dim, y.cpu());
  gpu().add_rows(x.gpu(), b.gpu(), rows, dim, y.gpu());
  auto [c, g] = results(y);
  EXPECT_TRUE(bits_equal("add_rows", c, g));
}

TEST_F(Ops, RmsnormInPlaceMatchesOutOfPlace) {
  const int64_t rows = 5, dim = 4096;
  const auto xv = random_floats(rows * dim, 4);
  auto x = both(xv), w = both(random_floats(dim, 5));
  auto y = poisoned_pair(rows * dim);
  gpu().rmsnorm(x.gpu(), w.gpu(), rows, dim, 1e-6f, y.gpu());
  gpu().rmsnorm(x.gpu(), w.gpu(), rows, dim, 1e-6f, x.gpu());
  EXPECT_TRUE(bits_equal("rmsnorm in place", get(gpu(), y.gpu(), rows * dim), get(gpu(), x.gpu(), rows * dim)));
}

// add / scale / axpy / copy2d are single IEEE operations per element: bit-identical.
TEST_F(Ops, ExactElementwiseOpsAreBitIdentical) {
  const int64_t n = 100003;
  auto a = both(random_floats(n, 6)), b = both(random_floats(n, 7));
  auto y = poisoned_pair(n);
  cpu().add(a.cpu(), b.cpu(), n, y.cpu());
  gpu().add(a.gpu(), b.gpu(), n, y.gpu());
  auto [c1, g1] = results(y);
  EXPECT_TRUE(bits_equal("add", c1, g1));
  cpu().axpy(0.37f, a.cpu(), n, y.cpu());
  gpu().axpy(0.37f, a.gpu(), n, y.gpu());
  cpu().scale(y.cpu(), -1.7f, n);
  gpu().scale(y.gpu(), -1.7f, n);
  auto [c2, g2] = results(y);
  EXPECT_TRUE(bits_equal("axpy+scale", c2, g2));
  // copy2d: a 37 x 50 block out of rows of 300 into rows of 64.
  auto d = poisoned_pair(37 * 64);
  cpu().copy2d(a.cpu() + 3, 300, d.cpu(), 64, 37, 50);
  gpu().copy2d(a.gpu() + 3, 300, d.gpu(), 64, 37, 50);
  auto [c3, g3] = results(d);
  for (int64_t r = 0; r < 37; ++r)  // columns 50..63 stay NaN on both: compare the copied ones
    for (int64_t k = 0; k < 50; ++k) ASSERT_EQ(c3[r * 64 + k], g3[r * 64 + k]) << r << "," << k;
  std::printf("[gpu-op] copy2d                       bit-identical to cpu\n");
}

TEST_F(Ops, ActivationsMatchCpu) {
  const int64_t n = 65536 + 17;
  auto g = both(random_floats(n, 8, -12, 12)), u = both(random_floats(n, 9, -6, 6));
  for (int which = 0; which < 5; ++which) {
    auto y = poisoned_pair(n);
    for (Backend* be : {cpu_, gpu_}) {
      const bool G = be == gpu_;
      const float *gi = G ? g.gpu() : g.cpu(), *ui = G ? u.gpu() : u.cpu();
      float* yo = G ? y.gpu() : y.cpu();
      switch (which) {
        case 0: be->swiglu(gi, ui, n, yo); break;
        case 1: be->situ(gi, ui, n, 10.0f, 3.0f, yo); break;
        case 2: be->situ(gi, ui, n, 10.0f, 0.0f, yo); break;
        case 3: be->sigmoid(gi, n, yo); break;
        case 4: be->sigmoid_mul(ui, gi, n, yo); break;
      }
    }
    auto [c, gv] = results(y);
    const char* names[] = {"swiglu", "situ(lbeta=3)", "situ(lbeta=0)", "sigmoid", "sigmoid_mul"};
    EXPECT_LE(rel_err(names[which], c, gv), kTranscTol) << names[which];
  }
}

TEST_F(Ops, Conv1dSiluMatchesCpuAndCarriesState) {
  const int64_t T = 9, C = 300, W = 4;
  auto x = both(random_floats(T * C, 10)), w = both(random_floats(C * W, 11));
  auto st = both(random_floats((W - 1) * C, 12));
  auto y = poisoned_pair(T * C);
  cpu().conv1d_silu(x.cpu(), T, C, w.cpu(), W, st.cpu(), y.cpu());
  gpu().conv1d_silu(x.gpu(), T, C, w.gpu(), W, st.gpu(), y.gpu());
  auto [c, g] = results(y);
  EXPECT_LE(rel_err("conv1d_silu", c, g), kTranscTol);  // products and sums exact-order; silu's exp differs
  auto [cs, gs] = results(st);
  EXPECT_TRUE(bits_equal("conv1d_silu state", cs, gs));  // the history is copied inputs
}

TEST_F(Ops, KdaGateMatchesCpuInBothForms) {
  const int64_t T = 5, H = 4, K = 64;
  auto f = both(random_floats(T * H * K, 13, -30, 30)), al = both(random_floats(H, 14));
  for (bool safe : {false, true}) {
    auto g = poisoned_pair(T * H * K);
    KdaGateParams p;
    p.safe_gate = safe;
    p.lower_bound = -5.0f;
    cpu().kda_gate(f.cpu(), al.cpu(), T, H, K, p, g.cpu());
    gpu().kda_gate(f.gpu(), al.gpu(), T, H, K, p, g.gpu());
    auto [c, gv] = results(g);
    EXPECT_LE(rel_err(safe ? "kda_gate(safe)" : "kda_gate(softplus)", c, gv), kTranscTol);
  }
}

struct KdaIn {
  int64_t T, H, K, V;
  std::vector<float> q, k, v, g, beta, s0;
  KdaIn(int64_t T_, int64_t H_, int64_t K_, int64_t V_, uint32_t seed) : T(T_), H(H_), K(K_), V(V_) {
    q = random_floats(T * H * K, seed);
    k = random_floats(T * H * K, seed + 1);
    v = random_floats(T * H * V, seed + 2);
    g = random_floats(T * H * K, seed + 3, -5.0f, -0.001f);
    beta = random_floats(T * H, seed + 4, 0.01f, 0.99f);
    s0 = random_floats(H * K * V, seed + 5);
    for (int64_t i = 0; i < T * H; ++i) {  // unit q and k, as after the model's l2norm
      for (auto* x : {&q, &k}) {
        double ss = 0;
        for (int64_t d = 0; d < K; ++d) ss += double((*x)[i * K + d]) * (*x)[i * K + d];
        for (int64_t d = 0; d < K; ++d) (*x)[i * K + d] = float((*x)[i * K + d] / std::sqrt(ss));
      }
    }
  }
};

// The recurrence does the CPU's exact operations per column; only exp(g) differs (2 ulp), and the
// update is contractive, so the error stays near float rounding of the output scale: 1e-5.
TEST_F(Ops, KdaRecurrentMatchesCpu) {
  KdaIn in(16, 3, 64, 40, 20);  // V = 40: a partial column tile
  auto q = both(in.q), k = both(in.k), v = both(in.v), g = both(in.g), b = both(in.beta), s = both(in.s0);
  auto o = poisoned_pair(in.T * in.H * in.V);
  cpu().kda_recurrent(q.cpu(), k.cpu(), v.cpu(), g.cpu(), b.cpu(), in.T, in.H, in.K, in.V, s.cpu(), o.cpu());
  gpu().kda_recurrent(q.gpu(), k.gpu(), v.gpu(), g.gpu(), b.gpu(), in.T, in.H, in.K, in.V, s.gpu(), o.gpu());
  auto [co, go] = results(o);
  auto [cs, gs] = results(s);
  EXPECT_LE(rel_err("kda_recurrent out", co, go), 1e-5);
  EXPECT_LE(rel_err("kda_recurrent state", cs, gs), 1e-5);
}

// The CUDA back-end runs kda_chunked as the recurrence; the CPU's chunked form reorders the arithmetic:
// each is within 1e-5 of the exact result (the CPU tests bound both), so they agree within 3e-5.
TEST_F(Ops, KdaChunkedMatchesCpu) {
  KdaIn in(150, 2, 128, 128, 30);  // 150 tokens: two full chunks of 64 and a partial one
  auto q = both(in.q), k = both(in.k), v = both(in.v), g = both(in.g), b = both(in.beta), s = both(in.s0);
  auto o = poisoned_pair(in.T * in.H * in.V);
  cpu().kda_chunked(q.cpu(), k.cpu(), v.cpu(), g.cpu(), b.cpu(), in.T, in.H, in.K, in.V, 64, s.cpu(), o.cpu());
  gpu().kda_chunked(q.gpu(), k.gpu(), v.gpu(), g.gpu(), b.gpu(), in.T, in.H, in.K, in.V, 64, s.gpu(), o.gpu());
  auto [co, go] = results(o);
  auto [cs, gs] = results(s);
  EXPECT_LE(rel_err("kda_chunked out", co, go), 3e-5);
  EXPECT_LE(rel_err("kda_chunked state", cs, gs), 3e-5);
}

// The chunked kernel's versions (kda_chunked.cu: the first; loads in flight; a head's column tiles on one
// cluster sharing A / B's rows; register blocks for u / o and the state; the prepass of the chunks'
// state-free parts, in one group or several) give the same bits, output and
// state, for K of the register path (128, 64) and of its fallback loop (96, 36; 30 also outside the register
// blocks' K % 4), full and partial chunks and column tiles (V = 40: two tiles, the last partial), one head's
// tiles alone or many heads; chunks of 64 tokens (the prepass walk's substitution by columns in registers)
// and of 32 (its loop).
TEST_F(Ops, KdaChunkedVersionsGiveTheFirstVersionsBits) {
  struct Shape {
    int64_t T, H, K, V, C = 64;
  };
  for (const Shape sh : {Shape{150, 2, 128, 128}, Shape{200, 3, 64, 40}, Shape{70, 2, 96, 64}, Shape{64, 1, 128, 96},
                         Shape{70, 2, 36, 40}, Shape{40, 1, 30, 33}, Shape{100, 2, 128, 40, 32}}) {
    KdaIn in(sh.T, sh.H, sh.K, sh.V, 31);
    std::vector<float> ref_o, ref_s;
    // first, ilp, ilp + cluster, ilp + cluster + register blocks; the prepass with the register blocks (all
    // chunks in one group), without them, and in groups of one and of two chunks; its walk in blocks of two a
    // SM (where the shape allows; else the walk of 16 warps), with the register blocks in one group and
    // without them in groups of two chunks
    for (const int version : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
      cuda::kda_chunked_ilp_tune(version >= 1 ? 1 : 0);
      cuda::kda_chunked_cluster_tune(version >= 2 ? 1 : 0);
      cuda::kda_chunked_block_tune(version == 3 || version == 4 || version == 6 || version == 8 ? 1 : 0);
      cuda::kda_chunked_prepass_tune(version >= 4 ? 1 : 0, version == 6 ? 1 : version == 7 || version == 9 ? 2 : 0);
      cuda::kda_chunked_walk2_tune(version >= 8 ? 1 : 0);
      auto q = both(in.q), k = both(in.k), v = both(in.v), g = both(in.g), b = both(in.beta), s = both(in.s0);
      auto o = poisoned_pair(in.T * in.H * in.V);
      gpu().kda_chunked(q.gpu(), k.gpu(), v.gpu(), g.gpu(), b.gpu(), in.T, in.H, in.K, in.V, sh.C, s.gpu(), o.gpu());
      auto go = get(gpu(), o.gpu(), static_cast<size_t>(in.T * in.H * in.V));
      auto gs = get(gpu(), s.gpu(), static_cast<size_t>(in.H * in.K * in.V));
      if (version == 0) {
        ref_o = go, ref_s = gs;
        continue;
      }
      const std::string what = "kda_chunked v" + std::to_string(version) + " K" + std::to_string(sh.K) + " V" +
                               std::to_string(sh.V) + " C" + std::to_string(sh.C);
      EXPECT_TRUE(bits_equal((what + " out").c_str(), ref_o, go)) << what;
      EXPECT_TRUE(bits_equal((what + " state").c_str(), ref_s, gs)) << what;
    }
  }
  cuda::kda_chunked_ilp_tune(-1);
  cuda::kda_chunked_cluster_tune(-1);
  cuda::kda_chunked_block_tune(-1);
  cuda::kda_chunked_prepass_tune(-1);
  cuda::kda_chunked_walk2_tune(-1);
}

// Exactness on the GPU: 16 tokens in one call equal 16 one-token calls bit for bit.
TEST_F(Ops, KdaRecurrentSixteenTokensEqualSixteenSteps) {
  KdaIn in(16, 2, 64, 64, 40);
  auto q = both(in.q), k = both(in.k), v = both(in.v), g = both(in.g), b = both(in.beta);
  auto s1 = both(in.s0), s2 = both(in.s0);
  auto o1 = poisoned_pair(in.T * in.H * in.V), o2 = poisoned_pair(in.T * in.H * in.V);
  gpu().kda_recurrent(q.gpu(), k.gpu(), v.gpu(), g.gpu(), b.gpu(), in.T, in.H, in.K, in.V, s1.gpu(), o1.gpu());
  const int64_t hk = in.H * in.K, hv = in.H * in.V;
  for (int64_t t = 0; t < in.T; ++t)
    gpu().kda_recurrent(q.gpu() + t * hk, k.gpu() + t * hk, v.gpu() + t * hv, g.gpu() + t * hk, b.gpu() + t * in.H, 1,
                        in.H, in.K, in.V, s2.gpu(), o2.gpu() + t * hv);
  const size_t n = static_cast<size_t>(in.T * hv);
  EXPECT_TRUE(bits_equal("kda 16 tokens vs 16 steps", get(gpu(), o1.gpu(), n), get(gpu(), o2.gpu(), n)));
}

// Backend::l2norm_qk (CUDA: q's and k's rows in one launch) gives the bits of l2norm, scale and l2norm,
// for rows a warp holds (128: KDA's heads; 200) and longer ones (300: the three ops).
TEST_F(Ops, L2normQkGivesTheBitsOfTheThreeOps) {
  for (const int64_t dim : {int64_t{128}, int64_t{200}, int64_t{300}})
    for (const int64_t rows : {int64_t{96}, int64_t{3}}) {
      const auto qv = random_floats(static_cast<size_t>(rows * dim), 61, -3, 3);
      const auto kv = random_floats(static_cast<size_t>(rows * dim), 62, -3, 3);
      auto q1 = both(qv), k1 = both(kv), q2 = both(qv), k2 = both(kv);
      const float s = 0.08838834764831845f;
      gpu().l2norm(q1.gpu(), rows, dim, 1e-6f, q1.gpu());
      gpu().scale(q1.gpu(), s, rows * dim);
      gpu().l2norm(k1.gpu(), rows, dim, 1e-6f, k1.gpu());
      gpu().l2norm_qk(q2.gpu(), k2.gpu(), rows, dim, 1e-6f, s);
      const std::string what = "l2norm_qk " + std::to_string(rows) + "x" + std::to_string(dim);
      EXPECT_TRUE(bits_equal((what + " q").c_str(), get(gpu(), q1.gpu(), q1.g.size()), get(gpu(), q2.gpu(), q2.g.size())));
      EXPECT_TRUE(bits_equal((what + " k").c_str(), get(gpu(), k1.gpu(), k1.g.size()), get(gpu(), k2.gpu(), k2.g.size())));
    }
}

// Backend::conv1d_silu_many (CUDA: one launch for up to 4 convolutions) gives each convolution the bits of
// conv1d_silu alone, outputs and carried states, for a decode row and 5 rows, 3 and 5 calls (5: one by one).
TEST_F(Ops, Conv1dSiluManyGivesEachTheBitsOfItsCallAlone) {
  const int64_t C = 1000, W = 4;
  for (const int64_t T : {int64_t{1}, int64_t{5}})
    for (const size_t count : {size_t{3}, size_t{5}}) {
      std::vector<Pair> xs, ws, st1, st2, y1, y2;
      std::vector<Backend::Conv1dCall> calls;
      for (size_t i = 0; i < count; ++i) {
        const auto u = static_cast<uint32_t>(i);
        xs.push_back(both(random_floats(static_cast<size_t>(T * C), 70 + u)));
        ws.push_back(both(random_floats(static_cast<size_t>(C * W), 80 + u)));
        const auto s0 = random_floats(static_cast<size_t>((W - 1) * C), 90 + u);
        st1.push_back(both(s0));
        st2.push_back(both(s0));
        y1.push_back(poisoned_pair(static_cast<size_t>(T * C)));
        y2.push_back(poisoned_pair(static_cast<size_t>(T * C)));
        gpu().conv1d_silu(xs[i].gpu(), T, C, ws[i].gpu(), W, st1[i].gpu(), y1[i].gpu());
      }
      for (size_t i = 0; i < count; ++i) calls.push_back({xs[i].gpu(), ws[i].gpu(), st2[i].gpu(), y2[i].gpu()});
      gpu().conv1d_silu_many(calls.data(), calls.size(), T, C, W);
      for (size_t i = 0; i < count; ++i) {
        const std::string what = "conv many T=" + std::to_string(T) + " n=" + std::to_string(count) + " #" + std::to_string(i);
        EXPECT_TRUE(bits_equal((what + " y").c_str(), get(gpu(), y1[i].gpu(), y1[i].g.size()), get(gpu(), y2[i].gpu(), y2[i].g.size())));
        EXPECT_TRUE(bits_equal((what + " state").c_str(), get(gpu(), st1[i].gpu(), st1[i].g.size()),
                               get(gpu(), st2[i].gpu(), st2[i].g.size())));
      }
    }
}

// A prompt pass's convolutions in chunks of 16 tokens (a thread per chunk and channel) give the bits of one
// thread walking each channel, outputs and carried states: 100 tokens (a partial last chunk), a partial
// block of channels, the width of K3.1 (4, the compiled kernel) and others (3, 1: the runtime kernel), one
// call and three; an in-place call takes the serial kernel (the same check).
TEST_F(Ops, ConvolutionInChunksOfTokensGivesTheBitsOfOneWalkPerChannel) {
#if FERRY_WITH_CUDA
  const int64_t T = 100, C = 300;
  for (const int64_t W : {int64_t{4}, int64_t{3}, int64_t{1}})
    for (const size_t count : {size_t{1}, size_t{3}})
      for (const bool in_place : {false, true}) {
        std::vector<float> res[2][2];  // [chunks][y, state] of every call, concatenated
        for (const int chunks : {0, 1}) {
          cuda::conv1d_chunks_tune(chunks);
          std::vector<Pair> xs, ws, st, ys;
          std::vector<Backend::Conv1dCall> calls;
          for (size_t i = 0; i < count; ++i) {
            const auto u = static_cast<uint32_t>(i);
            xs.push_back(both(random_floats(static_cast<size_t>(T * C), 170 + u)));
            ws.push_back(both(random_floats(static_cast<size_t>(C * W), 180 + u)));
            st.push_back(both(random_floats(static_cast<size_t>(std::max<int64_t>(W - 1, 1) * C), 190 + u)));
            ys.push_back(poisoned_pair(static_cast<size_t>(T * C)));
          }
          for (size_t i = 0; i < count; ++i)
            calls.push_back({xs[i].gpu(), ws[i].gpu(), st[i].gpu(), in_place ? xs[i].gpu() : ys[i].gpu()});
          if (count == 1)
            gpu().conv1d_silu(calls[0].x, T, C, calls[0].w, W, calls[0].state, calls[0].y);
          else
            gpu().conv1d_silu_many(calls.data(), calls.size(), T, C, W);
          for (size_t i = 0; i < count; ++i) {
            const auto y = get(gpu(), calls[i].y, static_cast<size_t>(T * C));
            const auto sv = get(gpu(), st[i].gpu(), st[i].g.size());
            res[chunks][0].insert(res[chunks][0].end(), y.begin(), y.end());
            res[chunks][1].insert(res[chunks][1].end(), sv.begin(), sv.end());
          }
        }
        const std::string what = "conv chunks W=" + std::to_string(W) + " n=" + std::to_string(count) +
                                 (in_place ? " in place" : "");
        EXPECT_TRUE(bits_equal((what + " y").c_str(), res[0][0], res[1][0])) << what;
        EXPECT_TRUE(bits_equal((what + " state").c_str(), res[0][1], res[1][1])) << what;
      }
  cuda::conv1d_chunks_tune(-1);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// Backend::kda_gate_beta (CUDA: one launch) gives f + dt_bias, the gate and sigmoid(beta) the bits of add_rows,
// kda_gate and sigmoid one by one (the default: FERRY_FUSE=0), with and without the gate's lower bound, for
// a decode row, a verify block and a prompt pass's rows.
TEST_F(Ops, KdaGateBetaGivesTheBitsOfAddRowsGateAndSigmoid) {
#if FERRY_WITH_CUDA
  const int64_t H = 6, K = 128;
  for (const int64_t T : {int64_t{1}, int64_t{16}, int64_t{300}})
    for (const bool safe : {false, true}) {
      const auto fv = random_floats(static_cast<size_t>(T * H * K), 60 + static_cast<uint32_t>(T), -25, 25);
      const auto bv = random_floats(static_cast<size_t>(T * H), 61, -6, 6);
      auto bias = both(random_floats(static_cast<size_t>(H * K), 62, -1, 1));
      auto alog = both(random_floats(static_cast<size_t>(H), 63, -2, 1));
      KdaGateParams p;
      p.safe_gate = safe;
      p.lower_bound = -5.0f;
      std::vector<float> f[2], g[2], b[2];
      for (const int fused : {0, 1}) {
        auto ff = both(fv), bb = both(bv);
        auto gg = poisoned_pair(static_cast<size_t>(T * H * K));
        cuda::fused_ops_tune(fused);
        gpu().kda_gate_beta(ff.gpu(), bias.gpu(), alog.gpu(), T, H, K, p, gg.gpu(), bb.gpu());
        f[fused] = get(gpu(), ff.gpu(), fv.size());
        g[fused] = get(gpu(), gg.gpu(), fv.size());
        b[fused] = get(gpu(), bb.gpu(), bv.size());
      }
      cuda::fused_ops_tune(-1);
      const std::string what = "kda_gate_beta T=" + std::to_string(T) + (safe ? " safe" : "");
      EXPECT_TRUE(bits_equal((what + " f").c_str(), f[0], f[1]));
      EXPECT_TRUE(bits_equal((what + " g").c_str(), g[0], g[1]));
      EXPECT_TRUE(bits_equal((what + " beta").c_str(), b[0], b[1]));
    }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// The decode delta rule with the state's columns in registers (K 64 and 128) gives the bits of the
// shared-memory kernel, for a decode row and a verify block of 16, full and partial column tiles.
TEST_F(Ops, KdaRecurrentRegistersGiveTheBitsOfTheSharedMemoryKernel) {
#if FERRY_WITH_CUDA
  for (const int64_t K : {int64_t{64}, int64_t{128}})
    for (const int64_t V : {int64_t{128}, int64_t{40}})
      for (const int64_t T : {int64_t{1}, int64_t{16}}) {
        KdaIn in(T, 5, K, V, 50 + static_cast<uint32_t>(K + V + T));
        auto q = both(in.q), k = both(in.k), v = both(in.v), g = both(in.g), b = both(in.beta);
        auto s1 = both(in.s0), s2 = both(in.s0);
        auto o1 = poisoned_pair(in.T * in.H * in.V), o2 = poisoned_pair(in.T * in.H * in.V);
        cuda::kda_recurrent_reg_tune(0);
        gpu().kda_recurrent(q.gpu(), k.gpu(), v.gpu(), g.gpu(), b.gpu(), T, in.H, K, V, s1.gpu(), o1.gpu());
        cuda::kda_recurrent_reg_tune(1);
        gpu().kda_recurrent(q.gpu(), k.gpu(), v.gpu(), g.gpu(), b.gpu(), T, in.H, K, V, s2.gpu(), o2.gpu());
        cuda::kda_recurrent_reg_tune(-1);
        const std::string what = "kda reg K=" + std::to_string(K) + " V=" + std::to_string(V) + " T=" + std::to_string(T);
        EXPECT_TRUE(bits_equal((what + " out").c_str(), get(gpu(), o1.gpu(), o1.g.size()), get(gpu(), o2.gpu(), o2.g.size())));
        EXPECT_TRUE(bits_equal((what + " state").c_str(), get(gpu(), s1.gpu(), s1.g.size()), get(gpu(), s2.gpu(), s2.g.size())));
      }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// Backend::kda_conv_l2norm in one launch (FERRY_KDA_FUSE=2) gives the bits of conv1d_silu_many and l2norm_qk
// one after the other: q, k and v and the three convolution states, for a decode row, a verify block of 16 and 3
// rows, K of 1, 4 and 8 warps, conv widths 4 (the compiled one) and 3, and 96 heads (K3.1's layer); the launch
// counter proves the fused path ran.
TEST_F(Ops, KdaConvL2normInOneLaunchGivesTheBitsOfItsTwoOps) {
#if FERRY_WITH_CUDA
  struct Shape {
    int64_t T, H, K, W;
  };
  const Shape shapes[] = {{1, 96, 128, 4}, {16, 3, 128, 4}, {3, 5, 32, 4}, {2, 3, 256, 3}, {1, 7, 64, 3}};
  uint32_t seed = 120;
  for (const Shape& sh : shapes) {
    const int64_t T = sh.T, H = sh.H, K = sh.K, W = sh.W, C = H * K;
    std::vector<float> xs[3], ws[3], ss[3];
    for (int i = 0; i < 3; ++i) {
      xs[i] = random_floats(static_cast<size_t>(T * C), seed++, -3, 3);
      ws[i] = random_floats(static_cast<size_t>(C * W), seed++, -1, 1);
      ss[i] = random_floats(static_cast<size_t>((W - 1) * C), seed++, -3, 3);
    }
    std::vector<float> res[2][6];  // unfused, fused: q, k, v, then the three states
    for (const int fused : {0, 1}) {
      Pair x[3] = {both(xs[0]), both(xs[1]), both(xs[2])}, w[3] = {both(ws[0]), both(ws[1]), both(ws[2])},
           st[3] = {both(ss[0]), both(ss[1]), both(ss[2])};
      Pair y[3] = {poisoned_pair(static_cast<size_t>(T * C)), poisoned_pair(static_cast<size_t>(T * C)),
                   poisoned_pair(static_cast<size_t>(T * C))};
      Backend::Conv1dCall calls[3];
      for (int i = 0; i < 3; ++i) calls[i] = {x[i].gpu(), w[i].gpu(), st[i].gpu(), y[i].gpu()};
      cuda::kda_fuse_tune(fused ? 2 : 0);
      const int64_t before = cuda::kda_conv_fused_calls();
      gpu().kda_conv_l2norm(calls, T, H, K, W, 1e-6f, 0.088f);
      EXPECT_EQ(cuda::kda_conv_fused_calls() - before, fused);
      for (int i = 0; i < 3; ++i) {
        res[fused][i] = get(gpu(), y[i].gpu(), static_cast<size_t>(T * C));
        res[fused][3 + i] = get(gpu(), st[i].gpu(), ss[i].size());
      }
    }
    cuda::kda_fuse_tune(-1);
    const std::string what = "kda_conv_l2norm T=" + std::to_string(T) + " H=" + std::to_string(H) + " K=" +
                             std::to_string(K) + " W=" + std::to_string(W);
    const char* names[6] = {" q", " k", " v", " q state", " k state", " v state"};
    for (int i = 0; i < 6; ++i) EXPECT_TRUE(bits_equal((what + names[i]).c_str(), res[0][i], res[1][i])) << what;
  }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// Backend::kda_decode in one launch (FERRY_KDA_FUSE) gives the bits of its four ops one by one (kda_gate_beta,
// kda_recurrent, the per-head rmsnorm, the sigmoid gate): o, the state, f + dt_bias and sigmoid(beta), for a
// decode row, two rows and a verify block of 16, both gate forms, K 128 and 64, V of 1, 2, 4 and 8 warps, and
// 96 heads (K3.1's layer); the launch counter proves the fused path ran. And both within the recurrence's
// tolerance of the CPU's.
TEST_F(Ops, KdaDecodeInOneLaunchGivesTheBitsOfItsFourOps) {
#if FERRY_WITH_CUDA
  struct Shape {
    int64_t T, H, K, V;
  };
  const Shape shapes[] = {{1, 96, 128, 128}, {2, 5, 128, 128}, {16, 3, 128, 128}, {1, 4, 64, 64},
                          {16, 3, 64, 32}, {2, 3, 128, 256}};
  uint32_t seed = 70;
  for (const Shape& sh : shapes)
    for (const bool safe : {false, true}) {
      const int64_t T = sh.T, H = sh.H, K = sh.K, V = sh.V;
      KdaIn in(T, H, K, V, seed);
      const auto fv = random_floats(static_cast<size_t>(T * H * K), seed + 10, -25, 25);
      const auto bv = random_floats(static_cast<size_t>(T * H), seed + 11, -6, 6);
      const auto gatev = random_floats(static_cast<size_t>(T * H * V), seed + 12, -4, 4);
      const auto biasv = random_floats(static_cast<size_t>(H * K), seed + 13, -1, 1);
      const auto alogv = random_floats(static_cast<size_t>(H), seed + 14, -2, 1);
      const auto normv = random_floats(static_cast<size_t>(V), seed + 15, 0.5f, 1.5f);
      seed += 20;
      auto q = both(in.q), k = both(in.k), v = both(in.v), gate = both(gatev), bias = both(biasv), alog = both(alogv),
           norm = both(normv);
      std::vector<float> res[3][4];  // unfused, fused (GPU), CPU: o, state, f, beta
      for (const int run : {0, 1, 2}) {
        Backend& be = run == 2 ? cpu() : gpu();
        auto f = both(fv), b = both(bv), s = both(in.s0);
        auto g = poisoned_pair(static_cast<size_t>(T * H * K)), o = poisoned_pair(static_cast<size_t>(T * H * V));
        auto pick = [&](const Pair& p) { return run == 2 ? p.cpu() : p.gpu(); };
        const KdaDecode a{.q = pick(q), .k = pick(k), .v = pick(v), .f = pick(f), .dt_bias = pick(bias),
                          .a_log = pick(alog), .gp = {.safe_gate = safe, .lower_bound = -5.0f}, .beta = pick(b),
                          .g = pick(g), .T = T, .H = H, .K = K, .V = V, .state = pick(s), .o_norm = pick(norm),
                          .eps = 1e-6f, .gate = pick(gate), .o = pick(o)};
        cuda::kda_fuse_tune(run == 1 ? 1 : 0);
        const int64_t calls = cuda::kda_decode_fused_calls();
        be.kda_decode(a);
        if (run < 2) be.drop_x(a.o);
        EXPECT_EQ(cuda::kda_decode_fused_calls() - calls, run == 1 ? 1 : 0) << "run " << run;
        res[run][0] = get(be, a.o, static_cast<size_t>(T * H * V));
        res[run][1] = get(be, a.state, static_cast<size_t>(H * K * V));
        res[run][2] = get(be, a.f, fv.size());
        res[run][3] = get(be, a.beta, bv.size());
      }
      cuda::kda_fuse_tune(-1);
      const std::string what = "kda_decode T=" + std::to_string(T) + " H=" + std::to_string(H) + " K=" +
                               std::to_string(K) + " V=" + std::to_string(V) + (safe ? " safe" : "");
      EXPECT_TRUE(bits_equal((what + " o").c_str(), res[0][0], res[1][0])) << what;
      EXPECT_TRUE(bits_equal((what + " state").c_str(), res[0][1], res[1][1])) << what;
      EXPECT_TRUE(bits_equal((what + " f").c_str(), res[0][2], res[1][2])) << what;
      EXPECT_TRUE(bits_equal((what + " beta").c_str(), res[0][3], res[1][3])) << what;
      EXPECT_LE(rel_err((what + " o vs cpu").c_str(), res[2][0], res[1][0]), 1e-5) << what;
      EXPECT_LE(rel_err((what + " state vs cpu").c_str(), res[2][1], res[1][1]), 1e-5) << what;
    }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

}  // namespace
}  // namespace ferry::test
