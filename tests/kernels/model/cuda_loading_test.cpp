// The CUDA back-end has every kernel loaded when its context starts: before the process's first CUDA call
// (cuda_available(), the back-end's constructor) it sets CUDA_MODULE_LOADING=EAGER unless the user chose a
// mode. With the runtime's default (lazy: each kernel loads at its first launch) the loads landed in the
// user's first prompt: 16 tokens 30 ms instead of 11, 1,024 tokens 146 ms instead of 126 (H100,
// docs/BENCHMARKS.md). Runs on any machine: no device needed, the driver reads the variable later.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#if FERRY_WITH_CUDA
#include "kernels/cuda_backend.hpp"
#endif

namespace {

std::string loading_mode() {
  const char* v = std::getenv("CUDA_MODULE_LOADING");
  return v ? v : "(unset)";
}

}  // namespace

TEST(CudaModuleLoading, FirstCudaCallAsksForEagerLoading) {
#if FERRY_WITH_CUDA
  unsetenv("CUDA_MODULE_LOADING");
  (void)ferry::cuda_available();
  EXPECT_EQ(loading_mode(), "EAGER");
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

TEST(CudaModuleLoading, ModeTheUserSetIsKept) {
#if FERRY_WITH_CUDA
  setenv("CUDA_MODULE_LOADING", "LAZY", 1);
  (void)ferry::cuda_available();
  EXPECT_EQ(loading_mode(), "LAZY");
  unsetenv("CUDA_MODULE_LOADING");
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}
