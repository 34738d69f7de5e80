// `ferry bench` end to end on the k3-tiny-a fixture: real `ferry run` processes (the binary built in
// this tree), interleaved, the identity check, a failing arm that does not stop the suite, and the
// report's table and SVG files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "apps/ferry/bench/bench_report.hpp"
#include "apps/ferry/bench/bench_runner.hpp"
#include "io/errors.hpp"

using namespace ferry::bench;
using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

const fs::path kFerry = fs::path(FERRY_BINARY_DIR) / "apps" / "ferry";
const std::string kModel = std::string(FERRY_FIXTURES) + "/k3-tiny-a/hf";

class BenchRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kFerry)) << kFerry << " is missing: build the `ferry` target before ferry_test_bench";
    dir_ = fs::temp_directory_path() / ("ferry_bench_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  json run(const json& suite, bool skip = false) {
    RunnerOptions o;
    o.exe = kFerry;
    o.out = dir_ / "results.json";
    o.skip_unsupported = skip;
    return run_suite(parse_suite(suite, dir_ / "suite.json"), o);
  }
  json arm(const std::string& tag, json extra = json::object()) const {
    json a = {{"tag", tag}, {"group", "g"}, {"model", kModel}, {"prompt", "The capital of France is"}, {"n", 8}};
    a.update(extra);
    return a;
  }
  const json& run_of(const json& r, const std::string& tag, int repeat) {
    for (const auto& x : r["runs"])
      if (x["tag"] == tag && x["repeat"] == repeat) return x;
    throw std::runtime_error("no run " + tag);
  }

  fs::path dir_;
};

}  // namespace

TEST_F(BenchRun, TwoArmsTwoRepeatsInterleavedAndIdentical) {
  const json r = run({{"repeats", 2}, {"arms", {arm("plain"), arm("threads1", {{"threads", 1}})}}});
  ASSERT_EQ(r["runs"].size(), 4u);
  std::string order;
  for (const auto& x : r["runs"]) order += x["tag"].get<std::string>() + " ";
  EXPECT_EQ(order, "plain threads1 plain threads1 ");
  for (const auto& x : r["runs"]) {
    ASSERT_TRUE(x["ok"].get<bool>()) << x.dump();
    EXPECT_EQ(x["generated"], 8);
    EXPECT_GT(x["steady"].get<double>(), 0);
    EXPECT_GT(x["wall"].get<double>(), x["run"]["load_s"].get<double>());  // measured around the process
    EXPECT_TRUE(x["blocks"].is_null());  // drafter fields exist, empty without a drafter
    EXPECT_EQ(x["identity"]["text"], "identical over 8");
  }
  EXPECT_TRUE(fs::exists(dir_ / "results.json"));
  std::ifstream f(dir_ / "results.json");
  EXPECT_EQ(json::parse(f)["runs"].size(), 4u);
}

TEST_F(BenchRun, SampledArmReportsTheFirstDifferingPosition) {
  const json r = run({{"repeats", 1}, {"arms", {arm("greedy"), arm("sampled", {{"temp", 1.0}, {"seed", 7}})}}});
  const json& s = run_of(r, "sampled", 0);
  ASSERT_TRUE(s["ok"].get<bool>()) << s.dump();
  EXPECT_FALSE(s["identity"]["identical"].get<bool>());
  EXPECT_GE(s["identity"]["first_diff"].get<int>(), 0);
  EXPECT_THAT(s["identity"]["text"].get<std::string>(), HasSubstr("differs at generated token"));
  EXPECT_EQ(run_of(r, "greedy", 0)["identity"]["text"], "identical over 8");
}

TEST_F(BenchRun, UnsupportedFlagFailsItsRunsNotTheSuite) {
  const json suite = {{"repeats", 1}, {"arms", {arm("plain"), arm("future", {{"args", {"--no-such-flag"}}})}}};
  const json r = run(suite);
  const json& bad = run_of(r, "future", 0);
  EXPECT_FALSE(bad["ok"].get<bool>());
  EXPECT_THAT(bad["error"].get<std::string>(), HasSubstr("unsupported flag --no-such-flag"));
  EXPECT_TRUE(run_of(r, "plain", 0)["ok"].get<bool>());
  const json skipped = run(suite, true);
  ASSERT_EQ(skipped["runs"].size(), 1u);
  EXPECT_EQ(skipped["runs"][0]["tag"], "plain");
}

TEST_F(BenchRun, ReportRendersTableAndSvgFiles) {
  const json r = run({{"repeats", 2}, {"arms", {arm("a"), arm("b", {{"threads", 1}})}}});
  const auto arms = summarize(r);
  ASSERT_EQ(arms.size(), 2u);
  EXPECT_EQ(arms[1].steady.count, 2);
  EXPECT_LE(arms[1].steady.min, arms[1].steady.median);
  ASSERT_TRUE(arms[1].ratio.has_value());
  EXPECT_EQ(arms[1].baseline, "a");
  const std::string table = render_table(r, arms);
  EXPECT_THAT(table, HasSubstr("| a (ref) | g | raw | 8 | 2 |"));
  EXPECT_THAT(table, HasSubstr("identical over 8"));
  const auto files = write_plots(arms, dir_ / "svg");
  ASSERT_EQ(files.size(), 3u);
  for (const auto& p : files) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_THAT(ss.str(), HasSubstr("<svg")) << p;
    EXPECT_THAT(ss.str(), HasSubstr("</svg>")) << p;
  }
  EXPECT_THROW(summarize(r, "nope"), ferry::ConfigError);
}
