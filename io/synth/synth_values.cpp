#include "io/synth/synth_values.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "io/formats/convert.hpp"

namespace ferry {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// SWAR popcount: builds without -march=native (the default) turn std::popcount into a libgcc call,
// which was a third of the time of a synthetic expert. Same integer, so the same values.
inline int popcount64(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ULL);
  x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return int((x * 0x0101010101010101ULL) >> 56);
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
  const int pc = popcount64(r & 0xffffffffffffULL);
  const float u = float(r >> 48) * (1.0f / 65536.0f);
  // popcount: mean 24, variance 12; + uniform: mean 0.5, variance 1/12.
  return (float(pc) + u - 24.5f) * 0.28767798f;  // 1/sqrt(12 + 1/12)
}

namespace {

// Draws a non-routed tensor's values in order, a chunk at a time, so a 1.2 G-element embedding
// never needs an F32 copy (synth_fill_plain) and synth_values stays the same stream.
class PlainStream {
 public:
  PlainStream(const TensorSpec& t, const ModelConfig& c, uint64_t seed)
      : t_(t), rng_(seed, t.name), n_heads_(c.kda.n_heads) {
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    scale_ = t.gain / std::sqrt(float(cols));
  }
  void next(float* out, int64_t k) {
    switch (t_.init) {
      case Init::matrix:
        for (int64_t i = 0; i < k; ++i) out[i] = rng_.normal() * scale_;
        break;
      case Init::embed:
        for (int64_t i = 0; i < k; ++i) out[i] = rng_.normal();
        break;
      case Init::norm:
        for (int64_t i = 0; i < k; ++i) out[i] = 1.0f + 0.1f * rng_.normal();
        break;
      case Init::conv:
        for (int64_t i = 0; i < k; ++i) out[i] = 0.5f * rng_.normal();
        break;
      case Init::a_log:  // decay rates exp(A_log) in [1, 4) for the real heads; padding stays 0
        for (int64_t i = 0; i < k; ++i) out[i] = pos_ + i < n_heads_ ? float(std::log(1.0 + 3.0 * rng_.uniform())) : 0.0f;
        break;
      case Init::dt_bias:
        for (int64_t i = 0; i < k; ++i) out[i] = -1.0f + 0.5f * rng_.normal();
        break;
      case Init::small:
        for (int64_t i = 0; i < k; ++i) out[i] = 0.05f * rng_.normal();
        break;
    }
    pos_ += k;
  }

 private:
  const TensorSpec& t_;
  SynthRng rng_;
  int64_t n_heads_ = 0, pos_ = 0;
  float scale_ = 1.0f;
};

}  // namespace

std::vector<float> synth_values(const TensorSpec& t, const ModelConfig& c, uint64_t seed) {
  std::vector<float> v(size_t(t.numel()), 0.0f);
  PlainStream(t, c, seed).next(v.data(), t.numel());
  return v;
}

void synth_fill_plain(const TensorSpec& t, const ModelConfig& c, uint64_t seed, uint8_t* dst) {
  PlainStream gen(t, c, seed);
  const int64_t n = t.numel(), chunk = int64_t(1) << 16;
  std::vector<float> v(size_t(std::min(n, chunk)));
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t k = std::min(chunk, n - at);
    gen.next(v.data(), k);
    if (t.dtype == DType::f32) {
      std::memcpy(dst + at * 4, v.data(), size_t(k) * 4);
      continue;
    }
    for (int64_t i = 0; i < k; ++i) {
      const uint16_t h = f32_to_bf16(v[size_t(i)]);
      std::memcpy(dst + 2 * (at + i), &h, 2);
    }
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

void synth_expert_blocks(int64_t rows, int64_t cols, uint64_t seed, const std::string& stream, BlockMxfp4* out) {
  SynthRng rng(seed, stream);
  const float s = 1.0f / std::sqrt(float(cols));
  float buf[kQK];
  for (int64_t i = 0, n = rows * cols / kQK; i < n; ++i) {
    for (auto& x : buf) x = rng.fast_normal() * s;
    quantize_block_fast(buf, out[i]);
  }
}

std::vector<BlockMxfp4> synth_expert_blocks(int64_t rows, int64_t cols, uint64_t seed, const std::string& stream) {
  std::vector<BlockMxfp4> blocks(size_t(rows * cols / kQK));
  synth_expert_blocks(rows, cols, seed, stream, blocks.data());
  return blocks;
}

}  // namespace ferry
