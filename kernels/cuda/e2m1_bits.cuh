// E2M1 (mxfp4) quant bytes -> the high bytes of fp16 values, for the tensor-core kernels: the row layout's
// bytes (ggml) and the mxfp4 tiles' re-ordered bytes (matmul_mxt.cuh). Plain integer functions, so the host
// checks them on every byte (tests/kernels/cuda_host/e2m1_bits_test.cpp) against the E2M1 values.
//
// An E2M1 nibble s|e1 e0|m placed as fp16's sign (bit 15), exponent bits 11..10 and mantissa bit 9 is
// exactly value * 2^-14 (e = 0, the values 0 and 0.5, become fp16 subnormals), and its fp16's low byte is
// zero. So a decoded weight is one byte: bits 7, 3, 2, 1 of the fp16's high byte. The kernels build four of
// them in a word with a few logic ops, then byte-permute pairs into place (mma::e2m1_frags).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferry::cuda::e2m1 {

// The row layout: byte j of a quant block holds element j in its low nibble and element j + 16 in its high
// nibble. row_lo: for each byte of q, the fp16 high byte of its low nibble; row_hi: of its high nibble.
// 7 logic ops for 8 weights (SHL, SHL, LOP3, LOP3 and SHR, LOP3, LOP3 in the SASS).
__host__ __device__ constexpr uint32_t row_lo(uint32_t q) {
  return ((q << 1) & 0x0E0E0E0Eu) | ((q << 4) & 0x80808080u);
}
__host__ __device__ constexpr uint32_t row_hi(uint32_t q) { return ((q >> 3) & 0x0E0E0E0Eu) | (q & 0x80808080u); }

// The mxfp4 tiles' byte for the row layout's byte b = B|A (A the low nibble, B the high one; bits 3..0 of
// each s e1 e0 m): bits 7..0 = A.s B.s B.e1 B.e0 A.e1 A.e0 A.m B.m. A's bits already sit where fp16 wants
// them (tile_lo: one AND), B's need two shifts (tile_hi): 5 logic ops for 8 weights instead of 7. No order
// of a byte's bits lets both halves come out with one shift and one mask each (scripts/e2m1_tiling_search.py).
__host__ __device__ constexpr uint32_t tile_byte(uint32_t b) {
  return ((b & 0xE0u) >> 1) | ((b & 0x07u) << 1) | ((b & 0x08u) << 4) | ((b & 0x10u) >> 4);
}
__host__ __device__ constexpr uint32_t tile_lo(uint32_t q) { return q & 0x8E8E8E8Eu; }
__host__ __device__ constexpr uint32_t tile_hi(uint32_t q) {
  return ((q << 1) & 0x82828282u) | ((q >> 2) & 0x0C0C0C0Cu);
}

// The e8m0 block scale 2^(e - 127) times the 2^14 the decoded values lack, as float bits: 2^(e - 113), an
// exponent field of e + 14 (e = 0 included: 2^-127 is a float subnormal, 2^-113 is not). Exponents
// e >= 241 (scales of 2^114 and up; checkpoints use ~2^-20 .. 2^5) give infinity where 2^(e - 127) was
// finite: their products overflow float in all but degenerate blocks anyway (matmul_mma.cuh's limits).
__host__ __device__ constexpr uint32_t scale14_bits(uint32_t e) {
  const uint32_t f = (e + 14u) << 23;
  return f < 0x7f800000u ? f : 0x7f800000u;
}

}  // namespace ferry::cuda::e2m1
