// Helpers shared by the store tests: a fresh temporary directory per test.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace ferry::test {

inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto p = std::filesystem::temp_directory_path() /
           ("ferry-store-" + std::to_string(::getpid()) + "-" + info->test_suite_name() + "-" + info->name() + "-" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace ferry::test
