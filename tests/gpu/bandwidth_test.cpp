// The copy ceilings the H200 benchmark divides by (issue 5, "time per token / I/O floor"): pinned
// host -> device uploads (the path expert bytes take from the page-locked arena) and device -> device
// copies (the HBM rate that bounds an all-resident decode step). Prints GB/s; asserts only sanity.
#include <chrono>
#include <cstdlib>
#include <functional>

#include "tests/gpu/gpu_util.hpp"

namespace ferry::test {
namespace {

double seconds_of(const std::function<void()>& f, int reps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

TEST(Bandwidth, PinnedUploadAndDeviceCopy) {
  FERRY_SKIP_WITHOUT_CUDA();
  auto be = cuda_backend();
  const size_t bytes = size_t(1) << 30;
  void* host = std::aligned_alloc(4096, bytes);
  std::memset(host, 1, bytes);
  void* d0 = be->alloc(bytes);
  void* d1 = be->alloc(bytes);
  be->upload(d0, host, bytes);  // warm-up (pageable)
  const double pageable = seconds_of([&] { be->upload(d0, host, bytes); }, 3);
  be->register_host(host, bytes);
  be->upload(d0, host, bytes);
  const double pinned = seconds_of([&] { be->upload(d0, host, bytes); }, 5);
  be->copy(d1, d0, bytes);
  be->synchronize();
  const double dev = seconds_of([&] { be->copy(d1, d0, bytes); be->synchronize(); }, 10);
  be->unregister_host(host);
  // A device copy reads and writes every byte: report the bytes moved (2x) as the HBM rate.
  std::printf("BANDWIDTH pinned_h2d_GBps %.1f pageable_h2d_GBps %.1f device_copy_rw_GBps %.1f\n", bytes / pinned / 1e9,
              bytes / pageable / 1e9, 2.0 * bytes / dev / 1e9);
  EXPECT_GT(bytes / pinned, 1e9);
  be->release(d0);
  be->release(d1);
  std::free(host);
}

}  // namespace
}  // namespace ferry::test
