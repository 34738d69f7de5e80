// The DSA indexer's top-k selection from one query's scores, shared by the CPU back-end and the CUDA
// back-end (which computes the scores on the GPU, bit-identical to the CPU's, and selects on the host
// with this same code so both back-ends pick the same keys, ties included; under FERRY_DEVICE_SELECT it
// selects on the device instead, with ties by position, to these positions: kernels/cuda/select_bits.cuh).
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"

namespace ferry::cpu {

// score[0, visible) are the scores of key positions 0..visible-1 (entries at or beyond `visible` are
// never read); L is the call's key count (torch_cpu ties depend on it). Writes out[topk]: the chosen
// positions ascending, -1 padded. `idx` is scratch of at least L ints.
void indexer_select(const float* score, int64_t visible, int64_t L, int64_t topk, IndexerTies ties, int32_t* idx,
                    int32_t* out);

}  // namespace ferry::cpu
