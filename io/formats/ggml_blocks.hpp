// ggml's quantized block layouts (ggml-org/ggml src/ggml-common.h), used bit for bit so a GGUF file
// ferry writes loads in llama.cpp and vice versa. See ../shared/docs/MODEL_SPEC.md §11.
#pragma once

#include <cstdint>

namespace ferry {

constexpr int kQK = 32;  // elements per block, both types

// Q8_0: y[j] = qs[j] * d, d = fp16(amax / 127).
struct BlockQ8_0 {
  uint16_t d;      // IEEE fp16 bits
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

// MXFP4: y[j] = kv[qs[j] & 15] * 2^(e-128), y[j+16] = kv[qs[j] >> 4] * 2^(e-128), kv = doubled E2M1.
struct BlockMxfp4 {
  uint8_t e;       // E8M0 scale byte (the same byte compressed-tensors stores)
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockMxfp4) == 17);

inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ggml type ids (GGUF tensor info).
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30, mxfp4 = 39 };

}  // namespace ferry
