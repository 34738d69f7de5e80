// The switch for programmatic dependent launch of the CUDA back-end's small kernels (launch_small and
// pdl_begin in common.cuh say what it does). Host-only, so tests and tools can flip it.
#pragma once

namespace ferry::cuda {

// Whether launch_small launches as a programmatic dependent: FERRY_PDL=1, or launch_pdl_tune(1). Off until
// measured on the GPU. The results are the same either way.
bool pdl_small();
// 1 on, 0 off, -1 the environment's (FERRY_PDL).
void launch_pdl_tune(int on);

}  // namespace ferry::cuda
