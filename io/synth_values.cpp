#include "io/synth_values.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "io/convert.hpp"

namespace ferry {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

}  // namespace

SynthRng::SynthRng(uint64_t seed, const std::string& stream) {
  uint64_t x = seed ^ fnv1a(stream);
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t SynthRng::next() {  // xoshiro256**
  const uint64_t r = std::rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = std::rotl(s_[3], 45);
  return r;
}

double SynthRng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

float SynthRng::normal() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform(), u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
  spare_ = float(r * std::sin(a));
  have_spare_ = true;
  return float(r * std::cos(a));
}

float SynthRng::fast_normal() {
  const uint64_t r = next();
  const int pc = std::popcount(r & 0xffffffffffffULL);
  const float u = float(r >> 48) * (1.0f / 65536.0f);
  // popcount: mean 24, variance 12; + uniform: mean 0.5, variance 1/12.
  return (float(pc) + u - 24.5f) * 0.28767798f;  // 1/sqrt(12 + 1/12)
}

std::vector<float> synth_values(const TensorSpec& t, const ModelConfig& c, uint64_t seed) {
  SynthRng rng(seed, t.name);
  const int64_t n = t.numel();
  std::vector<float> v(size_t(n), 0.0f);
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  switch (t.init) {
    case Init::matrix: {
      const float s = t.gain / std::sqrt(float(cols));
      for (auto& x : v) x = rng.normal() * s;
      break;
    }
    case Init::embed:
      for (auto& x : v) x = rng.normal();
      break;
    case Init::norm:
      for (auto& x : v) x = 1.0f + 0.1f * rng.normal();
      break;
    case Init::conv:
      for (auto& x : v) x = 0.5f * rng.normal();
      break;
    case Init::a_log:  // decay rates exp(A_log) in [1, 4) for the real heads; padding stays 0
      for (int64_t i = 0; i < std::min<int64_t>(n, c.kda.n_heads); ++i) v[size_t(i)] = float(std::log(1.0 + 3.0 * rng.uniform()));
      break;
    case Init::dt_bias:
      for (auto& x : v) x = -1.0f + 0.5f * rng.normal();
      break;
    case Init::small:
      for (auto& x : v) x = 0.05f * rng.normal();
      break;
  }
  return v;
}

void synth_fill_plain(const TensorSpec& t, const ModelConfig& c, uint64_t seed, uint8_t* dst) {
  const auto v = synth_values(t, c, seed);
  if (t.dtype == DType::f32) {
    std::memcpy(dst, v.data(), v.size() * 4);
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

namespace {

// OCP MX quantization of one block (shared exponent floor(log2(amax)) - 2, nearest E2M1 magnitude,
// ties to the smaller), written for speed: the billions of synthetic expert values go through here.
// Multiplying by a power of two is exact, so this is the same rounding as convert.hpp's quantize_mxfp4
// up to tie-breaking, which only matters for values exactly between two codes.
void quantize_block_fast(const float* x, BlockMxfp4& b) {
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  int e = -127;
  if (amax > 0) {
    int ex = 0;
    std::frexp(amax, &ex);
    e = std::clamp(ex - 3, -127, 127);
  }
  b.e = uint8_t(e + 127);
  const float inv = std::ldexp(1.0f, -e);
  static constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t code[kQK];
  for (int j = 0; j < kQK; ++j) {
    const float v = x[j] * inv, a = std::fabs(v);
    int idx = 0;
    for (float m : kMid) idx += a > m;
    code[j] = uint8_t(idx | ((v < 0 && idx > 0) ? 8 : 0));
  }
  for (int j = 0; j < kQK / 2; ++j) b.qs[j] = uint8_t(code[j] | (code[j + kQK / 2] << 4));
}

}  // namespace

std::vector<BlockMxfp4> synth_expert_blocks(int64_t rows, int64_t cols, uint64_t seed, const std::string& stream) {
  SynthRng rng(seed, stream);
  const float s = 1.0f / std::sqrt(float(cols));
  std::vector<BlockMxfp4> blocks(size_t(rows * cols / kQK));
  float buf[kQK];
  for (auto& b : blocks) {
    for (auto& x : buf) x = rng.fast_normal() * s;
    quantize_block_fast(buf, b);
  }
  return blocks;
}

}  // namespace ferry
