// Exact element conversions (MODEL_SPEC.md §11). The fp16 routines are ggml's portable ones
// (ggml-impl.h ggml_compute_fp32_to_fp16 / fp16_to_fp32, after Maratyszcza's FP16 library), so a
// value ferry rounds to fp16 has the same bits as ggml's on any CPU.
#include "io/formats/convert.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ferry {

namespace {
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// E2M1 magnitudes indexed by bits 0-2 of a nibble (compressed-tensors / OCP MX).
constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
}  // namespace

float bf16_to_f32(uint16_t h) { return from_bits(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_bf16(float f) {
  uint32_t u = bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);  // NaN stays a quiet NaN
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);          // round to nearest even
}

float f16_to_f32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result = sign | (two_w < denormalized_cutoff ? bits(denormalized) : bits(normalized));
  return from_bits(result);
}

uint16_t f32_to_f16(float f) {
  // Scaling by 2^112 then 2^-110 makes the FPU do the round-to-nearest-even of the mantissa.
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = bits(base);
  const uint32_t exp_bits = (b >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = b & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// src points into a mapped file: a safetensors header of odd length puts the data at an odd address,
// so each element is loaded with memcpy (an aligned-or-not load the compiler emits as one mov).
namespace {
inline uint16_t load_u16(const void* base, size_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(base) + 2 * i, 2);
  return h;
}
}  // namespace

void bf16_to_f32_n(const void* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src, i));
}

void f16_to_f32_n(const void* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src, i));
}

float e8m0_to_f32_half(uint8_t e) {
  // 2^(e-128): for e < 2 the result is a float denormal (0x00200000 is 2^-128).
  uint32_t b = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return from_bits(b);
}

void ct_mxfp4_to_ggml(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols, BlockMxfp4* out) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* src = packed + r * (cols / 2) + b * (kQK / 2);  // 16 bytes = elements 2k (lo), 2k+1 (hi)
      BlockMxfp4& blk = out[r * nb + b];
      blk.e = scale[r * nb + b];
      // ggml block: qs[j] low nibble = element j, high nibble = element j + 16.
      for (int j = 0; j < kQK / 2; ++j) {
        auto nib = [&](int k) -> uint8_t { return (src[k / 2] >> ((k & 1) * 4)) & 0x0F; };
        blk.qs[j] = static_cast<uint8_t>(nib(j) | (nib(j + kQK / 2) << 4));
      }
    }
  }
}

void ggml_mxfp4_to_ct(const BlockMxfp4* in, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scale) {
  const int64_t nb = cols / kQK;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const BlockMxfp4& blk = in[r * nb + b];
      scale[r * nb + b] = blk.e;
      uint8_t* dst = packed + r * (cols / 2) + b * (kQK / 2);
      auto nib = [&](int k) -> uint8_t { return k < kQK / 2 ? (blk.qs[k] & 0x0F) : (blk.qs[k - kQK / 2] >> 4); };
      for (int k = 0; k < kQK / 2; ++k) dst[k] = static_cast<uint8_t>(nib(2 * k) | (nib(2 * k + 1) << 4));
    }
  }
}

void dequant_mxfp4(const BlockMxfp4* in, float* out, int64_t n) {
  // ggml dequantize_row_mxfp4: doubled E2M1 integers times 2^(e-128).
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = e8m0_to_f32_half(in[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      out[i * kQK + j] = kMxfp4Values[in[i].qs[j] & 0x0F] * d;
      out[i * kQK + j + kQK / 2] = kMxfp4Values[in[i].qs[j] >> 4] * d;
    }
  }
}

void dequant_ct_mxfp4(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols, float* out) {
  // w = fp4 * 2^(e-127), computed in double (exact: a 2-bit mantissa times a power of two) and
  // rounded once to float. A negative zero (nibble 8) is written as +0, as ggml's integer table does.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      uint8_t nib = (packed[r * (cols / 2) + c / 2] >> ((c & 1) * 4)) & 0x0F;
      double mag = kE2M1[nib & 7];
      double v = std::ldexp((nib & 8) && mag != 0 ? -mag : mag, static_cast<int>(scale[r * (cols / kQK) + c / kQK]) - 127);
      out[r * cols + c] = static_cast<float>(v);
    }
  }
}

namespace {
// Nearest E2M1 magnitude index for |x| (x already divided by the block scale); a tie goes to the
// smaller magnitude, like argmin over |x - FP4| in make_hf_fixtures.py. Values above 6 clamp to 6.
int e2m1_index(double ax) {
  static constexpr double kMid[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  int idx = 0;
  while (idx < 7 && ax > kMid[idx]) ++idx;
  return idx;
}
}  // namespace

void quantize_mxfp4(const float* in, BlockMxfp4* out, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = in + i * kQK;
    double amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(static_cast<double>(x[j])));
    // OCP MX: shared exponent floor(log2(amax)) - 2 (E2M1's largest exponent), clamped to E8M0's range.
    int e = -127;
    if (amax > 0) {
      int ex = 0;
      std::frexp(amax, &ex);  // amax = m * 2^ex, m in [0.5, 1): floor(log2(amax)) = ex - 1, exactly
      e = std::clamp(ex - 1 - 2, -127, 127);
    }
    BlockMxfp4& blk = out[i];
    blk.e = static_cast<uint8_t>(e + 127);
    uint8_t code[kQK];
    for (int j = 0; j < kQK; ++j) {
      double v = std::ldexp(static_cast<double>(x[j]), -e);
      int idx = e2m1_index(std::fabs(v));
      code[j] = static_cast<uint8_t>(idx | ((v < 0 && idx > 0) ? 8 : 0));
    }
    for (int j = 0; j < kQK / 2; ++j) blk.qs[j] = static_cast<uint8_t>(code[j] | (code[j + kQK / 2] << 4));
  }
}

void quantize_q8_0(const float* in, BlockQ8_0* out, int64_t n) {
  // ggml quantize_row_q8_0_ref, operation for operation (float arithmetic, roundf).
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = in + i * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      const float v = std::fabs(x[j]);
      amax = amax > v ? amax : v;  // ggml's MAX macro
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) out[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void dequant_q8_0(const BlockQ8_0* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = f16_to_f32(in[i].d);
    for (int j = 0; j < kQK; ++j) out[i * kQK + j] = in[i].qs[j] * d;
  }
}

}  // namespace ferry
