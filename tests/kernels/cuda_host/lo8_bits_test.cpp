// x's lo as E4M3 (kernels/cuda/lo8_bits.cuh), checked on the host: E2M1 weights become their E4M3 bytes exactly,
// and the fragments the prompt kernel builds (its fp16 fragments' bytes for A, prep_x's lo8 rows for B), read
// as PTX lays out mma.m16n8k32's 8-bit fragments, give every output of a quant block the dot product of the
// weights' row and x's row over the block's 32 columns. The GPU tests (Ops.*Lo8*) compare the kernels' results;
// this pins the layout arithmetic itself. No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>

#if FERRY_WITH_CUDA
#include "kernels/cuda/e2m1_bits.cuh"
#include "kernels/cuda/lo8_bits.cuh"
#endif

namespace {

#if FERRY_WITH_CUDA
namespace e2m1 = ferry::cuda::e2m1;
namespace lo8 = ferry::cuda::lo8;

double e2m1_value(int n) {
  static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return (n & 8) ? -mag[n & 7] : mag[n & 7];
}

// An E4M3 byte (OCP FP8: bias 7, subnormals m * 2^-9; 0x7F / 0xFF are NaN and not used here) as a double.
double e4m3_value(uint32_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (b & 0x80) ? -mag : mag;
}

// The fp16 high byte the kernels decode nibble n to (e2m1::row_lo of a byte whose low nibble is n).
uint32_t high_byte(int n) { return e2m1::row_lo(static_cast<uint32_t>(n)) & 0xFFu; }

TEST(Lo8Bits, EveryE2m1WeightBecomesTheE4m3OfItsValueTimesTwoToTheMinus6InEveryByte) {
  for (int n = 0; n < 16; ++n)
    for (int byte = 0; byte < 4; ++byte) {
      const uint32_t e = lo8::e4m3_of_high((0x8E8E8E8Eu & ~(0xFFu << (8 * byte))) | (high_byte(n) << (8 * byte)));
      EXPECT_EQ(e4m3_value((e >> (8 * byte)) & 0xFFu), std::ldexp(e2m1_value(n), -6)) << "nibble " << n << " byte " << byte;
    }
}

TEST(Lo8Bits, Lo8PositionsArePermutationsOfEach16ColumnsKeepingPairsTogether) {
  std::set<int64_t> seen;
  for (int64_t c = 0; c < 64; ++c) {
    const int64_t p = lo8::lo8_pos(c);
    EXPECT_EQ(p / 16, c / 16) << c;
    seen.insert(p);
    if (c % 2 == 0) {
      EXPECT_EQ(lo8::lo8_pos(c + 1), p + 1) << c;
    }
  }
  EXPECT_EQ(seen.size(), 64u);
}

// One quant block: 16 weight rows x 32 columns of E2M1 nibbles, 8 rows of x's lo as E4M3 bytes. Per lane (g, t)
// the kernel's registers: the fp16 fragments of step s (rows g / g + 8: columns 16s + 2t, 16s + 2t + 1 in f0 / f1,
// 16s + 8 + 2t, 16s + 9 + 2t in f2 / f3) turned into the E4M3 A words, and B's two words read from x row g's lo8
// bytes 4t and 16 + 4t (what ldmatrix gives lane (g, t)). PTX's m16n8k32 layout then puts a0 at (row g, col 4t + j),
// a1 at (g + 8, 4t + j), a2 at (g, 16 + 4t + j), a3 at (g + 8, 16 + 4t + j), b0 at (k 4t + j, col g), b1 at
// (16 + 4t + j, g).
TEST(Lo8Bits, KernelFragmentsGiveEachOutputTheDotProductOverTheBlocksColumns) {
  std::mt19937 rng(15);
  for (int trial = 0; trial < 50; ++trial) {
    int w[16][32];
    uint32_t x[8][32];  // x[n][c]: E4M3 byte of column c of row n
    for (auto& r : w)
      for (int& v : r) v = static_cast<int>(rng() % 16);
    for (auto& r : x)
      for (uint32_t& v : r) {
        do v = rng() % 256; while ((v & 0x7F) == 0x7F);
      }
    uint8_t row8[8][32];  // x's rows as prep_x writes lo8
    for (int n = 0; n < 8; ++n)
      for (int c = 0; c < 32; ++c) row8[n][lo8::lo8_pos(c)] = static_cast<uint8_t>(x[n][c]);
    double a[16][32] = {}, b[32][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, t = lane & 3;
      const auto pair = [&](int row, int c) { return high_byte(w[row][c]) << 8 | high_byte(w[row][c + 1]) << 24; };
      uint32_t a8[4];
      for (int s = 0; s < 2; ++s) {
        a8[2 * s] = lo8::a_word(pair(g, 16 * s + 2 * t), pair(g, 16 * s + 8 + 2 * t));
        a8[2 * s + 1] = lo8::a_word(pair(g + 8, 16 * s + 2 * t), pair(g + 8, 16 * s + 8 + 2 * t));
      }
      uint32_t b8[2];
      for (int h = 0; h < 2; ++h) {
        b8[h] = 0;
        for (int j = 0; j < 4; ++j) b8[h] |= uint32_t{row8[g][16 * h + 4 * t + j]} << (8 * j);
      }
      for (int j = 0; j < 4; ++j) {
        const auto byte = [j](uint32_t v) { return (v >> (8 * j)) & 0xFFu; };
        a[g][4 * t + j] = e4m3_value(byte(a8[0]));
        a[g + 8][4 * t + j] = e4m3_value(byte(a8[1]));
        a[g][16 + 4 * t + j] = e4m3_value(byte(a8[2]));
        a[g + 8][16 + 4 * t + j] = e4m3_value(byte(a8[3]));
        b[4 * t + j][g] = e4m3_value(byte(b8[0]));
        b[16 + 4 * t + j][g] = e4m3_value(byte(b8[1]));
      }
    }
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        double got = 0, want = 0;
        for (int k = 0; k < 32; ++k) got += a[m][k] * b[k][n];
        for (int c = 0; c < 32; ++c) want += std::ldexp(e2m1_value(w[m][c]), -6) * e4m3_value(x[n][c]);
        ASSERT_EQ(got, want) << "trial " << trial << " output (" << m << ", " << n << ")";
      }
  }
}
#else
TEST(Lo8Bits, NeedsACudaBuild) { GTEST_SKIP() << "no CUDA in this build"; }
#endif

}  // namespace
