// Error checking for every CUDA runtime call and kernel launch. A failure throws ferry::Error naming
// the CUDA error, the statement, the function and file:line, e.g.
//   CUDA error 700 (an illegal memory access was encountered) in `cudaStreamSynchronize(stream_)`
//   [download at kernels/cuda/cuda_backend.cu:88]
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "io/errors.hpp"

namespace ferry::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* stmt, const char* func, const char* file, int line);

inline void check(cudaError_t e, const char* stmt, const char* func, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda_error(e, stmt, func, file, line);
}

}  // namespace ferry::cuda

#define FERRY_CUDA_CHECK(stmt) ::ferry::cuda::check((stmt), #stmt, __func__, __FILE__, __LINE__)
// After every kernel launch: catches bad launch configurations at once (asynchronous faults surface at
// the next synchronising call, which is checked too).
#define FERRY_CUDA_LAUNCHED(kernel) ::ferry::cuda::check(cudaGetLastError(), "launch of " #kernel, __func__, __FILE__, __LINE__)
