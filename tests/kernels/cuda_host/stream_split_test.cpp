// The stream split's partition (kernels/cuda/splitk.cuh: a matrix's units dealt to W workers in equal runs,
// a tile's parts where the runs cut it), checked on the host: the same functions the GPU kernel
// (matmul_q8t.cuh stream_body) uses to find each item's part and part count. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#if FERRY_WITH_CUDA
#include "kernels/cuda/splitk.cuh"
#endif

namespace {

#if FERRY_WITH_CUDA
using ferry::cuda::splitk::stream_max_parts;
using ferry::cuda::splitk::stream_start;
using ferry::cuda::splitk::stream_worker;

// Walks every worker's run as stream_body does (one item per tile the run touches) and checks that each
// tile's items are its parts 0 .. parts - 1 in column order, cover the tile once, agree on the part count, and
// that no tile has more parts than stream_max_parts (the scratch the back-end allocates).
void check_partition(int64_t tiles, int64_t U, int64_t W) {
  const int64_t L = tiles * U;
  ASSERT_GE(L, W);
  struct Piece { int64_t b, k0, k1; int part, parts; };
  std::vector<std::vector<Piece>> per_tile(static_cast<size_t>(tiles));
  for (int64_t b = 0; b < W; ++b) {
    int64_t x = stream_start(b, L, W);
    const int64_t end = stream_start(b + 1, L, W);
    ASSERT_LT(x, end) << "worker " << b << " has an empty run";
    EXPECT_EQ(stream_worker(x, L, W), b);
    EXPECT_EQ(stream_worker(end - 1, L, W), b);
    while (x < end) {
      const int64_t t = x / U, t0 = t * U, e = std::min(end, t0 + U);
      const int64_t first = stream_worker(t0, L, W);
      const int parts = static_cast<int>(stream_worker(t0 + U - 1, L, W) - first + 1);
      per_tile[static_cast<size_t>(t)].push_back({b, x - t0, e - t0, static_cast<int>(b - first), parts});
      x = e;
    }
  }
  const int most = stream_max_parts(L, U, W);
  for (int64_t t = 0; t < tiles; ++t) {
    const auto& ps = per_tile[static_cast<size_t>(t)];
    ASSERT_FALSE(ps.empty()) << "tile " << t;
    int64_t k = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(ps[i].part, static_cast<int>(i)) << "tile " << t << " piece " << i << " (T " << tiles << ", U " << U << ", W " << W << ")";
      EXPECT_EQ(ps[i].parts, static_cast<int>(ps.size())) << "tile " << t;
      EXPECT_EQ(ps[i].k0, k) << "tile " << t << " piece " << i;
      EXPECT_GT(ps[i].k1, ps[i].k0);
      k = ps[i].k1;
    }
    EXPECT_EQ(k, U) << "tile " << t << " not covered";
    EXPECT_LE(static_cast<int>(ps.size()), most) << "tile " << t << " (T " << tiles << ", U " << U << ", W " << W << ")";
  }
}
#endif

}  // namespace

TEST(StreamSplit, EveryTileIsCutIntoItsPartsInColumnOrderWithinTheScratchBound) {
#if FERRY_WITH_CUDA
  // The K3.1 slice's shapes under the rule's 528 workers (units of 256 columns: 7168x12288, 7168x33792,
  // 7168x6144, 7168x3584, 3584x7168, 6144x7168), and small ones with few and many workers, as the GPU test's.
  for (const auto& [tiles, U] : {std::pair<int64_t, int64_t>{448, 48}, {448, 132}, {448, 24}, {448, 14}, {224, 28},
                                 {384, 28}, {768, 28}, {1152, 6}})
    check_partition(tiles, U, ferry::cuda::splitk::kStreamWorkers);
  for (const auto& [tiles, U] : {std::pair<int64_t, int64_t>{3, 3}, {4, 10}, {8, 28}, {7, 14}})
    for (int64_t W = 1; W <= tiles * U; ++W) check_partition(tiles, U, W);
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}

TEST(StreamSplit, NoTileIsCutWhenTheWorkersAreOneOrTheTiles) {
#if FERRY_WITH_CUDA
  for (const auto& [tiles, U] : {std::pair<int64_t, int64_t>{3, 3}, {448, 48}, {7, 14}})
    for (const int64_t W : {int64_t{1}, tiles}) {
      const int64_t L = tiles * U;
      for (int64_t t = 0; t < tiles; ++t)
        EXPECT_EQ(stream_worker(t * U, L, W), stream_worker(t * U + U - 1, L, W)) << "tile " << t << " W " << W;
    }
#else
  GTEST_SKIP() << "no CUDA back-end in this build";
#endif
}
