// Exact decoding of ggml's quantized blocks (io/formats/ggml_blocks.hpp) to floats for the CPU kernels. The
// decoded values are exact (small integers times a power of two, or int8 times an fp16 value), so a
// matmul over decoded blocks equals an f32 matmul over the dequantized weights bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "io/formats/ggml_blocks.hpp"

namespace ferry::cpu {

// IEEE binary16 bits -> float (exact: every half value is a float).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal half = mant * 2^-24: normalise
    uint32_t e = 113, m = mant;
    while ((m & 0x400u) == 0) { m <<= 1; --e; }
    bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// 2^(e-128) for every E8M0 byte (ggml's E8M0_TO_FP32_HALF; e < 2 gives float denormals).
const float* e8m0_half_table();

inline constexpr float kMxfp4Float[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

inline void decode_mxfp4_block(const BlockMxfp4& b, const float* e8m0, float* out) {
  const float d = e8m0[b.e];
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = kMxfp4Float[b.qs[j] & 15] * d;
    out[j + kQK / 2] = kMxfp4Float[b.qs[j] >> 4] * d;
  }
}

inline void decode_q8_0_block(const BlockQ8_0& b, float* out) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < kQK; ++j) out[j] = static_cast<float>(b.qs[j]) * d;
}

// Kernel selection for tests: force the portable kernels even where AVX2 is available (both must give
// the same bits; the test suite checks that).
void force_portable_kernels(bool on);

}  // namespace ferry::cpu
