// The E2M1 decode of the tensor-core kernels (kernels/cuda/e2m1_bits.cuh), checked on the host on every
// byte: the row layout's and the mxfp4 tiles' re-ordered bytes give the same fp16 high bytes, and those are
// the E2M1 values times 2^-14. The GPU tests (Ops.MxTiles*) compare the kernels' bits; these pin the
// formulas themselves. No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>

#if FERRY_WITH_CUDA
#include "kernels/cuda/e2m1_bits.cuh"
#endif

namespace {

#if FERRY_WITH_CUDA
namespace e2m1 = ferry::cuda::e2m1;

// The row layout's word q re-ordered byte by byte, as the mxfp4 tiles' pack kernel stores it.
uint32_t tile_word(uint32_t q) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i) w |= e2m1::tile_byte((q >> (8 * i)) & 0xFFu) << (8 * i);
  return w;
}

// An fp16 (bits) as a double, subnormals included.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

// The E2M1 value of a nibble s|e1 e0|m (OCP MX: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives).
double e2m1_value(int n) {
  static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return (n & 8) ? -mag[n & 7] : mag[n & 7];
}

TEST(E2m1Bits, TileByteIsAPermutationOfTheByteValues) {
  std::set<uint32_t> seen;
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t t = e2m1::tile_byte(b);
    ASSERT_LT(t, 256u) << b;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 256u);
}

TEST(E2m1Bits, EveryNibbleDecodesToItsValueTimesTwoToTheMinus14InBothLayouts) {
  for (int n = 0; n < 16; ++n)
    for (int other = 0; other < 16; ++other) {
      const uint32_t lo_byte = static_cast<uint32_t>(other << 4 | n);  // n the low nibble (element j)
      const uint32_t hi_byte = static_cast<uint32_t>(n << 4 | other);  // n the high nibble (element j + 16)
      const double want = std::ldexp(e2m1_value(n), -14);
      EXPECT_EQ(half_value(static_cast<uint16_t>((e2m1::row_lo(lo_byte) & 0xFFu) << 8)), want) << n << " low, row";
      EXPECT_EQ(half_value(static_cast<uint16_t>((e2m1::row_hi(hi_byte) & 0xFFu) << 8)), want) << n << " high, row";
      EXPECT_EQ(half_value(static_cast<uint16_t>((e2m1::tile_lo(e2m1::tile_byte(lo_byte)) & 0xFFu) << 8)), want)
          << n << " low, tiles";
      EXPECT_EQ(half_value(static_cast<uint16_t>((e2m1::tile_hi(e2m1::tile_byte(hi_byte)) & 0xFFu) << 8)), want)
          << n << " high, tiles";
    }
}

// Shifts move bits across byte boundaries; the masks must drop them at every byte of a word.
TEST(E2m1Bits, TilesDecodeEveryWordAsTheRowLayoutDoes) {
  auto check = [](uint32_t q) {
    ASSERT_EQ(e2m1::tile_lo(tile_word(q)), e2m1::row_lo(q)) << std::hex << q;
    ASSERT_EQ(e2m1::tile_hi(tile_word(q)), e2m1::row_hi(q)) << std::hex << q;
  };
  for (uint32_t v = 0; v < 65536; ++v) {
    check(v);
    check(v << 8);
    check(v << 16);
    check(v | v << 16);
  }
  std::mt19937 rng(14);
  for (int i = 0; i < 200000; ++i) check(static_cast<uint32_t>(rng()));
}

TEST(E2m1Bits, Scale14IsTwoToTheEMinus113AndInfiniteFrom241) {
  for (uint32_t e = 0; e < 256; ++e) {
    const uint32_t bits = e2m1::scale14_bits(e);
    float f;
    std::memcpy(&f, &bits, 4);
    if (e <= 240)
      EXPECT_EQ(f, std::ldexp(1.0f, static_cast<int>(e) - 113)) << e;
    else
      EXPECT_TRUE(std::isinf(f) && f > 0) << e;
  }
}
#else
TEST(E2m1Bits, NeedsTheCudaHeaders) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
