// `ferry faults --only storage` on the k3-tiny-a fixture prepared with a replica of every expert: every
// storage scenario injects faults at the default seed and the output stays identical; without a
// replica the damaged and vanished drives end their runs with a clear error naming the file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::string kFerry = std::string(FERRY_BINARY_DIR) + "/apps/ferry";
const fs::path kHf = fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
const fs::path kRoot = fs::path(FERRY_BINARY_DIR) / "test-data/faults-storage";

// The current test's last run's stderr (its warnings say which copy each late check barred): shown when a
// check fails. One file per test: ctest runs the tests of this file in parallel.
fs::path stderr_path() {
  return kRoot / (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".stderr");
}

std::string stderr_tail() {
  std::ifstream in(stderr_path());
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string tail = "\n--- last run's stderr (its last 80 lines) ---\n";
  for (size_t i = lines.size() > 80 ? lines.size() - 80 : 0; i < lines.size(); ++i) tail += lines[i] + "\n";
  return tail;
}

std::pair<int, std::string> ferry(const std::string& args) {
  std::string out;
  fs::create_directories(kRoot);
  std::FILE* p = ::popen((kFerry + " " + args + " 2>" + stderr_path().string()).c_str(), "r");
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// Prepares the fixture into kRoot/<name>: one expert directory, plus a replica of every expert.
fs::path prepare(const std::string& name, bool replica) {
  const fs::path d = kRoot / name;
  fs::remove_all(d);
  fs::create_directories(d);
  std::string args = "prepare --quiet --checkpoint " + kHf.string() + " --out " + (d / "model").string() +
                     " --expert-dir " + (d / "nvme0").string();
  if (replica) {
    std::ofstream(d / "usage.json") << R"({"L1-E0.bin": 1})";
    args += " --replicas " + (d / "usage.json").string() + " --replica-budget " + (d / "replica").string() + "=1GB";
  }
  auto [rc, out] = ferry(args);
  EXPECT_EQ(rc, 0) << out;
  return d / "model";
}

// The storage rows of the output: name -> (faults, mismatches, outcome).
struct Row {
  long faults = -1, recoveries = -1, mismatches = -1;
  std::string outcome;
};
std::vector<Row> rows(const std::string& out) {
  std::vector<Row> r;
  std::istringstream in(out.substr(out.find("storage scenario")));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line) && !line.empty()) {
    Row x;
    std::string rest = line.substr(32);  // the name column is 32 wide
    std::istringstream ls(rest);
    ls >> x.faults >> x.recoveries >> x.mismatches;
    std::getline(ls, x.outcome);
    r.push_back(x);
  }
  return r;
}

}  // namespace

// Also with --verify-late: the corrupted and zeroed experts are then found after compute, and the
// layers that used them run again from the replica.
TEST(FaultsStorage, EveryScenarioInjectsFaultsAndAReplicaKeepsTheOutputIdentical) {
  const auto model = prepare("replicated", true);
  for (const std::string extra : {"", " --verify-late"}) {
    SCOPED_TRACE("ferry faults" + extra);
    auto [rc, out] = ferry("faults --only storage -n 6 -t 2 -m " + model.string() + extra);
    ASSERT_EQ(rc, 0) << out << stderr_tail();
    const auto r = rows(out);
    ASSERT_EQ(r.size(), 6u) << out;
    for (const auto& x : r) {
      EXPECT_GT(x.faults, 0) << out;
      EXPECT_EQ(x.mismatches, 0) << out;
      EXPECT_NE(x.outcome.find("identical output"), std::string::npos) << out << stderr_tail();
    }
    EXPECT_NE(out.find("total mismatches: 0"), std::string::npos) << out;
  }
}

TEST(FaultsStorage, WithoutAReplicaDamagedExpertsEndWithAClearErrorNamingTheFile) {
  const auto model = prepare("single", false);
  auto [rc, out] = ferry("faults --only storage -n 6 -t 2 -m " + model.string());
  ASSERT_EQ(rc, 0) << out;
  const auto r = rows(out);
  ASSERT_EQ(r.size(), 6u) << out;
  for (size_t i : {3u, 4u}) {  // corrupted, zeroed
    EXPECT_GT(r[i].faults, 0) << out;
    EXPECT_NE(r[i].outcome.find("checksum mismatch, no other copy"), std::string::npos) << out;
    EXPECT_NE(r[i].outcome.find(".bin"), std::string::npos) << out;
  }
  EXPECT_NE(r[5].outcome.find("No such file or directory"), std::string::npos) << out;
  EXPECT_NE(r[0].outcome.find("identical output"), std::string::npos) << out;  // a restarted reader recovers
}
