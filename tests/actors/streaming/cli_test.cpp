// The real binary: `ferry run --ssd-streaming ... --json --trace`, `ferry trace` and `ferry trace diff`.
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/actors/streaming/streaming_support.hpp"

using namespace ferry::test;

namespace {

const std::string kFerry = std::string(FERRY_BINARY_DIR) + "/apps/ferry";

struct Out {
  int rc = 0;
  std::string text;
};

Out sh(const std::string& args, bool with_stderr = true) {
  Out o;
  std::FILE* p = ::popen((kFerry + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) o.text.append(buf, n);
  o.rc = WEXITSTATUS(::pclose(p));
  return o;
}

const std::string kIds = "--prompt-ids 768,84,257,653,384,526,659,648 -n 8 --ignore-eos -t 2";

}  // namespace

TEST(StreamingCli, RunStreamsPrintsMetricsAndTracesAndMatchesTheInMemoryRun) {
  if (!fs::exists(kFerry)) GTEST_SKIP() << "build the ferry target first";
  const auto dir = prepared("replicated", 2, true).string();
  const auto root = kRoot / "cli";
  fs::create_directories(root);
  const auto trace = (root / "t.trace").string(), h1 = (root / "stream.hash").string(), h2 = (root / "ram.hash").string();
  auto run = sh("run -m " + dir + " " + kIds + " --ssd-streaming --cache-experts 4 --prefetch 2 --verify-reads --json --trace " +
                    trace + " --trace-hash " + h1,
                false);
  ASSERT_EQ(run.rc, 0) << run.text;
  auto j = nlohmann::json::parse(run.text);
  ASSERT_TRUE(j.contains("streaming")) << run.text;
  EXPECT_GT(j["streaming"]["bytes"]["disk"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["streaming"]["drives"].size(), 3u);
  EXPECT_GT(j["streaming"]["layer_wait_s"].get<double>(), 0.0);

  auto ram = sh("run -m " + dir + " " + kIds + " --trace-hash " + h2);
  ASSERT_EQ(ram.rc, 0) << ram.text;
  auto diff = sh("trace diff " + h1 + " " + h2);
  EXPECT_EQ(diff.rc, 0) << diff.text;
  EXPECT_NE(diff.text.find("identical: 8 positions"), std::string::npos) << diff.text;

  auto text = sh("run -m " + dir + " " + kIds + " --ssd-streaming --cache-experts 1GB");
  ASSERT_EQ(text.rc, 0) << text.text;
  EXPECT_NE(text.text.find("host hits"), std::string::npos) << text.text;
  EXPECT_NE(text.text.find("steady decode"), std::string::npos) << text.text;

  auto summary = sh("trace " + trace + " --svg " + (root / "svg").string());
  ASSERT_EQ(summary.rc, 0) << summary.text;
  EXPECT_NE(summary.text.find("per drive"), std::string::npos) << summary.text;
  EXPECT_NE(summary.text.find("most-read experts"), std::string::npos) << summary.text;
  EXPECT_TRUE(fs::exists(root / "svg/drive_throughput.svg"));
}

// `--prefetch-router`: the JSON and the text summary say how many guesses were read, used and wasted
// (with their bytes), and the logits equal the run without it.
TEST(StreamingCli, RouterPrefetchReportsHitsAndWastedBytesAndKeepsTheLogits) {
  if (!fs::exists(kFerry)) GTEST_SKIP() << "build the ferry target first";
  const auto dir = prepared("replicated", 2, true).string();
  const auto root = kRoot / "cli-router";
  fs::create_directories(root);
  const auto h1 = (root / "router.hash").string(), h2 = (root / "plain.hash").string();
  const auto trace = (root / "router.trace").string();
  auto run = sh("run -m " + dir + " " + kIds + " --ssd-streaming --cache-experts 2 --prefetch-router --json --trace-hash " +
                    h1 + " --trace " + trace,
                false);
  ASSERT_EQ(run.rc, 0) << run.text;
  const auto j = nlohmann::json::parse(run.text)["streaming"];
  const auto p = j["prefetch"];
  const uint64_t issued = p["issued"], hits = p["hits"], wasted = p["wasted"];
  EXPECT_GT(issued, 0u) << p.dump();
  EXPECT_EQ(hits + wasted, issued) << p.dump();
  EXPECT_EQ(p["wasted_bytes"].get<uint64_t>(), wasted * j["expert_file_bytes"].get<uint64_t>()) << p.dump();
  // `ferry trace` replays the same: each prefetch read, and whether its layer's next call used it.
  auto summary = sh("trace " + trace);
  ASSERT_EQ(summary.rc, 0) << summary.text;
  const std::string line = "prefetch reads: " + std::to_string(issued) + "; used by their layer's next call: ";
  EXPECT_NE(summary.text.find(line), std::string::npos) << summary.text;
  auto plain = sh("run -m " + dir + " " + kIds + " --ssd-streaming --cache-experts 2 --no-prefetch-router --trace-hash " + h2);
  ASSERT_EQ(plain.rc, 0) << plain.text;
  EXPECT_NE(plain.text.find("prefetch 0 issued, 0 hits, 0 wasted"), std::string::npos) << plain.text;
  auto diff = sh("trace diff " + h1 + " " + h2);
  EXPECT_EQ(diff.rc, 0) << diff.text;
  EXPECT_NE(diff.text.find("identical: 8 positions"), std::string::npos) << diff.text;
}

// A prompt longer than --prefill-chunk runs in passes (each a layer call per MoE layer, its experts
// streamed again where the caches miss) and gives the logits of one pass; the plan says so.
TEST(StreamingCli, APromptInPassesOfSixtyFourTokensStreamsTheLogitsOfOnePass) {
  if (!fs::exists(kFerry)) GTEST_SKIP() << "build the ferry target first";
  const auto dir = prepared("replicated", 2, true).string();
  const auto root = kRoot / "cli-prefill-chunk";
  fs::create_directories(root);
  std::string ids;
  for (int i = 0; i < 150; ++i) ids += (i ? "," : "") + std::to_string((i * 37 + 11) % 700 + 1);
  const std::string args = "--prompt-ids " + ids + " -n 4 --ignore-eos -t 2 -c 160 --ssd-streaming --cache-experts 2";
  const auto h1 = (root / "passes.hash").string(), h2 = (root / "one.hash").string();
  auto passes = sh("run -m " + dir + " " + args + " --prefill-chunk 64 --trace-hash " + h1);
  ASSERT_EQ(passes.rc, 0) << passes.text;
  EXPECT_NE(passes.text.find("prompts in passes of 64 tokens"), std::string::npos) << passes.text;
  EXPECT_NE(passes.text.find("--prefill-chunk 64"), std::string::npos) << "the plan's flags" << passes.text;
  auto one = sh("run -m " + dir + " " + args + " --trace-hash " + h2);
  ASSERT_EQ(one.rc, 0) << one.text;
  EXPECT_EQ(one.text.find("prompts in passes of"), std::string::npos) << "the tiny model's prompt fits one pass";
  auto diff = sh("trace diff " + h1 + " " + h2);
  EXPECT_EQ(diff.rc, 0) << diff.text;
  EXPECT_NE(diff.text.find("identical: 4 positions"), std::string::npos) << diff.text;
}

// Reads, bytes and rates mean the same in the run summary, the trace summary and the plots: an expert
// read counts once even when it is split over two replicas, the drives count the parts.
TEST(StreamingCli, ExpertReadsAgreeBetweenRunSummaryAndTraceAndDrivesCountSplitParts) {
  if (!fs::exists(kFerry)) GTEST_SKIP() << "build the ferry target first";
  const auto dir = prepared("replicated", 2, true).string();
  const auto root = kRoot / "cli-counters";
  fs::create_directories(root);
  const auto trace = (root / "t.trace").string();
  auto run = sh("run -m " + dir + " " + kIds + " --ssd-streaming --cache-experts 2 --json --trace " + trace, false);
  ASSERT_EQ(run.rc, 0) << run.text;
  const auto j = nlohmann::json::parse(run.text)["streaming"];
  const uint64_t reads = j["disk_reads"].get<uint64_t>();
  uint64_t parts = 0, bytes = 0;
  for (const auto& d : j["drives"]) {
    parts += d["reads"].get<uint64_t>();
    bytes += d["bytes"].get<uint64_t>();
  }
  EXPECT_GT(parts, reads) << "decode fills of replicated experts are split in two parts";
  EXPECT_EQ(bytes, j["bytes"]["disk"].get<uint64_t>());
  EXPECT_EQ(reads * j["expert_file_bytes"].get<uint64_t>(), j["bytes"]["disk_demand"].get<uint64_t>())
      << "each expert read moves one file, split or not";
  auto summary = sh("trace " + trace + " --svg " + (root / "svg").string());
  ASSERT_EQ(summary.rc, 0) << summary.text;
  EXPECT_NE(summary.text.find("expert reads from disk: " + std::to_string(reads) + " "), std::string::npos)
      << "run summary says " << reads << "\n" << summary.text;
  // Round ticks: the y labels of the throughput plot step by a constant 1, 2, 2.5 or 5 x 10^n from 0.
  std::ifstream svg(root / "svg/drive_throughput.svg");
  const std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  std::vector<double> ys;
  for (size_t p = 0; (p = text.find("text-anchor=\"end\">", p)) != std::string::npos; ++p)
    ys.push_back(std::stod(text.substr(p + 18)));
  ASSERT_GE(ys.size(), 3u) << text;
  EXPECT_EQ(ys[0], 0.0);
  const double step = ys[1] - ys[0], mag = std::pow(10.0, std::floor(std::log10(step)));
  EXPECT_TRUE(std::fabs(step / mag - std::round(step / mag * 2) / 2) < 1e-9) << step;
  for (size_t i = 1; i < ys.size(); ++i) EXPECT_NEAR(ys[i] - ys[i - 1], step, 1e-9 * step) << i;
}

TEST(StreamingCli, TraceDiffNamesTheFirstDifferingPosition) {
  if (!fs::exists(kFerry)) GTEST_SKIP() << "build the ferry target first";
  const auto root = kRoot / "cli-diff";
  fs::create_directories(root);
  std::ofstream(root / "a") << "24 5 aa\n25 6 bb\n26 7 cc\n";
  std::ofstream(root / "b") << "24 5 aa\n25 9 dd\n26 7 cc\n";
  auto d = sh("trace diff " + (root / "a").string() + " " + (root / "b").string());
  EXPECT_EQ(d.rc, 1);
  EXPECT_NE(d.text.find("position 25"), std::string::npos) << d.text;
}

TEST(StreamingCli, StreamingAHuggingFaceCheckpointIsRefusedWithAClearMessage) {
  if (!fs::exists(kFerry)) GTEST_SKIP() << "build the ferry target first";
  auto r = sh("run -m " + kHf.string() + " " + kIds + " --ssd-streaming");
  EXPECT_EQ(r.rc, 2) << "refused before loading";
  EXPECT_NE(r.text.find("prepared model"), std::string::npos) << r.text;
}
