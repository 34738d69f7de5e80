// Conversions: fp16/bf16 rounding against the compiler's own conversions, E8M0, and the exactness of
// the compressed-tensors -> ggml MXFP4 repack (bitwise) on random bytes and on the fixtures' experts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "io/formats/checkpoint.hpp"
#include "io/formats/convert.hpp"
#include "io/formats/ct_mxfp4.hpp"
#include "io/errors.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t h_bits(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
}  // namespace

TEST(Convert, F16RoundsLikeTheCompilersFloat16Conversion) {
  std::mt19937 rng(1);
  for (int i = 0; i < 2'000'000; ++i) {
    float f = from_bits(rng());
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h_bits(static_cast<_Float16>(f))) << std::hexfloat << f;
  }
  // Exact halfway cases: 1 + 2^-11 ties to 1.0 (even), 1 + 3*2^-11 ties up to 1 + 2^-9.
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // rounds to infinity
}

TEST(Convert, F16DecodesEveryBitPatternExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 ref;
    uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&ref, &hb, 2);
    float f = f16_to_f32(hb);
    if (std::isnan(static_cast<float>(ref))) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    ASSERT_EQ(bits(f), bits(static_cast<float>(ref))) << h;
    ASSERT_EQ(f32_to_f16(f), hb);  // and back
  }
}

TEST(Convert, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);       // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);   // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h);
    }
  }
  std::vector<uint16_t> src{0x3F80, 0x4000, 0xBF80};
  std::vector<float> dst(3);
  bf16_to_f32_n(src.data(), dst.data(), 3);
  EXPECT_EQ(dst, (std::vector<float>{1.f, 2.f, -1.f}));
}

TEST(Convert, E8m0HalfIsTwoToTheEMinus128IncludingDenormals) {
  for (int e = 0; e < 256; ++e)
    ASSERT_EQ(bits(e8m0_to_f32_half(static_cast<uint8_t>(e))), bits(std::ldexp(1.0f, e - 128))) << e;
}

namespace {
// Repacks CT bytes to ggml and checks: ggml dequant == CT dequant bitwise; the inverse returns the bytes.
void expect_exact_repack(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols) {
  std::vector<BlockMxfp4> blocks(rows * cols / kQK);
  ct_mxfp4_to_ggml(packed, scale, rows, cols, blocks.data());
  std::vector<float> a(rows * cols), b(rows * cols, -1.0f);
  dequant_ct_mxfp4(packed, scale, rows, cols, a.data());
  dequant_mxfp4(blocks.data(), b.data(), rows * cols);
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  std::vector<uint8_t> p2(rows * cols / 2), s2(rows * cols / kQK);
  ggml_mxfp4_to_ct(blocks.data(), rows, cols, p2.data(), s2.data());
  ASSERT_EQ(std::memcmp(p2.data(), packed, p2.size()), 0);
  ASSERT_EQ(std::memcmp(s2.data(), scale, s2.size()), 0);
}
}  // namespace

TEST(Convert, CtToGgmlRepackIsBitExactOnRandomBytes) {
  std::mt19937 rng(7);
  const int64_t rows = 37, cols = 256;  // every scale byte 0..255 appears, incl. denormal and 0xFF
  std::vector<uint8_t> packed(rows * cols / 2), scale(rows * cols / kQK);
  for (auto& x : packed) x = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = static_cast<uint8_t>(i);
  expect_exact_repack(packed.data(), scale.data(), rows, cols);
  // Element order: CT byte 0 = (elem 0 lo, elem 1 hi); ggml qs[0] = (elem 0 lo, elem 16 hi).
  uint8_t p[16] = {0x21}, s[1] = {128};  // elem0 = code 1 (0.5), elem1 = code 2 (1.0), scale 2^1
  BlockMxfp4 blk;
  ct_mxfp4_to_ggml(p, s, 1, 32, &blk);
  float y[32];
  dequant_mxfp4(&blk, y, 32);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[16], 0.0f);
}

TEST(Convert, CtToGgmlRepackIsBitExactOnEveryFixtureExpert) {
  const fs::path fix = FERRY_FIXTURES;
  int checked = 0;
  for (const char* dir : {"kimi_linear-a", "deepseek_v3-a", "deepseek_v32-a", "k3-tiny-a/hf"}) {
    auto src = open_safetensors_checkpoint(fix / dir);
    for (const auto& n : src->names()) {
      if (!n.ends_with(".weight_packed")) continue;
      auto w = find_ct_mxfp4(*src, n.substr(0, n.size() - 14));
      SCOPED_TRACE(n);
      expect_exact_repack(w.packed.data, w.scale.data, w.rows, w.cols);
      // The fixtures were quantized by make_hf_fixtures.py mxfp4(); quantize_mxfp4 of their
      // dequantized values must reproduce the same blocks (same exponent and tie rule).
      std::vector<float> deq(w.rows * w.cols);
      dequant_ct_mxfp4(w.packed.data, w.scale.data, w.rows, w.cols, deq.data());
      std::vector<BlockMxfp4> q(deq.size() / kQK);
      quantize_mxfp4(deq.data(), q.data(), deq.size());
      auto want = ct_mxfp4_to_blocks(w);
      ASSERT_EQ(std::memcmp(q.data(), want.data(), q.size() * sizeof(BlockMxfp4)), 0);
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(Convert, QuantizeMxfp4ExponentAndTiesTowardSmallerMagnitude) {
  // amax 4 -> shared exponent floor(log2 4) - 2 = 0 (byte 127), so x maps straight onto E2M1.
  float x[32] = {4.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -5.0f, -0.25f, 0.26f, -3.0f, 4.0f};
  BlockMxfp4 b;
  quantize_mxfp4(x, &b, 32);
  EXPECT_EQ(b.e, 127);
  float y[32];
  dequant_mxfp4(&b, y, 32);
  float want[13] = {4.0f, 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, -4.0f, 0.0f, 0.5f, -3.0f, 4.0f};
  for (int i = 0; i < 13; ++i) EXPECT_EQ(y[i], want[i]) << i;
  // amax 7.9 -> exponent 0, 7.9 clamps to 6; all-zero block -> byte 0.
  float z[32] = {7.9f};
  quantize_mxfp4(z, &b, 32);
  EXPECT_EQ(b.e, 127);
  dequant_mxfp4(&b, y, 32);
  EXPECT_EQ(y[0], 6.0f);
  float zero[32] = {};
  quantize_mxfp4(zero, &b, 32);
  EXPECT_EQ(b.e, 0);
}

TEST(Convert, Q8_0MatchesGgmlReferenceRounding) {
  float x[32] = {127.0f, 2.5f, -2.5f, 0.49f, -126.5f};
  BlockQ8_0 b;
  quantize_q8_0(x, &b, 32);
  EXPECT_EQ(b.d, f32_to_f16(1.0f));
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);   // roundf: half away from zero
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 0);
  EXPECT_EQ(b.qs[4], -127);
  float zero[32] = {};
  quantize_q8_0(zero, &b, 32);
  EXPECT_EQ(b.d, 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], 0);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 0.02f);
  std::vector<float> v(4096), back(4096);
  for (auto& f : v) f = nd(rng);
  std::vector<BlockQ8_0> q(128);
  quantize_q8_0(v.data(), q.data(), 4096);
  dequant_q8_0(q.data(), back.data(), 4096);
  for (int i = 0; i < 4096; ++i) {
    float d = f16_to_f32(q[i / 32].d);
    // Half a step, plus 127 steps times fp16's relative rounding of d (2^-11): 0.5 + 127/2048 < 0.57.
    ASSERT_LE(std::fabs(back[i] - v[i]), d * 0.57f) << i;
  }
}

TEST(CtMxfp4, WrongShapesAndDtypesNameTheTensor) {
  auto src = open_safetensors_checkpoint(fs::path(FERRY_FIXTURES) / "deepseek_v3-a");
  auto w = find_ct_mxfp4(*src, "model.layers.1.mlp.experts.3.gate_proj", 64, 128);
  EXPECT_EQ(w.rows, 64);
  EXPECT_EQ(w.cols, 128);
  EXPECT_TRUE(has_ct_mxfp4(*src, "model.layers.1.mlp.experts.3.gate_proj"));
  try {
    find_ct_mxfp4(*src, "model.layers.1.mlp.experts.3.gate_proj", 128, 128);
    FAIL();
  } catch (const TensorError& e) {
    EXPECT_NE(std::string(e.what()).find("experts.3.gate_proj.weight_packed"), std::string::npos) << e.what();
  }
  try {
    find_ct_mxfp4(*src, "model.layers.1.mlp.experts.99.gate_proj");
    FAIL();
  } catch (const TensorError& e) {
    EXPECT_NE(std::string(e.what()).find("experts.99.gate_proj.weight_packed"), std::string::npos) << e.what();
  }
  try {
    find_ct_mxfp4(*src, "model.embed_tokens");  // no weight_packed
    FAIL();
  } catch (const TensorError& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight_packed"), std::string::npos) << e.what();
  }
}
