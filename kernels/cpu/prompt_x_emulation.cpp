#include "kernels/cpu/prompt_x_emulation.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "io/errors.hpp"
#include "io/formats/convert.hpp"

namespace ferry::cpu {

namespace {

std::atomic<int> g_bits{0};

// v rounded to `sig` significant bits, binades below 2^min_exp sharing its quantum (the subnormals), ties to even
// (std::nearbyint under the default rounding mode; divisions by powers of two are exact). For E4M3, which the
// formats' conversions (io/formats/convert.hpp) do not have.
float round_sig(float v, int sig, int min_exp) {
  if (v == 0.0f || !std::isfinite(v)) return v;
  const double a = std::fabs(static_cast<double>(v));
  const int e = std::max(std::ilogb(a), min_exp);  // the binade, or the subnormal range's
  const double q = std::ldexp(1.0, e - (sig - 1));
  const double r = std::nearbyint(a / q) * q;
  return static_cast<float>(v < 0 ? -r : r);
}

// As xprep::scale_exp (kernels/cuda/xprep.cuh): k with max |x * 2^k| in [2^14, 2^15), 0 for a row of zeros or
// non-finite values.
int scale_exp(float m) {
  if (!(m > 0.0f && std::isfinite(m))) return 0;
  int e = 0;
  std::frexp(m, &e);
  return std::max(-125, std::min(125, 15 - e));
}

}  // namespace

float round_to_fp16(float v) { return f16_to_f32(f32_to_f16(v)); }

float round_to_e4m3(float v) {
  if (std::isnan(v)) return v;
  const float r = round_sig(std::clamp(v, -448.0f, 448.0f), 4, -6);
  return std::clamp(r, -448.0f, 448.0f);
}

void round_prompt_x(const float* x, int64_t n, int64_t cols, int bits, float* out) {
  if (bits != 11 && bits != 15 && bits != 22) throw ConfigError("prompt x emulation: " + std::to_string(bits) + " bits");
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * cols;
    float m = 0.0f;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, std::fabs(xr[c]));
    const int k = scale_exp(m);
    const float up = std::ldexp(1.0f, k), down = std::ldexp(1.0f, -k);
    for (int64_t c = 0; c < cols; ++c) {
      const float a = xr[c] * up;  // exact
      const float hi = round_to_fp16(a);
      const float l = a - hi;  // exact
      const float lo = bits == 22 ? round_to_fp16(l) : bits == 15 ? round_to_e4m3(l * 32.0f) / 32.0f : 0.0f;
      out[r * cols + c] = (hi + lo) * down;
    }
  }
}

void emulate_prompt_x_bits(int bits) {
  if (bits != 0 && bits != 11 && bits != 15 && bits != 22)
    throw ConfigError("prompt x emulation: " + std::to_string(bits) + " bits (0, 11, 15 or 22)");
  g_bits.store(bits);
}
int emulated_prompt_x_bits() { return g_bits.load(); }

int emulated_bits_for(const Weight& w) {
  const int bits = g_bits.load();
  if (bits == 0 || w.cols % 128 != 0) return 0;
  if (w.type == WType::mxfp4) return bits;
  if (w.type == WType::q8_0) return bits == 11 ? 11 : 22;
  return 0;
}

}  // namespace ferry::cpu
