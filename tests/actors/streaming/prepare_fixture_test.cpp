// The prepared layouts the streaming tests run on (k3-tiny-a via `prepare_model`), and a check that
// they hold what the tests assume: 1, 2 and 3 directories, and a replica directory with every expert.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "io/store/expert_store.hpp"
#include "io/store/expert_store_prepare.hpp"

namespace ferry::test {

namespace fs = std::filesystem;

namespace {

const fs::path kHfDir = fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
const fs::path kRootDir = fs::path(FERRY_BINARY_DIR) / "test-data/streaming";

// Usage counts that make every expert a replica candidate (placement orders replicas by usage).
fs::path write_usage(const fs::path& root) {
  fs::create_directories(root);
  const fs::path p = root / "usage.json";
  std::ofstream f(p);
  f << "{";
  bool first = true;
  for (int l = 1; l < 6; ++l)
    for (int e = 0; e < 32; ++e) {
      f << (first ? "" : ",") << "\"L" << l << "-E" << e << ".bin\":" << (1000 - l * 32 - e);
      first = false;
    }
  f << "}";
  return p;
}

// Identifies this build of the test binary: layouts prepared by another build are redone.
std::string build_stamp() {
  struct stat st {};
  ::stat("/proc/self/exe", &st);
  return std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

// ctest runs the tests of this binary as parallel processes: one prepares a layout (under an flock),
// the others reuse it.
struct FileLock {
  int fd;
  explicit FileLock(const fs::path& p) : fd(::open(p.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) { ::flock(fd, LOCK_EX); }
  ~FileLock() { ::close(fd); }
};

}  // namespace

fs::path prepared(const std::string& name, int n_primary, bool replica_dir) {
  static std::map<std::string, fs::path> done;
  if (auto it = done.find(name); it != done.end()) return it->second;
  fs::create_directories(kRootDir);
  const fs::path root = kRootDir / name;
  FileLock lock(kRootDir / (name + ".lock"));
  const fs::path ready = root / "ready";
  if (fs::exists(ready)) {
    std::ifstream f(ready);
    std::string stamp;
    std::getline(f, stamp);
    if (stamp == build_stamp()) return done[name] = root / "model";
  }
  fs::remove_all(root);
  PrepareOptions o;
  o.checkpoint = kHfDir;
  o.out = root / "model";
  for (int i = 0; i < n_primary; ++i) o.expert_dirs.push_back(root / ("nvme" + std::to_string(i)));
  o.spine = SpineType::bf16;  // exact: the reference is also the Hugging Face checkpoint
  o.progress = false;
  if (replica_dir) {
    o.replicas_usage = write_usage(root);
    o.replica_budgets.push_back({root / "replica", int64_t(1) << 40});
  }
  prepare_model(o);
  std::ofstream(ready) << build_stamp() << "\n";
  return done[name] = o.out;
}

TEST(StreamingFixture, LayoutsHoldTheirDirectoriesAndReplicas) {
  const auto one = read_manifest(prepared("one", 1, false) / "manifest.json");
  EXPECT_EQ(one.dirs.size(), 1u);
  EXPECT_EQ(one.experts.size(), 160u);
  const auto three = read_manifest(prepared("three", 3, false) / "manifest.json");
  EXPECT_EQ(three.dirs.size(), 3u);
  const auto rep = read_manifest(prepared("replicated", 2, true) / "manifest.json");
  ASSERT_EQ(rep.dirs.size(), 3u);
  for (const auto& e : rep.experts) EXPECT_EQ(e.dirs.size(), 2u) << "L" << e.layer << "-E" << e.expert;
}

}  // namespace ferry::test
