// The expert usage a streaming run learns (StreamingOptions::learn_usage, the store's usage.json by default):
// the run's counts are added to the file when the source closes, a later run warm-starts from them with the
// same output, and --no-learn-usage (learn_usage = false) leaves the file as it was. On a private usage file:
// the shared layouts' usage.json stays as prepared for the other tests (streaming_options turns learning off).
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "io/store/expert_store.hpp"
#include "tests/actors/streaming/streaming_support.hpp"

using namespace ferry;
using namespace ferry::test;

namespace {

int64_t total(const UsageCounts& u) {
  int64_t s = 0;
  for (const auto& [id, n] : u) s += n;
  return s;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace

TEST(StreamingUsage, ARunAddsItsCountsAWarmStartKeepsTheOutputAndNoLearnLeavesTheFileAlone) {
  const fs::path file = kRoot / ("usage-learn-" + std::to_string(::getpid()) + ".json");
  fs::remove(file);
  auto o = streaming_options(prepared("one", 1, false), 8);
  o.streaming.usage_path = file.string();
  o.streaming.learn_usage = true;

  // A cold run (no file yet) writes its own counts: top_k = 4 experts a row in each of the 5 MoE layers.
  const RunResult first = generate_run(o);
  expect_same_output(first, reference());
  ASSERT_TRUE(fs::exists(file));
  const UsageCounts c1 = load_usage(file);
  ASSERT_FALSE(c1.empty());
  EXPECT_GT(total(c1), 0);
  EXPECT_EQ(total(c1) % (4 * 5), 0) << "every row uses top_k experts in each MoE layer";
  for (const auto& [id, n] : c1) {
    EXPECT_GE(id >> 32, 1u) << "layer 0 is dense";
    EXPECT_LE(id >> 32, 5u);
    EXPECT_GT(n, 0);
  }

  // The same run again, warm-started from those counts: the same output, and each count doubles (the old
  // counts' decay, 2^(-row-uses / 262,144), rounds away at these sizes).
  const RunResult second = generate_run(o);
  expect_same_output(second, reference());
  const UsageCounts c2 = load_usage(file);
  ASSERT_EQ(c2.size(), c1.size());
  for (const auto& [id, n] : c1) EXPECT_EQ(c2.at(id), 2 * n) << "L" << (id >> 32) << "-E" << (id & 0xffffffffu);

  // Without learning the file keeps every byte.
  const std::string before = bytes_of(file);
  o.streaming.learn_usage = false;
  expect_same_output(generate_run(o), reference());
  EXPECT_EQ(bytes_of(file), before);
  fs::remove(file);
}
