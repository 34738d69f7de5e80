// Every bad flag or misfit is refused before the model loads: exit status 2, within a second, with a
// message naming the flag (actors/runtime/engine_options.cpp, io/units.cpp, io/store/memory_plan*).
#include <gtest/gtest.h>

#include <fstream>

#include "io/store/expert_store.hpp"
#include "tests/apps/engine_cli/engine_cli_support.hpp"

namespace ferry::test {
namespace {

// The second; under AddressSanitizer (scripts/sanitize.sh) the instrumented `ferry` starts
// several times slower, so the same check allows 4 s there.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kRefusalSeconds = 4.0;
#else
constexpr double kRefusalSeconds = 1.0;
#endif

void expect_refused(const std::string& args, const std::string& message) {
  const Proc r = sh(kFerry + " run -p Hello " + args);
  EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(message), std::string::npos) << args << "\n" << r.out;
  EXPECT_LT(r.seconds, kRefusalSeconds) << args << ": refused after " << r.seconds << " s";
}

TEST(FailFast, BadDrafterFlagsAreRefusedBeforeLoading) {
  const std::string m = "-m " + prepared_tiny().string();
  expect_refused(m + " --draft bogus", "unknown drafter kind 'bogus'");
  expect_refused(m + " --draft replay:/nonexistent/ids.json", "the replay file '/nonexistent/ids.json' does not exist");
  expect_refused(m + " --draft qwen3:/nonexistent", "'/nonexistent' is not a checkpoint directory");
  expect_refused(m + " --draft ngram --draft-max 40", "--draft-max 40 is outside 1..15");
  expect_refused(m + " --draft ngram --draft-gate often", "--draft-gate 'often'");
}

// A drafter without tokenizer files proposes raw ids of its own vocabulary: the model cannot map them
// (before: every draft rejected, "accepted 0 of 0").
TEST(FailFast, ADrafterVocabularyTheModelCannotMapIsRefused) {
  const fs::path d = fs::path(FERRY_BINARY_DIR) / "test-data/engine-cli/qwen3-no-tokenizer";
  fs::create_directories(d);
  fs::copy_file(fs::path(FERRY_FIXTURES) / "qwen3-a/config.json", d / "config.json", fs::copy_options::overwrite_existing);
  expect_refused("-m " + prepared_tiny().string() + " --draft qwen3:" + d.string(), "has no tokenizer to map them");
  const fs::path ids = d / "big-ids.txt";
  std::ofstream(ids) << "1 2 3 999999\n";
  expect_refused("-m " + prepared_tiny().string() + " --draft replay:" + ids.string(), "token id 999999");
}

TEST(FailFast, SizesWithoutUnitsAndAmbiguousUnitsAreRefused) {
  const std::string m = "-m " + prepared_tiny().string();
  expect_refused(m + " --ssd-streaming --host-pool 96", "--host-pool: '96' is not a size: a bare number has no unit");
  expect_refused(m + " --ssd-streaming --cache-experts 4G", "'G' could mean GB (decimal) or GiB (binary)");
}

TEST(FailFast, NumericFlagsAreCheckedStrictly) {
  const std::string m = "-m " + prepared_tiny().string();
  expect_refused(m + " -t 100000", "-t/--threads 100000 is outside 0..");
  expect_refused(m + " --io-depth 0", "--io-depth 0 must be at least 1");
  expect_refused(m + " --temp nan", "--temp must be a finite number");
  expect_refused(m + " --temp=-1", "--temp must be a finite number");
  expect_refused(m + " --top-p 0", "--top-p must be in (0, 1]");
  expect_refused(m + " --n-predict=-3", "-n/--n-predict -3 is negative");
  expect_refused(m + " --backend tpu", "--backend 'tpu' is not one of cpu, cuda, auto");
  expect_refused(m + " --prompt-x-bits 16", "--prompt-x-bits 16 is not 11 or 22");
  expect_refused(m + " --prefill-chunk 100", "--prefill-chunk 100: must be a multiple of 64");
  expect_refused(m + " --no-ssd-streaming --cache-experts 4", "--no-ssd-streaming keeps every expert in memory");
}

TEST(FailFast, AContextTooLongForTheMemoryIsRefusedWithTheLongestThatFits) {
  expect_refused("-m " + prepared_tiny().string() + " -c 2000000000", "use -c ");
}

TEST(FailFast, MissingOrShortExpertFilesAreFoundFromTheManifestBeforeLoading) {
  const fs::path dir = prepared_tiny("broken");
  const Manifest man = read_manifest(dir / "manifest.json");
  const auto& e = man.experts.front();
  const fs::path file = fs::path(man.dirs[e.dirs[0]]) / expert_file_name(e.layer, e.expert);
  const fs::path aside = file.string() + ".aside";
  if (fs::exists(file)) fs::rename(file, aside);
  expect_refused("-m " + dir.string(), file.string() + " is missing");
  fs::rename(aside, file);
  fs::resize_file(file, 100);
  expect_refused("-m " + dir.string() + " --ssd-streaming", file.string() + " has 100 bytes, manifest.json says");
  fs::remove_all(dir.parent_path());  // the next run prepares it again
}

TEST(FailFast, StreamingAHuggingFaceCheckpointIsRefusedNamingPrepare) {
  expect_refused("-m " + kTinyHf.string() + " --ssd-streaming", "needs a prepared model directory");
}

}  // namespace
}  // namespace ferry::test
