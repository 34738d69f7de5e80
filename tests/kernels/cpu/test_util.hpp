// Helpers shared by the CPU kernel tests: seeded random inputs (never zeros), NaN-poisoned outputs,
// bitwise comparison and error measures against double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "io/formats/ggml_blocks.hpp"
#include "kernels/backend.hpp"

namespace ferry::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = d(rng); while (x == 0.0f);
  }
  return v;
}

inline std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Index of the first element whose bits differ, or -1.
inline int64_t first_bit_diff(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return i;
  return -1;
}

// max |got - ref| (NaN in `got` counts as infinite error).
inline double max_abs_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(e <= m)) m = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
  }
  return m;
}
inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Random ggml blocks (every bit pattern a real file could hold, scales in a sane range).
inline std::vector<BlockMxfp4> random_mxfp4(size_t nblocks, uint32_t seed, int e_lo = 118, int e_hi = 130) {
  std::mt19937 rng(seed);
  std::vector<BlockMxfp4> b(nblocks);
  for (auto& blk : b) {
    blk.e = static_cast<uint8_t>(std::uniform_int_distribution<int>(e_lo, e_hi)(rng));
    for (auto& q : blk.qs) q = static_cast<uint8_t>(rng());
  }
  return b;
}
inline uint16_t f32_to_half_bits(float f);  // below
inline std::vector<BlockQ8_0> random_q8_0(size_t nblocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(1e-3f, 2e-2f);
  std::vector<BlockQ8_0> b(nblocks);
  for (auto& blk : b) {
    blk.d = f32_to_half_bits(d(rng));
    for (auto& q : blk.qs) q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  }
  return b;
}

// Independent test-side decoders (double), so the kernels' own decoders are checked against them.
inline double half_to_double(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}
inline uint16_t f32_to_half_bits(float f) {  // only normal positive values are needed here
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t e = ((bits >> 23) & 255) - 127 + 15;
  return static_cast<uint16_t>((e << 10) | ((bits >> 13) & 1023));
}
inline std::vector<double> dequant_ref(const std::vector<BlockMxfp4>& b) {
  static const int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  std::vector<double> out(b.size() * kQK);
  for (size_t i = 0; i < b.size(); ++i)
    for (int j = 0; j < 16; ++j) {
      out[i * 32 + j] = std::ldexp(kv[b[i].qs[j] & 15], b[i].e - 128);
      out[i * 32 + j + 16] = std::ldexp(kv[b[i].qs[j] >> 4], b[i].e - 128);
    }
  return out;
}
inline std::vector<double> dequant_ref(const std::vector<BlockQ8_0>& b) {
  std::vector<double> out(b.size() * kQK);
  for (size_t i = 0; i < b.size(); ++i)
    for (int j = 0; j < 32; ++j) out[i * 32 + j] = b[i].qs[j] * half_to_double(b[i].d);
  return out;
}
inline std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }
inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace ferry::test
