// Scratch directories for the io tests, under one per-process root that is removed when the test
// binary finishes (a global GoogleTest environment), so runs leave nothing behind in /tmp.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace ferry::test {

inline std::filesystem::path temp_root() {
  return std::filesystem::temp_directory_path() / ("ferry_io_test_" + std::to_string(::getpid()));
}

class TempRootCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(temp_root(), ec);
  }
};

// An empty directory `name` under the per-process root.
inline std::filesystem::path temp_dir(const std::string& name) {
  static auto* registered = ::testing::AddGlobalTestEnvironment(new TempRootCleanup);
  (void)registered;
  auto d = temp_root() / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace ferry::test
