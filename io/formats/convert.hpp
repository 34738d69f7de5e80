// Exact element conversions between the checkpoint formats and the compute formats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/formats/ggml_blocks.hpp"

namespace ferry {

float bf16_to_f32(uint16_t h);
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);    // round to nearest even (as ggml's GGML_FP32_TO_FP16)
uint16_t f32_to_bf16(float f);   // round to nearest even
// n 16-bit values from src, which need not be 2-byte aligned (tensor data inside a mapped file).
void bf16_to_f32_n(const void* src, float* dst, size_t n);
void f16_to_f32_n(const void* src, float* dst, size_t n);

// 2^(e-128) as ggml's E8M0_TO_FP32_HALF computes it (denormals for e < 2).
float e8m0_to_f32_half(uint8_t e);

// compressed-tensors MXFP4 (packed U8 [rows, cols/2], low nibble = even column; scale U8
// [rows, cols/32]) -> ggml MXFP4 blocks [rows, cols/32]. Exact: scale bytes copied, nibbles moved.
void ct_mxfp4_to_ggml(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols, BlockMxfp4* out);
// The inverse (for writing synthetic checkpoints in the real layout).
void ggml_mxfp4_to_ct(const BlockMxfp4* in, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scale);
// Dequantize n (multiple of 32) values.
void dequant_mxfp4(const BlockMxfp4* in, float* out, int64_t n);
// Dequantize compressed-tensors MXFP4 directly: w = fp4 * 2^(e-127) (reference for the repack test).
void dequant_ct_mxfp4(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols, float* out);
// Quantize n (multiple of 32) floats to MXFP4 (OCP MX: shared scale = floor(log2(amax)) - 2).
void quantize_mxfp4(const float* in, BlockMxfp4* out, int64_t n);

// Q8_0 as ggml's quantize_row_q8_0_ref: d = amax/127, qs = round(x/d).
void quantize_q8_0(const float* in, BlockQ8_0* out, int64_t n);
void dequant_q8_0(const BlockQ8_0* in, float* out, int64_t n);

}  // namespace ferry
