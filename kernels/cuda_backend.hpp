// The CUDA back-end (kernels/cuda/): the Backend interface on one NVIDIA GPU. Built into ferry_cuda
// when nvcc is found, which defines FERRY_WITH_CUDA=1 for its dependents. The functions below are
// defined only in ferry_cuda: call them under `#if FERRY_WITH_CUDA` (actors/runtime/model_loader.hpp's
// make_backend does, and works in every build).
//
// Conventions beyond kernels/backend.hpp:
//  - All work runs on one stream owned by the back-end; alloc/release are stream-ordered
//    (cudaMallocAsync/cudaFreeAsync on that stream), so a Buf freed mid-forward costs no device sync.
//  - upload and download return when the copy is complete (as on the CPU back-end).
//  - The int32 selection buffers of attention (AttentionArgs::sel) and indexer_topk (sel) may be host
//    or device memory: the back-end detects which it got (the model passes device memory, a Buf).
//  - Matmul results are bit-identical to the CPU back-end's (same per-output reduction order, no FMA
//    contraction); other ops agree within the tolerances tests/gpu documents.
#pragma once

#include <memory>

#include "kernels/backend.hpp"

namespace ferry {

// True when the CUDA runtime sees at least one device (false, never a throw, when there is no driver
// or no device).
bool cuda_available();

// The CUDA back-end on `device`. Throws ferry::Error when CUDA is not built in or the device is unusable.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

// Prompt passes' activations in the tensor-core matmuls: 22 significant bits (hi + lo fp16 after the
// row's power-of-two scaling, the default) or 11 (hi only). Process-wide, like FERRY_MMA_LEVELS, which it overrides;
// set it before the first prompt pass (a run keeps one choice: a prompt row's bits depend on it).
void cuda_prompt_x_bits(int bits);

}  // namespace ferry
