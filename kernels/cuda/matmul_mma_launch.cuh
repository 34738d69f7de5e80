// Host side of the prompt pass's tensor-core matmul (matmul_mma.cuh has the kernels and the rules).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/backend.hpp"

namespace ferry::cuda {

namespace mma {
// An activation prepared by prep_x: row r of x is (hi[r*stride ..] + lo[r*stride ..]) * inv[r]
// (lo == nullptr with one level).
struct XPrep {
  const __half* hi = nullptr;
  const __half* lo = nullptr;
  const float* inv = nullptr;  // 2^-k of each row
  int64_t stride = 0;          // halves per row (the matmul's cols)
};
}  // namespace mma

// Whether a prompt pass runs this weight on the tensor cores (q8_0 / mxfp4, cols % 128 == 0, data
// 16-byte aligned and a multiple of 16 bytes long, and the path not switched off).
bool matmul_mma_supported(const Weight& w);
// Measurement switches, read once from the environment: FERRY_MMA=0 (prompt passes on the CUDA-core
// kernels) and FERRY_MMA_LEVELS=1 (x as hi only; the default is hi + lo).

// Device bytes prep_x needs for n rows of cols.
size_t mma_prep_bytes(int64_t n, int64_t cols);
// x [n, cols] (contiguous) prepared into buf (mma_prep_bytes(n, cols) bytes) on stream st.
mma::XPrep prep_x(const float* x, int64_t n, int64_t cols, void* buf, cudaStream_t st);
// y [n, w.rows] = x @ W^T from x prepared by prep_x.
void launch_matmul_mma(const Weight& w, const mma::XPrep& xp, int64_t n, float* y, cudaStream_t st);

}  // namespace ferry::cuda
