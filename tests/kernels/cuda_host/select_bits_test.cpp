// The DSA indexer's device selection (kernels/cuda/select_bits.cuh), its algorithm run serially on the host: the
// radix passes over the keys and the one pass in position order pick exactly cpu::indexer_select's positions
// (ties by position) for rows full of equal scores, signed zeros, negative scores and every count of visible
// keys around topk. The GPU test (Ops.IndexerTopk*) runs the kernel itself; this pins what it computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/indexer_select.hpp"

#if FERRY_WITH_CUDA
#include "kernels/cuda/select_bits.cuh"
#endif

namespace {

#if FERRY_WITH_CUDA
namespace sel = ferry::cuda::select;

// What indexer_select_kernel computes for one query, one position at a time.
std::vector<int32_t> radix_select(const std::vector<float>& score, int64_t visible, int64_t topk) {
  std::vector<int32_t> out(static_cast<size_t>(topk), -1);
  if (visible <= topk) {
    for (int64_t i = 0; i < visible; ++i) out[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    return out;
  }
  uint32_t prefix = 0, need = static_cast<uint32_t>(topk);
  for (int pass = 0; pass < sel::kPasses; ++pass) {
    uint32_t hist[sel::kBins] = {};
    const int shift = sel::digit_shift(pass);
    const uint32_t hm = sel::high_mask(pass);
    for (int64_t s = 0; s < visible; ++s) {
      const uint32_t k = sel::order_key(score[static_cast<size_t>(s)]);
      if ((k & hm) == (prefix & hm)) ++hist[(k >> shift) & (sel::kBins - 1)];
    }
    prefix |= static_cast<uint32_t>(sel::pick_digit(hist, need)) << shift;
  }
  uint32_t gt = 0, eq = 0;
  for (int64_t s = 0; s < visible; ++s) {
    const uint32_t k = sel::order_key(score[static_cast<size_t>(s)]);
    if (sel::kept(k, prefix, eq, need)) out[sel::out_index(gt, eq, need)] = static_cast<int32_t>(s);
    gt += k > prefix;
    eq += k == prefix;
  }
  return out;
}

TEST(SelectBits, OrderKeysSortAsTheScoresAndMergeTheZeros) {
  const float v[] = {-INFINITY, -3e38f, -2.5f, -1.0f, -1e-40f, 0.0f, 1e-40f, 1.0f, 1.5f, 3e38f, INFINITY};
  for (size_t i = 0; i + 1 < std::size(v); ++i) EXPECT_LT(sel::order_key(v[i]), sel::order_key(v[i + 1])) << v[i];
  EXPECT_EQ(sel::order_key(-0.0f), sel::order_key(0.0f));
}

TEST(SelectBits, RadixSelectPicksTheCpusPositionsForTiesZerosAndEveryVisibleCount) {
  std::mt19937 rng(2048);
  int rows = 0;
  for (const int64_t L : {1, 7, 64, 300, 2500}) {
    for (const int64_t topk : {1, 3, 64, 200, 2048}) {
      for (const int64_t visible : {int64_t{0}, int64_t{1}, topk - 1, topk, topk + 1, L / 2, L}) {
        if (visible < 0 || visible > L) continue;
        for (int kind = 0; kind < 4; ++kind) {
          std::vector<float> score(static_cast<size_t>(L));
          for (float& f : score) {
            const int r = static_cast<int>(rng() % 9);
            switch (kind) {
              case 0: f = std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), -7); break;  // spread
              case 1: f = static_cast<float>(r % 3);  break;                     // three values: ties everywhere
              case 2: f = r == 0 ? -0.0f : r == 1 ? 0.0f : -static_cast<float>(r);  break;  // signed zeros on top
              default: f = 1.0f + std::ldexp(static_cast<float>(rng() % 4), -20);  // equal high bytes, low digits decide
            }
          }
          std::vector<int32_t> idx(static_cast<size_t>(std::max<int64_t>(L, 1))), want(static_cast<size_t>(topk));
          ferry::cpu::indexer_select(score.data(), visible, L, topk, ferry::IndexerTies::by_position, idx.data(),
                                     want.data());
          ASSERT_EQ(radix_select(score, visible, topk), want)
              << "L " << L << " topk " << topk << " visible " << visible << " kind " << kind;
          ++rows;
        }
      }
    }
  }
  EXPECT_GT(rows, 300);
}

// The warps' count of a selection row's leading positions (attention_split_output_kernel): the 32-way search,
// its probes emulated lane by lane, finds every count of every row length, in at most three rounds up to 2,048
// entries and four up to 65,536.
TEST(SelectBits, ThirtyTwoWaySearchCountsTheLeadingPositionsOfEveryRow) {
  int64_t rows = 0;
  for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{100}, int64_t{2048},
                          int64_t{2049}, int64_t{65536}}) {
    std::vector<int64_t> counts{0, 1, 2, n / 2, n - 1, n};
    for (int64_t c = 0; c <= n && n <= 2049; c += 7) counts.push_back(c);
    for (const int64_t count : counts) {
      if (count < 0 || count > n) continue;
      int64_t lo = 0, hi = n;
      int rounds = 0;
      while (lo < hi) {
        ++rounds;
        const int64_t step = sel::count_step(lo, hi);
        int j = 0;  // the kernel's popcount of its ballot
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t p = lo + lane * step;
          if (p < hi && p < count) {
            ASSERT_EQ(j, lane) << "the probes that find a key must lead";
            ++j;
          }
        }
        if (sel::count_narrow(lo, hi, j, step)) break;
        ASSERT_LE(rounds, 8) << "n " << n << " count " << count;
      }
      ASSERT_EQ(lo, count) << "n " << n;
      EXPECT_LE(rounds, n <= 2048 ? 3 : 4) << "n " << n << " count " << count;
      ++rows;
    }
  }
  EXPECT_GT(rows, 300);
}
#else
TEST(SelectBits, NeedsACudaBuild) { GTEST_SKIP() << "no CUDA in this build"; }
#endif

}  // namespace
