// Shared by the engine option tests: the real binaries as subprocesses, and the k3-tiny-a fixture
// prepared once (`ferry prepare`, two expert directories) under a file lock, since ctest runs the tests
// of one binary as parallel processes.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

namespace ferry::test {

namespace fs = std::filesystem;
inline const std::string kFerry = std::string(FERRY_BINARY_DIR) + "/apps/ferry";
inline const fs::path kTinyHf = fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf";

struct Proc {
  int rc = -1;
  std::string out;   // stdout (+ stderr when merged)
  double seconds = 0;
};

// Runs `cmd` through the shell; stderr is merged into out unless `stderr_to` names a file.
inline Proc sh(const std::string& cmd, const std::string& stderr_to = "") {
  Proc r;
  const auto t0 = std::chrono::steady_clock::now();
  std::FILE* p = ::popen((cmd + (stderr_to.empty() ? " 2>&1" : " 2>" + stderr_to)).c_str(), "r");
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// The tiny fixture prepared into build/test-data/engine-cli/<name> (once; reused while the fixture's
// manifest is there).
inline fs::path prepared_tiny(const std::string& name = "m") {
  const fs::path root = fs::path(FERRY_BINARY_DIR) / "test-data/engine-cli";
  fs::create_directories(root);
  const int fd = ::open((root / ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  ::flock(fd, LOCK_EX);
  const fs::path dir = root / name;
  if (!fs::exists(dir / "manifest.json")) {
    fs::remove_all(dir);
    sh(kFerry + " prepare --quiet --checkpoint " + kTinyHf.string() + " --out " + (dir / "model").string() +
       " --expert-dir " + (dir / "e0").string() + " --expert-dir " + (dir / "e1").string());
    fs::copy_file(dir / "model/manifest.json", dir / "manifest.json");
  }
  ::close(fd);
  return dir / "model";
}

}  // namespace ferry::test
