// Norms and element-wise ops of the CUDA back-end. Row reductions (sum of squares, mean, variance) run
// in double like the CPU's, one thread block (or, rmsnorm, a cluster of blocks: row_norm.cuh) per row, in a
// tree order fixed by the row length alone:
// a row's result never depends on the row count, and differs from the CPU's sequential double sum
// only in the last double bits, which the final float rounding almost always hides. Element-wise ops
// are one thread per element; exp/tanh/log1p are CUDA's (within 2 ulp of glibc's).
#pragma once

namespace ferry::cuda {
constexpr int kRowThreads = 256;  // threads per row of a norm kernel
}  // namespace ferry::cuda
