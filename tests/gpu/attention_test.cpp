// CUDA against CPU: RoPE, attention (causal, GQA, MQA over a shared latent, DSA selection), the DSA
// indexer in both tie modes, and attention residuals. Random inputs, NaN-poisoned outputs.
#include <numeric>

#include "tests/gpu/gpu_util.hpp"

namespace ferry::test {
namespace {

using Ops = GpuOps;

// Scores are bit-identical to the CPU's (same dot order); exp differs by up to 2 ulp, and the softmax
// and weighted sums are done in the same order: 1e-5 of the output scale is ample.
constexpr double kAttnTol = 1e-5;

TEST_F(Ops, RopeMatchesCpuInBothPairings) {
  const int64_t T = 6, H = 3, hs = 80, ts = H * hs + 5, dim = 64, off = 16;
  std::vector<float> freq(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / dim));
  std::vector<int32_t> pos = {0, 1, 7, 100, 4095, 123456};
  for (bool inter : {false, true}) {
    const auto xv = random_floats(T * ts, inter ? 2 : 1);
    auto x = both(xv);
    RopeParams rp{freq.data(), dim, 1.3f, inter};
    cpu().rope(x.cpu(), T, H, ts, hs, off, pos.data(), rp);
    gpu().rope(x.gpu(), T, H, ts, hs, off, pos.data(), rp);
    auto [c, g] = results(x);
    // cos/sin in double on both, rounded to float: equal except for rare last-bit rounding.
    EXPECT_LE(rel_err(inter ? "rope(interleaved)" : "rope(half split)", c, g), 1e-6);
  }
}

struct AttnCase {
  const char* name;
  int64_t T, L, Hq, Hk, Dk, Dv, pos0;
  bool mqa_latent;  // keys and values share one latent row (head stride 0), as MLA absorbed decode
  bool sel;
};

class AttnCases : public GpuOps, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(AttnCases, MatchesCpu) {
  const AttnCase p = GetParam();
  const int64_t kts = p.mqa_latent ? p.Dk : p.Hk * p.Dk, vts = p.mqa_latent ? p.Dk : p.Hk * p.Dv;
  auto q = both(random_floats(p.T * p.Hq * p.Dk, 1));
  auto k = both(random_floats(p.L * kts, 2));
  auto v = p.mqa_latent ? Pair{} : both(random_floats(p.L * vts, 3));
  std::vector<int32_t> sel;
  const int64_t sk = 24;
  if (p.sel) {  // a random subset of each query's visible keys, -1 padded, ascending
    std::mt19937 rng(4);
    for (int64_t t = 0; t < p.T; ++t) {
      std::vector<int32_t> vis(static_cast<size_t>(p.pos0 + t + 1));
      std::iota(vis.begin(), vis.end(), 0);
      std::shuffle(vis.begin(), vis.end(), rng);
      vis.resize(std::min<size_t>(vis.size(), sk - 3));
      std::sort(vis.begin(), vis.end());
      vis.resize(sk, -1);
      sel.insert(sel.end(), vis.begin(), vis.end());
    }
  }
  auto out = poisoned_pair(p.T * p.Hq * p.Dv);
  std::vector<float> wide;  // the GPU's output with cuda::attention_ilp (4 keys, 4 columns at once)
  for (Backend* be : {gpu_, cpu_, gpu_}) {
    const bool G = be == gpu_;
#if FERRY_WITH_CUDA
    cuda::attention_ilp_tune(G && wide.empty() ? 1 : 0);
#endif
    AttentionArgs a;
    a.q = G ? q.gpu() : q.cpu(); a.q_tok_stride = p.Hq * p.Dk; a.q_head_stride = p.Dk;
    a.k = G ? k.gpu() : k.cpu(); a.k_tok_stride = kts; a.k_head_stride = p.mqa_latent ? 0 : p.Dk;
    if (p.mqa_latent) {
      a.v = a.k; a.v_tok_stride = kts; a.v_head_stride = 0;
    } else {
      a.v = G ? v.gpu() : v.cpu(); a.v_tok_stride = vts; a.v_head_stride = p.Dv;
    }
    a.out = G ? out.gpu() : out.cpu();
    a.T = p.T; a.L = p.L; a.Hq = p.Hq; a.Hk = p.Hk; a.Dk = p.Dk; a.Dv = p.Dv; a.q_pos0 = p.pos0;
    a.scale = 0.125f;
    if (p.sel) { a.sel = sel.data(); a.sel_k = sk; }
    be->attention(a);
    if (G && wide.empty()) {
      wide = get(gpu(), out.gpu(), out.g.size());
      out = poisoned_pair(p.T * p.Hq * p.Dv);
    }
  }
#if FERRY_WITH_CUDA
  cuda::attention_ilp_tune(-1);
#endif
  auto [c, g] = results(out);
  EXPECT_LE(rel_err(p.name, c, g), kAttnTol);
  EXPECT_TRUE(bits_equal((std::string(p.name) + ": 4 keys and columns at once vs one").c_str(), wide, g));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttnCases,
    ::testing::Values(AttnCase{"attention prefill mha", 33, 33, 4, 4, 64, 64, 0, false, false},
                      AttnCase{"attention decode gqa 8/2", 3, 300, 8, 2, 128, 128, 297, false, false},
                      AttnCase{"attention mqa latent", 4, 200, 16, 1, 576, 512, 196, true, false},
                      AttnCase{"attention dsa selection", 5, 90, 8, 1, 72, 64, 85, true, true}),
    [](const auto& info) { return std::to_string(info.index); });

// The layout of the kernel-variant tests below: q [T, Hq, Dk]; keys and values [L] rows of Hk heads each, or
// (latent) MQA over one row of Dk floats a position whose first Dv are the values (head strides 0).
struct AttnLayout {
  int64_t T, L, Hq, Hk, Dk, Dv;
  bool latent;
  int64_t kts() const { return latent ? Dk : Hk * Dk; }
  int64_t vts() const { return latent ? Dk : Hk * Dv; }
  // v is ignored when latent (the values are the key rows).
  AttentionArgs args(const float* q, const float* k, const float* v, float* out, int64_t pos0, float scale) const {
    AttentionArgs a;
    a.q = q; a.q_tok_stride = Hq * Dk; a.q_head_stride = Dk;
    a.k = k; a.k_tok_stride = kts(); a.k_head_stride = latent ? 0 : Dk;
    a.v = latent ? k : v; a.v_tok_stride = latent ? kts() : vts(); a.v_head_stride = latent ? 0 : Dv;
    a.out = out;
    a.T = T; a.L = L; a.Hq = Hq; a.Hk = Hk; a.Dk = Dk; a.Dv = Dv; a.q_pos0 = pos0;
    a.scale = scale;
    return a;
  }
};

// Dense causal attention of several queries runs 8 (or 16) queries of a head per block
// (attention_multi_kernel; with keys up to 256 wide and attention_reg, attention_multi_reg_kernel: the query
// rows in registers, the grid head-major, the scores folded by warp_fold or through shared memory) with the
// bits of a block per query: a prompt pass of K3.1's MLA shape (keys 192, values 128; 152 rows: the output's
// float4 loads of the probabilities), a chunk
// that continues a cached prefix with GQA heads (queries not a multiple of 8), MQA latent rows (head stride
// 0, 576-wide keys), a DSA selection of every visible key (dense: the multi kernel) and one of a subset
// (the one-query kernel either way).
TEST_F(Ops, AttentionOfEightQueriesPerBlockGivesTheBitsOfABlockPerQuery) {
#if FERRY_WITH_CUDA
  struct Case {
    const char* name;
    int64_t T, L, Hq, Hk, Dk, Dv, pos0;
    bool latent;
    int sel;  // 0 none, 1 every visible key, 2 a subset
  };
  for (const Case& p : {Case{"mla prefill", 37, 37, 4, 4, 192, 128, 0, false, 0},
                       Case{"long mla prefill", 152, 152, 2, 2, 192, 128, 0, false, 0},
                       Case{"gqa chunk after a prefix", 21, 50, 8, 2, 64, 64, 29, false, 0},
                       Case{"mqa latent", 13, 13, 4, 1, 576, 512, 0, true, 0},
                       Case{"dsa every key", 19, 19, 4, 4, 72, 64, 0, false, 1},
                       Case{"dsa subset", 19, 19, 4, 4, 72, 64, 0, false, 2}}) {
    const AttnLayout lay{p.T, p.L, p.Hq, p.Hk, p.Dk, p.Dv, p.latent};
    auto q = both(random_floats(p.T * p.Hq * p.Dk, 11));
    auto k = both(random_floats(p.L * lay.kts(), 12));
    auto v = p.latent ? Pair{} : both(random_floats(p.L * lay.vts(), 13));
    const int64_t sk = 32;
    std::vector<int32_t> sel(static_cast<size_t>(p.T * sk), -1);
    // Only the selection cases fill it (their visible keys fit sk); the dense ones may see more keys than sk.
    for (int64_t t = 0; p.sel && t < p.T; ++t)
      for (int64_t i = 0, c = 0; i <= p.pos0 + t; ++i)
        if (p.sel == 1 || i % 3 != 1) {
          ASSERT_LT(c, sk) << p.name << ": the test's selection overflows its row";
          sel[static_cast<size_t>(t * sk + c++)] = static_cast<int32_t>(i);
        }
    // A block per query, 8 queries per block, 16, 8 with the query rows in registers (warp_fold), the same with
    // a round's scores folded through shared memory, and with each query's sum of p taken once.
    std::vector<float> res[6];
    for (const int multi : {0, 1, 2, 3, 4, 5}) {
      cuda::attention_multi_tune(multi == 2 ? 16 : multi >= 3 ? 8 : multi);
      cuda::attention_reg_tune(multi >= 3 ? multi - 2 : 0);
      auto out = poisoned_pair(p.T * p.Hq * p.Dv);
      AttentionArgs a = lay.args(q.gpu(), k.gpu(), v.gpu(), out.gpu(), p.pos0, 0.125f);
      if (p.sel) { a.sel = sel.data(); a.sel_k = sk; }
      gpu().attention(a);
      res[multi] = get(gpu(), out.gpu(), out.g.size());
    }
    EXPECT_TRUE(bits_equal((std::string(p.name) + ": 8 queries per block vs 1").c_str(), res[0], res[1])) << p.name;
    EXPECT_TRUE(bits_equal((std::string(p.name) + ": 16 queries per block vs 1").c_str(), res[0], res[2])) << p.name;
    EXPECT_TRUE(bits_equal((std::string(p.name) + ": 8 queries per block, rows in registers, vs 1").c_str(), res[0],
                           res[3]))
        << p.name;
    EXPECT_TRUE(bits_equal((std::string(p.name) + ": rows in registers, scores folded in shared memory, vs 1").c_str(),
                           res[0], res[4]))
        << p.name;
    EXPECT_TRUE(bits_equal((std::string(p.name) + ": the same, each query's sum taken once, vs 1").c_str(), res[0],
                           res[5]))
        << p.name;
  }
  cuda::attention_multi_tune(-1);
  cuda::attention_reg_tune(-1);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// Attention split over keys and columns (cuda::attention_split: attention_split_scores_kernel and
// attention_split_output_kernel) gives the bits of a block per (query, head): MLA's decode shape over a host
// selection of 1,400 of 2,100 keys (96 heads sharing one 576-wide latent row, values its first 512 floats), a
// verify block over indexer_topk's kind of device selection (leading positions, then -1; rows of 0, 1, 33 and
// 2,048 keys: the warps' 32-way count), one query of dense GQA at 700 keys, and odd widths (keys of 80 floats,
// values of 36, 5 heads) under a host selection; each case must take the split path (attention_split_calls).
TEST_F(Ops, AttentionSplitOverKeysHasTheBitsOfABlockPerHead) {
#if FERRY_WITH_CUDA
  struct Case {
    const char* name;
    int64_t T, L, Hq, Hk, Dk, Dv, sk;
    bool latent;
    int sel;  // 0 none (dense), 1 a host selection of every key but each third, 2 a device selection (counts)
    std::vector<int64_t> counts;  // sel 2: each row's leading keys
  };
  const Case cases[] = {
      {"mla decode, 1,400 of 2,100 keys", 1, 2100, 96, 1, 576, 512, 2048, true, 1, {}},
      {"mla verify block, device selection", 4, 2100, 16, 1, 576, 512, 2048, true, 2, {0, 1, 33, 2048}},
      {"gqa dense, one query at 700 keys", 1, 700, 8, 2, 64, 64, 0, false, 0, {}},
      {"odd widths, host selection", 3, 400, 5, 1, 80, 36, 300, false, 1, {}}};
  for (const Case& p : cases) {
    const AttnLayout lay{p.T, p.L, p.Hq, p.Hk, p.Dk, p.Dv, p.latent};
    const int64_t pos0 = p.L - p.T;
    auto q = both(random_floats(p.T * p.Hq * p.Dk, 21));
    auto k = both(random_floats(p.L * lay.kts(), 22));
    auto v = p.latent ? Pair{} : both(random_floats(p.L * lay.vts(), 23));
    std::vector<int32_t> sel(static_cast<size_t>(p.T * std::max<int64_t>(p.sk, 1)), -1);
    for (int64_t t = 0; p.sel && t < p.T; ++t) {
      const int64_t last = pos0 + t;
      if (p.sel == 1) {
        for (int64_t i = 0, c = 0; i <= last && c < p.sk; ++i)
          if (i % 3 != 1) sel[static_cast<size_t>(t * p.sk + c++)] = static_cast<int32_t>(i);
      } else {
        const int64_t n = p.counts[static_cast<size_t>(t)];
        ASSERT_LE(n, last + 1) << p.name;
        for (int64_t c = 0; c < n; ++c)  // ascending, spread over the visible keys
          sel[static_cast<size_t>(t * p.sk + c)] = static_cast<int32_t>(c * (last + 1) / n);
      }
    }
    Buf dsel(gpu(), sel.size());  // float-sized slots hold the int32 positions
    gpu().upload(dsel.get(), sel.data(), sel.size() * sizeof(int32_t));
    std::vector<float> res[2];
    for (const int split : {0, 1}) {
      cuda::attention_split_tune(split);
      const int64_t calls = cuda::attention_split_calls();
      auto out = poisoned_pair(p.T * p.Hq * p.Dv);
      AttentionArgs a = lay.args(q.gpu(), k.gpu(), v.gpu(), out.gpu(), pos0, 0.0625f);
      if (p.sel == 1) { a.sel = sel.data(); a.sel_k = p.sk; }
      if (p.sel == 2) { a.sel = reinterpret_cast<const int32_t*>(dsel.get()); a.sel_k = p.sk; a.sel_ascending = true; }
      gpu().attention(a);
      res[split] = get(gpu(), out.gpu(), out.g.size());
      EXPECT_EQ(cuda::attention_split_calls() > calls, split == 1) << p.name << ": the split path ran iff on";
    }
    EXPECT_TRUE(bits_equal((std::string(p.name) + ": split over keys vs a block per head").c_str(), res[0], res[1]))
        << p.name;
    if (p.sel == 2) {  // a row of no keys gives zeros
      for (int64_t j = 0; j < p.Hq * p.Dv; ++j) ASSERT_EQ(res[1][static_cast<size_t>(j)], 0.0f) << p.name;
    }
  }
  cuda::attention_split_tune(-1);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// A DSA selection of every visible key, in order, gives dense causal attention's bits (the model passes no
// selection while the context fits index_topk): a decode row (attention_kernel) and a prompt pass of 19
// rows (attention_multi_kernel), with 4 key/value heads.
TEST_F(Ops, AttentionWithEveryVisibleKeySelectedHasTheDenseBits) {
  for (const int64_t T : {int64_t{1}, int64_t{19}}) {
    const int64_t L = 40, Hq = 8, Hk = 4, Dk = 72, Dv = 64, pos0 = L - T, sk = 48;
    auto q = both(random_floats(T * Hq * Dk, 21));
    auto k = both(random_floats(L * Hk * Dk, 22));
    auto v = both(random_floats(L * Hk * Dv, 23));
    std::vector<int32_t> sel(static_cast<size_t>(T * sk), -1);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i <= pos0 + t; ++i) sel[static_cast<size_t>(t * sk + i)] = static_cast<int32_t>(i);
    std::vector<float> res[2];
    for (const int selected : {0, 1}) {
      auto out = poisoned_pair(T * Hq * Dv);
      AttentionArgs a;
      a.q = q.gpu(); a.q_tok_stride = Hq * Dk; a.q_head_stride = Dk;
      a.k = k.gpu(); a.k_tok_stride = Hk * Dk; a.k_head_stride = Dk;
      a.v = v.gpu(); a.v_tok_stride = Hk * Dv; a.v_head_stride = Dv;
      a.out = out.gpu();
      a.T = T; a.L = L; a.Hq = Hq; a.Hk = Hk; a.Dk = Dk; a.Dv = Dv; a.q_pos0 = pos0;
      a.scale = 0.125f;
      if (selected) { a.sel = sel.data(); a.sel_k = sk; }
      gpu().attention(a);
      res[selected] = get(gpu(), out.gpu(), out.g.size());
    }
    EXPECT_TRUE(bits_equal(("every key selected vs dense, T=" + std::to_string(T)).c_str(), res[0], res[1]));
  }
}

// The indexer's scores are computed in the CPU's exact order, and the selection is the CPU's own code:
// the selected positions are identical in both tie modes, also when exact ties (all-negative dots
// giving score 0) are everywhere, and whether `sel` is host or device memory.
TEST_F(Ops, IndexerTopkSelectsTheSameKeysInBothTieModesForEveryHeadCount) {
  const int64_t T = 6, L = 300, Hi = 2, Di = 32, pos0 = L - T, topk = 200;  // deep into the score-0 ties
  auto q = both(random_floats(T * Hi * Di, 5)), k = both(random_floats(L * Di, 6));
  auto w = both(random_floats(T * Hi, 7, 0.1f, 1.0f));
  for (IndexerTies ties : {IndexerTies::by_position, IndexerTies::torch_cpu}) {
    std::vector<int32_t> sc(T * topk, -7), sg(T * topk, -7);
    cpu().indexer_topk(q.cpu(), k.cpu(), w.cpu(), T, L, Hi, Di, pos0, topk, sc.data(), ties);
    gpu().indexer_topk(q.gpu(), k.gpu(), w.gpu(), T, L, Hi, Di, pos0, topk, sg.data(), ties);
    EXPECT_EQ(sc, sg) << "ties mode " << int(ties);
    int64_t chosen = 0;
    for (int32_t s : sc) chosen += s >= 0;
    std::printf("[gpu-op] indexer_topk ties=%d: %lld selected, identical=%d\n", int(ties),
                static_cast<long long>(chosen), int(sc == sg));
  }
  // The kernel takes 1 or 8 heads at a time (cuda::attention_ilp): K3.1's 64 x 128, one group of 8 plus a
  // partial one, fewer than 8. With 64 heads ties are rare, so equal selections of 200 of 300 keys need the
  // CPU's scores to the bit.
  for (const int ilp : {0, 1})
  for (const auto& [hi, di] : {std::pair<int64_t, int64_t>{64, 128}, {10, 128}, {2, 32}}) {
#if FERRY_WITH_CUDA
    cuda::attention_ilp_tune(ilp);
#endif
    auto qh = both(random_floats(T * hi * di, 15)), kh = both(random_floats(L * di, 16));
    auto wh = both(random_floats(T * hi, 17, 0.1f, 1.0f));
    std::vector<int32_t> sc(T * topk, -7), sg(T * topk, -7);
    cpu().indexer_topk(qh.cpu(), kh.cpu(), wh.cpu(), T, L, hi, di, pos0, topk, sc.data(), IndexerTies::by_position);
    gpu().indexer_topk(qh.gpu(), kh.gpu(), wh.gpu(), T, L, hi, di, pos0, topk, sg.data(), IndexerTies::by_position);
    EXPECT_EQ(sc, sg) << hi << " heads of " << di << ", 8 heads at once: " << ilp;
  }
#if FERRY_WITH_CUDA
  cuda::attention_ilp_tune(-1);
#endif
  // Device-memory sel.
  Buf dsel(gpu(), static_cast<size_t>(T * topk));  // float-sized slots hold the int32 ids
  auto* dp = reinterpret_cast<int32_t*>(dsel.get());
  gpu().indexer_topk(q.gpu(), k.gpu(), w.gpu(), T, L, Hi, Di, pos0, topk, dp, IndexerTies::by_position);
  std::vector<int32_t> back(T * topk), sc(T * topk);
  gpu().download(back.data(), dp, back.size() * 4);
  cpu().indexer_topk(q.cpu(), k.cpu(), w.cpu(), T, L, Hi, Di, pos0, topk, sc.data(), IndexerTies::by_position);
  EXPECT_EQ(sc, back);
}

// The selection on the device (cuda::device_select: attention.cu indexer_select_kernel, select_bits.cuh) picks the
// CPU's positions: queries whose visible keys fit topk and queries with far more (a radix select over 5,000
// scores), rows on both sides of topk in one call, scores full of exact ties (2 heads: every key whose dots are
// all negative scores 0), K3.1's 64 heads (few ties: the low digits decide), into host and device memory. Then
// attention takes that device selection as it stands (AttentionArgs::sel_ascending: no download, check or
// compaction) with the bits of the checked path.
TEST_F(Ops, IndexerSelectionOnTheDevicePicksTheCpusPositionsAndAttentionTakesItAsItStands) {
#if FERRY_WITH_CUDA
  struct Shape { int64_t T, L, Hi, Di, topk; };
  for (const Shape sh : {Shape{6, 300, 2, 32, 200}, Shape{5, 5000, 2, 32, 2048}, Shape{3, 5000, 64, 128, 2048},
                         Shape{8, 2052, 8, 64, 2048}, Shape{2, 70, 2, 32, 1}}) {
    const int64_t pos0 = sh.L - sh.T;
    auto q = both(random_floats(sh.T * sh.Hi * sh.Di, 31)), k = both(random_floats(sh.L * sh.Di, 32));
    auto w = both(random_floats(sh.T * sh.Hi, 33, 0.1f, 1.0f));
    std::vector<int32_t> want(static_cast<size_t>(sh.T * sh.topk), -7), host(want.size(), -7), back(want.size(), -7);
    cpu().indexer_topk(q.cpu(), k.cpu(), w.cpu(), sh.T, sh.L, sh.Hi, sh.Di, pos0, sh.topk, want.data(),
                       IndexerTies::by_position);
    cuda::device_select_tune(1);
    gpu().indexer_topk(q.gpu(), k.gpu(), w.gpu(), sh.T, sh.L, sh.Hi, sh.Di, pos0, sh.topk, host.data(),
                       IndexerTies::by_position);
    Buf dsel(gpu(), want.size());
    auto* dp = reinterpret_cast<int32_t*>(dsel.get());
    gpu().indexer_topk(q.gpu(), k.gpu(), w.gpu(), sh.T, sh.L, sh.Hi, sh.Di, pos0, sh.topk, dp, IndexerTies::by_position);
    gpu().download(back.data(), dp, back.size() * 4);
    EXPECT_EQ(host, want) << "T " << sh.T << " L " << sh.L << " heads " << sh.Hi << " topk " << sh.topk;
    EXPECT_EQ(back, want) << "device memory: T " << sh.T << " L " << sh.L << " heads " << sh.Hi;
    // Attention over the selection: MQA over one key head (MLA's absorbed decode shape, narrowed).
    const int64_t Hq = 4, Dk = 64, Dv = 48;
    auto aq = both(random_floats(sh.T * Hq * Dk, 34)), ak = both(random_floats(sh.L * Dk, 35));
    auto av = both(random_floats(sh.L * Dv, 36));
    std::vector<float> res[2];
    for (const int trusted : {0, 1}) {
      cuda::device_select_tune(trusted);
      auto out = poisoned_pair(sh.T * Hq * Dv);
      AttentionArgs a;
      a.q = aq.gpu(); a.q_tok_stride = Hq * Dk; a.q_head_stride = Dk;
      a.k = ak.gpu(); a.k_tok_stride = Dk; a.k_head_stride = 0;
      a.v = av.gpu(); a.v_tok_stride = Dv; a.v_head_stride = 0;
      a.out = out.gpu();
      a.T = sh.T; a.L = sh.L; a.Hq = Hq; a.Hk = 1; a.Dk = Dk; a.Dv = Dv; a.q_pos0 = pos0;
      a.scale = 0.125f;
      a.sel = dp; a.sel_k = sh.topk; a.sel_ascending = true;
      gpu().attention(a);
      res[trusted] = get(gpu(), out.gpu(), out.g.size());
    }
    EXPECT_TRUE(bits_equal(("the device selection as it stands vs checked, L=" + std::to_string(sh.L)).c_str(), res[0],
                           res[1]));
    int64_t chosen = 0;
    for (int32_t s : want) chosen += s >= 0;
    std::printf("[gpu-op] device selection T=%lld L=%lld heads=%lld topk=%lld: %lld selected, identical=%d\n",
                static_cast<long long>(sh.T), static_cast<long long>(sh.L), static_cast<long long>(sh.Hi),
                static_cast<long long>(sh.topk), static_cast<long long>(chosen), int(host == want && back == want));
  }
  cuda::device_select_tune(-1);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

// A decode row of K3's width with 2 and 16 inputs, rows longer than the kernel's registers hold.
TEST_F(Ops, AttnResMatchesCpu) {
  struct Shape { int64_t T, D, nv; };
  for (const Shape sh : {Shape{5, 777, 4}, Shape{1, 7168, 2}, Shape{3, 7168, 16}, Shape{3, 7168, 17}, Shape{2, 9000, 3}}) {
    std::vector<Pair> vs;
    for (int s = 0; s < sh.nv; ++s) vs.push_back(both(random_floats(sh.T * sh.D, 10 + s, -2, 2)));
    auto w = both(random_floats(sh.D, 20));
    auto out = poisoned_pair(sh.T * sh.D);
    std::vector<const float*> pc, pg;
    for (auto& p : vs) pc.push_back(p.cpu()), pg.push_back(p.gpu());
    cpu().attn_res(pc.data(), sh.nv, w.cpu(), sh.T, sh.D, 1e-6f, out.cpu());
    gpu().attn_res(pg.data(), sh.nv, w.gpu(), sh.T, sh.D, 1e-6f, out.gpu());
    auto [c, g] = results(out);
    const std::string what = "attn_res T=" + std::to_string(sh.T) + " D=" + std::to_string(sh.D) +
                             " nv=" + std::to_string(sh.nv);
    EXPECT_LE(rel_err(what.c_str(), c, g), kAttnTol) << what;  // double scores (other order), expf, same output order
  }
}

// Backend::attn_res_norm (CUDA: AttnRes, the rmsnorm of its output and the decode matmuls' preparation in
// one launch, a block per row) has the bits of attn_res then rmsnorm on the same back-end: 1 to 32 inputs
// (33: the unfused ops), rows the kernel's registers hold and longer ones (9000: unfused), 1 to 16 rows,
// with and without the norm's weight.
TEST_F(Ops, AttnResNormGivesTheBitsOfAttnResThenRmsnorm) {
  struct Shape { int64_t T, D, nv; bool weight; };
  for (const Shape sh : {Shape{1, 7168, 2, true}, Shape{3, 7168, 16, true}, Shape{2, 7168, 32, true},
                         Shape{2, 7168, 33, true}, Shape{16, 7168, 1, true}, Shape{5, 777, 4, false},
                         Shape{2, 9000, 3, true}, Shape{1, 8192, 5, false}}) {
    std::vector<Pair> vs;
    for (int s = 0; s < sh.nv; ++s) vs.push_back(both(random_floats(sh.T * sh.D, 30 + s, -2, 2)));
    auto w = both(random_floats(sh.D, 21));
    auto nw = both(random_floats(sh.D, 22, 0.5f, 1.5f));
    std::vector<const float*> pg;
    for (auto& p : vs) pg.push_back(p.gpu());
    const float* nwg = sh.weight ? nw.gpu() : nullptr;
    auto out_ref = poisoned_pair(sh.T * sh.D), y_ref = poisoned_pair(sh.T * sh.D);
    gpu().attn_res(pg.data(), sh.nv, w.gpu(), sh.T, sh.D, 1e-6f, out_ref.gpu());
    gpu().rmsnorm(out_ref.gpu(), nwg, sh.T, sh.D, 1e-5f, y_ref.gpu());
    auto out = poisoned_pair(sh.T * sh.D), y = poisoned_pair(sh.T * sh.D);
    gpu().attn_res_norm(pg.data(), sh.nv, w.gpu(), sh.T, sh.D, 1e-6f, out.gpu(), nwg, 1e-5f, y.gpu());
    gpu().drop_x(y.gpu());
    const std::string what = "attn_res_norm T=" + std::to_string(sh.T) + " D=" + std::to_string(sh.D) +
                             " nv=" + std::to_string(sh.nv) + (sh.weight ? "" : " no weight");
    EXPECT_TRUE(bits_equal((what + " out").c_str(), get(gpu(), out_ref.gpu(), out_ref.g.size()),
                           get(gpu(), out.gpu(), out.g.size())))
        << what;
    EXPECT_TRUE(bits_equal((what + " y").c_str(), get(gpu(), y_ref.gpu(), y_ref.g.size()), get(gpu(), y.gpu(), y.g.size())))
        << what;
  }
}

// The cluster kernel (row_norm.cu: a row's parts of 1,024 on up to 8 blocks that add their sums through
// distributed shared memory) and the one-block kernels (FERRY_ROW_CLUSTER=0: rmsnorm_kernel,
// attn_res_scores_kernel + attn_res_mix_kernel) add in the same part order (row_norm.cuh): the same bits for
// rmsnorm (with and without a weight), attn_res and attn_res_norm, for rows of one part, one part and one
// more element, several parts and the most the cluster takes (8,192), 1 to 32 inputs; and every row of a
// block of rows has the bits of that row alone. Variant 3, the push exchange (row_push_tune: part sums
// stored into every block by st.async, an mbarrier per reduction), gives the same bits.
TEST_F(Ops, RowNormClusterGivesTheBitsOfOneBlockPerRow) {
  for (const int64_t D : {257, 1000, 1024, 1025, 3000, 7168, 8192})
    for (const int64_t T : {1, 5})
      for (const int64_t nv : {1, 3, 32}) {
        const size_t nd = static_cast<size_t>(T * D);
        std::vector<Pair> vs;
        for (int64_t s = 0; s < nv; ++s)
          vs.push_back(both(random_floats(nd, 40 + static_cast<uint32_t>(s + D), -2, 2)));
        auto w = both(random_floats(static_cast<size_t>(D), 23));
        auto nw = both(random_floats(static_cast<size_t>(D), 24, 0.5f, 1.5f));
        std::vector<const float*> pg;
        for (auto& p : vs) pg.push_back(p.gpu());
        // [0]: the cluster kernel, [1]: one block per row, [2]: the cluster kernel with AttnRes's inputs in
        // registers (row_reg_inputs_tune), [3]: [2] with the push exchange (row_push_tune).
        std::vector<float> y[4], yn[4], o[4], h[4], x[4];
        for (const int variant : {0, 1, 2, 3}) {
          const int one_block = variant == 1 ? 1 : 0;
          cuda::rownorm::row_cluster_tune(one_block ? 0 : 1);
          cuda::rownorm::row_reg_inputs_tune(variant >= 2 ? 1 : 0);
          cuda::rownorm::row_push_tune(variant == 3 ? 1 : 0);
          auto a = poisoned_pair(nd), b = poisoned_pair(nd), c = poisoned_pair(nd), d = poisoned_pair(nd),
               e = poisoned_pair(nd);
          gpu().rmsnorm(pg[0], nw.gpu(), T, D, 1e-5f, a.gpu());
          gpu().rmsnorm(pg[0], nullptr, T, D, 1e-5f, b.gpu());
          gpu().attn_res(pg.data(), nv, w.gpu(), T, D, 1e-6f, c.gpu());
          gpu().attn_res_norm(pg.data(), nv, w.gpu(), T, D, 1e-6f, d.gpu(), nw.gpu(), 1e-5f, e.gpu());
          gpu().drop_x(e.gpu());
          y[variant] = get(gpu(), a.gpu(), nd);
          yn[variant] = get(gpu(), b.gpu(), nd);
          o[variant] = get(gpu(), c.gpu(), nd);
          h[variant] = get(gpu(), d.gpu(), nd);
          x[variant] = get(gpu(), e.gpu(), nd);
          if (T > 1 && !one_block) {  // row 3 alone
            const int64_t r = 3;
            std::vector<const float*> pr;
            for (const float* q : pg) pr.push_back(q + r * D);
            auto ya = poisoned_pair(static_cast<size_t>(D)), oa = poisoned_pair(static_cast<size_t>(D));
            gpu().rmsnorm(pr[0], nw.gpu(), 1, D, 1e-5f, ya.gpu());
            gpu().attn_res(pr.data(), nv, w.gpu(), 1, D, 1e-6f, oa.gpu());
            const std::vector<float> yr(y[variant].begin() + r * D, y[variant].begin() + (r + 1) * D);
            const std::vector<float> orow(o[variant].begin() + r * D, o[variant].begin() + (r + 1) * D);
            EXPECT_TRUE(bits_equal("rmsnorm row alone", yr, get(gpu(), ya.gpu(), static_cast<size_t>(D)))) << D;
            EXPECT_TRUE(bits_equal("attn_res row alone", orow, get(gpu(), oa.gpu(), static_cast<size_t>(D)))) << D;
          }
        }
        const std::string what =
            "D=" + std::to_string(D) + " T=" + std::to_string(T) + " nv=" + std::to_string(nv);
        EXPECT_TRUE(bits_equal(("rmsnorm " + what).c_str(), y[0], y[1])) << what;
        EXPECT_TRUE(bits_equal(("rmsnorm no weight " + what).c_str(), yn[0], yn[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res " + what).c_str(), o[0], o[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res_norm out " + what).c_str(), h[0], h[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res_norm y " + what).c_str(), x[0], x[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res registers " + what).c_str(), o[2], o[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res_norm out registers " + what).c_str(), h[2], h[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res_norm y registers " + what).c_str(), x[2], x[1])) << what;
        EXPECT_TRUE(bits_equal(("rmsnorm push " + what).c_str(), y[3], y[1])) << what;
        EXPECT_TRUE(bits_equal(("rmsnorm no weight push " + what).c_str(), yn[3], yn[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res push " + what).c_str(), o[3], o[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res_norm out push " + what).c_str(), h[3], h[1])) << what;
        EXPECT_TRUE(bits_equal(("attn_res_norm y push " + what).c_str(), x[3], x[1])) << what;
      }
  cuda::rownorm::row_cluster_tune(-1);
  cuda::rownorm::row_reg_inputs_tune(-1);
  cuda::rownorm::row_push_tune(-1);
}

// Backend::add_attn_res_norm (CUDA under FERRY_FUSE_ADD=1: p += a in the cluster kernel's launch) gives p,
// AttnRes's output and the norm's the bits of add then attn_res_norm, for 1 to 32 inputs, rows of one part
// and of several, 1 and 5 rows; the kept y feeds a matmul as the unfused one does.
TEST_F(Ops, AddAttnResNormGivesTheBitsOfAddThenAttnResNorm) {
  for (const int64_t D : {1000, 7168})
    for (const int64_t T : {1, 5})
      for (const int64_t nv : {1, 3, 32}) {
        const size_t nd = static_cast<size_t>(T * D);
        const auto pv = random_floats(nd, 70 + static_cast<uint32_t>(D), -2, 2);
        auto a = both(random_floats(nd, 71, -2, 2));
        std::vector<Pair> blocks;
        for (int64_t s = 0; s + 1 < nv; ++s) blocks.push_back(both(random_floats(nd, 72 + static_cast<uint32_t>(s), -2, 2)));
        auto w = both(random_floats(static_cast<size_t>(D), 25));
        auto nw = both(random_floats(static_cast<size_t>(D), 26, 0.5f, 1.5f));
        std::vector<float> p[4], h[4], x[4];
        // 2: fused, AttnRes's inputs in registers (row_reg_inputs_tune); 3: 2 with the push exchange (row_push_tune)
        for (const int fused : {0, 1, 2, 3}) {
          cuda::rownorm::fused_add_tune(fused > 0);
          cuda::rownorm::row_reg_inputs_tune(fused >= 2);
          cuda::rownorm::row_push_tune(fused == 3);
          auto pp = both(pv);
          auto hh = poisoned_pair(nd), xx = poisoned_pair(nd);
          std::vector<const float*> vs;
          for (auto& b : blocks) vs.push_back(b.gpu());
          vs.push_back(pp.gpu());
          gpu().add_attn_res_norm(pp.gpu(), a.gpu(), vs.data(), nv, w.gpu(), T, D, 1e-6f, hh.gpu(), nw.gpu(), 1e-5f,
                                  xx.gpu());
          gpu().drop_x(xx.gpu());
          p[fused] = get(gpu(), pp.gpu(), nd);
          h[fused] = get(gpu(), hh.gpu(), nd);
          x[fused] = get(gpu(), xx.gpu(), nd);
        }
        cuda::rownorm::fused_add_tune(-1);
        cuda::rownorm::row_reg_inputs_tune(-1);
        cuda::rownorm::row_push_tune(-1);
        const std::string what = "D=" + std::to_string(D) + " T=" + std::to_string(T) + " nv=" + std::to_string(nv);
        for (const int v : {1, 2, 3}) {
          EXPECT_TRUE(bits_equal(("p " + what).c_str(), p[0], p[v])) << what << " " << v;
          EXPECT_TRUE(bits_equal(("out " + what).c_str(), h[0], h[v])) << what << " " << v;
          EXPECT_TRUE(bits_equal(("y " + what).c_str(), x[0], x[v])) << what << " " << v;
        }
      }
}

}  // namespace
}  // namespace ferry::test
