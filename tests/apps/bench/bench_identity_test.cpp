// The identity check: token ids and logit hashes, position by position.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "apps/ferry/bench/bench_identity.hpp"
#include "io/errors.hpp"

using namespace ferry::bench;

TEST(BenchIdentity, SameTokensAndHashesAreIdenticalOverTheShorterRun) {
  const std::vector<TraceRow> ref = {{5, 1, 0xa}, {6, 2, 0xb}, {7, 3, 0xc}};
  EXPECT_EQ(compare_traces(ref, ref).text, "identical over 3");
  const Identity prefix = compare_traces(ref, {ref[0], ref[1]});
  EXPECT_TRUE(prefix.identical);
  EXPECT_EQ(prefix.over, 2);
}

TEST(BenchIdentity, ReportsTheFirstDifferingTokenOrLogitHash) {
  const std::vector<TraceRow> ref = {{5, 1, 0xa}, {6, 2, 0xb}, {7, 3, 0xc}};
  const Identity tok = compare_traces(ref, {{5, 1, 0xa}, {6, 9, 0xb}, {7, 3, 0xc}});
  EXPECT_FALSE(tok.identical);
  EXPECT_EQ(tok.first_diff, 1);
  EXPECT_EQ(tok.position, 6);
  EXPECT_EQ(tok.what, "token");
  EXPECT_THAT(tok.text, ::testing::HasSubstr("differs at generated token 1 (position 6): token 9 vs reference 2"));
  // Same tokens chosen from different numbers is a difference too.
  const Identity lg = compare_traces(ref, {{5, 1, 0xa}, {6, 2, 0xb}, {7, 3, 0xd}});
  EXPECT_EQ(lg.first_diff, 2);
  EXPECT_EQ(lg.what, "logits");
}

TEST(BenchIdentity, ReadsTraceHashFilesAndNamesABadLine) {
  const auto p = std::filesystem::temp_directory_path() / "ferry_bench_identity.hash";
  std::ofstream(p) << "15 770 cc219b3584463a52\n16 509 5720192436837be1\n";
  const auto rows = read_trace_hash(p);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].pos, 16);
  EXPECT_EQ(rows[1].id, 509);
  EXPECT_EQ(rows[1].hash, 0x5720192436837be1ull);
  std::ofstream(p) << "15 770 cc219b3584463a52\n16 509 zz\n";
  try {
    read_trace_hash(p);
    FAIL() << "a bad hash must be reported";
  } catch (const ferry::FormatError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(":2: 'zz' is not a hexadecimal hash"));
  }
  std::filesystem::remove(p);
}
