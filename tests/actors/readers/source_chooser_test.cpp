#include <gtest/gtest.h>

#include "actors/readers/source_chooser.hpp"
#include "io/errors.hpp"

using namespace ferry;

TEST(SourceChooser, EqualDrivesShareReadsByQueuedBytes) {
  SourceChooser c(2);
  std::vector<uint32_t> both{0, 1};
  int to[2] = {0, 0};
  for (int i = 0; i < 10; ++i) {
    uint32_t d = c.choose(both, 1 << 20);
    c.on_issue(d, 1 << 20);
    ++to[d];
  }
  EXPECT_EQ(to[0], 5);
  EXPECT_EQ(to[1], 5);
}

TEST(SourceChooser, MeasuredSlowDriveGetsAProportionallySmallerShare) {
  SourceChooser c(2, {.initial_rate_bps = 1e9, .latency_s = 0, .ema_alpha = 1.0});
  c.on_complete(0, 1 << 20, 1'000'000, 1);   // 1 MiB in 1 ms: ~1 GB/s
  c.on_complete(1, 1 << 20, 4'000'000, 1);   // 4x slower
  std::vector<uint32_t> both{0, 1};
  int to[2] = {0, 0};
  for (int i = 0; i < 50; ++i) {
    uint32_t d = c.choose(both, 1 << 20);
    c.on_issue(d, 1 << 20);
    ++to[d];
  }
  EXPECT_EQ(to[0], 40);
  EXPECT_EQ(to[1], 10);
}

TEST(SourceChooser, SkipsUnavailableDirectoriesWhileAnotherCopyExists) {
  SourceChooser c(3);
  c.set_available(0, false);
  std::vector<uint32_t> copies{0, 2};
  EXPECT_EQ(c.choose(copies, 4096), 2u);
  std::vector<uint32_t> only{0};
  EXPECT_EQ(c.choose(only, 4096), 0u);  // the only copy: the caller waits for its restart
  std::vector<uint32_t> none;
  EXPECT_THROW(c.choose(none, 4096), LimitError);
  std::vector<uint32_t> bad{7};
  EXPECT_THROW(c.choose(bad, 4096), LimitError);
}

// A drive measured very slow once would never be chosen again, and so never re-measured: the probe
// sends it one read after `probe_every` choices, and a fast answer wins its share back.
TEST(SourceChooser, IdleSlowDriveIsProbedAndWinsItsShareBackWhenFast) {
  SourceChooserConfig cfg{.initial_rate_bps = 1e9, .latency_s = 0, .ema_alpha = 1.0, .probe_every = 16};
  std::vector<uint32_t> both{0, 1};
  auto run = [&](SourceChooser& c, int reads, uint64_t ns_on_1) {  // waves of 8 reads in flight
    int to1 = 0;
    for (int w = 0; w < reads / 8; ++w) {
      std::vector<uint32_t> issued;
      for (int i = 0; i < 8; ++i) {
        uint32_t d = c.choose(both, 1 << 20);
        c.on_issue(d, 1 << 20);
        issued.push_back(d);
        to1 += d == 1;
      }
      for (uint32_t d : issued) c.on_complete(d, 1 << 20, d == 1 ? ns_on_1 : 1'000'000, 1);  // 0: ~1 GB/s
    }
    return to1;
  };
  SourceChooser c(2, cfg);
  c.on_complete(1, 1 << 20, 1'000'000'000, 1);  // one read took a second: ~1 MB/s
  EXPECT_EQ(run(c, 64, 1'000'000'000), 4) << "a slow drive gets one probe per 16 choices";
  EXPECT_GT(run(c, 64, 1'000'000), 20) << "once a probe finds it fast, it shares again";

  cfg.probe_every = 0;  // no probes: the stale estimate keeps the drive idle forever
  SourceChooser never(2, cfg);
  never.on_complete(1, 1 << 20, 1'000'000'000, 1);
  EXPECT_EQ(run(never, 64, 1'000'000), 0);
}
