// The CUDA back-end has every kernel loaded when its context starts: it sets CUDA_MODULE_LOADING=EAGER,
// unless the user chose a mode, at program start and again before the process's first CUDA call
// (cuda_available(), the back-end's constructor). With the runtime's default (lazy: each kernel loads at its
// first launch) the loads landed in the user's first prompt: 16 tokens 30 ms instead of 11, 1,024 tokens
// 146 ms instead of 126 (H100, docs/BENCHMARKS.md). Runs on any machine: no device needed, the driver reads
// the variable later. Each test leaves the variable as it found it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#if FERRY_WITH_CUDA
#include "kernels/cuda_backend.hpp"
#endif

namespace {

std::optional<std::string> loading_mode() {
  const char* v = std::getenv("CUDA_MODULE_LOADING");
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// The variable as exec gave it to the process (/proc/self/environ: setenv does not change that block).
std::optional<std::string> mode_at_exec() {
  std::ifstream f("/proc/self/environ", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string key = "CUDA_MODULE_LOADING=";
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    const std::string entry = all.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (entry.compare(0, key.size(), key) == 0) return entry.substr(key.size());
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return std::nullopt;
}

// Restores the variable at scope exit.
struct KeepMode {
  std::optional<std::string> saved = loading_mode();
  ~KeepMode() {
    if (saved)
      setenv("CUDA_MODULE_LOADING", saved->c_str(), 1);
    else
      unsetenv("CUDA_MODULE_LOADING");
  }
};

}  // namespace

TEST(CudaModuleLoading, IsEagerFromProgramStartUnlessTheUserSetAMode) {
#if FERRY_WITH_CUDA
  const auto at_exec = mode_at_exec();
  EXPECT_EQ(loading_mode().value_or("(unset)"), at_exec.value_or("EAGER"));
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

TEST(CudaModuleLoading, FirstCudaCallAsksForEagerLoading) {
#if FERRY_WITH_CUDA
  KeepMode keep;
  unsetenv("CUDA_MODULE_LOADING");
  (void)ferry::cuda_available();
  EXPECT_EQ(loading_mode().value_or("(unset)"), "EAGER");
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

TEST(CudaModuleLoading, ModeTheUserSetIsKept) {
#if FERRY_WITH_CUDA
  KeepMode keep;
  setenv("CUDA_MODULE_LOADING", "LAZY", 1);
  (void)ferry::cuda_available();
  EXPECT_EQ(loading_mode().value_or("(unset)"), "LAZY");
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}
