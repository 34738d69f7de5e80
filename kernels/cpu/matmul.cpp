// matmul and embed. Each output y[r, o] is one dot product (dot.hpp order) of x row r with weight row o,
// computed by one thread, so the result is independent of the row count, the row's place in the call
// and the thread count. Quantized rows are decoded exactly to floats in chunks of kChunk columns and fed
// to the same dot routine; each decoded chunk serves a group of up to kRowGroup rows, so the weight
// bytes are read once per 16 rows.
//
// The kernels are compiled twice: portable (baseline x86-64 / any target) and, on x86, with AVX2
// enabled for the auto-vectorizer plus an AVX2 block decoder. Both do the same IEEE operations in the
// same order, so they give the same bits; the AVX2 one is picked at run time when the CPU has it.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "io/errors.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/prompt_x_emulation.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/quant.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FERRY_X86 1
#endif

namespace ferry::cpu {

namespace {

constexpr int kRowGroup = 16;
constexpr int64_t kChunkBlocks = 16;
constexpr int64_t kChunk = kChunkBlocks * kQK;  // 512 columns, 2 KiB of decoded floats

std::atomic<bool> g_force_portable{false};

struct Job {
  const uint8_t* w = nullptr;
  size_t row_bytes = 0;
  int64_t rows = 0, cols = 0;  // weight shape
  const float* x = nullptr;
  int64_t n = 0;
  float* y = nullptr;
  const float* e8m0 = nullptr;
};

// Decoders: return a pointer to the floats of columns [c0, c0 + len) of one weight row.
struct F32Src {
  static constexpr bool kFused = false;
  static FERRY_ALWAYS_INLINE const float* get(const Job&, const uint8_t* row, int64_t c0, int64_t, float*) {
    return reinterpret_cast<const float*>(row) + c0;
  }
};

namespace portable {
struct Q8Src {
  static constexpr bool kFused = false;
  static FERRY_ALWAYS_INLINE const float* get(const Job&, const uint8_t* row, int64_t c0, int64_t len, float* buf) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + c0 / kQK;
    for (int64_t i = 0; i < len / kQK; ++i) decode_q8_0_block(b[i], buf + i * kQK);
    return buf;
  }
};
struct Mxfp4Src {
  static constexpr bool kFused = false;
  static FERRY_ALWAYS_INLINE const float* get(const Job& j, const uint8_t* row, int64_t c0, int64_t len,
                                              float* buf) {
    const auto* b = reinterpret_cast<const BlockMxfp4*>(row) + c0 / kQK;
    for (int64_t i = 0; i < len / kQK; ++i) decode_mxfp4_block(b[i], j.e8m0, buf + i * kQK);
    return buf;
  }
};

#include "kernels/cpu/matmul_range.inc"
}  // namespace portable

#ifdef FERRY_X86
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
// AVX2 block decoders: a byte shuffle looks the 16 E2M1 values up for 16 nibbles at once. Same
// values as the portable decoders (exact integers times the exact scale). The fused one-row path
// (kFused) keeps a decoded block in registers and applies it straight to the 32 lane accumulators:
// the same multiply and add per lane as dot_accum, so the same bits.
struct Block8 {
  __m256 w[4];  // columns 0-7, 8-15, 16-23, 24-31 of one block
};
FERRY_ALWAYS_INLINE void fused_accum(__m256* acc, const float* x, const Block8& b) {
  for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), b.w[k]));
}
FERRY_ALWAYS_INLINE __m256 i8_to_ps(__m128i v, __m256 d) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d);
}

struct Mxfp4Src {
  static constexpr bool kFused = true;
  static FERRY_ALWAYS_INLINE Block8 decode(const Job& j, const BlockMxfp4& b) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
    const __m128i mask = _mm_set1_epi8(15);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, mask));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), mask));
    const __m256 d = _mm256_set1_ps(j.e8m0[b.e]);
    return {{i8_to_ps(lo, d), i8_to_ps(_mm_srli_si128(lo, 8), d), i8_to_ps(hi, d), i8_to_ps(_mm_srli_si128(hi, 8), d)}};
  }
  static FERRY_ALWAYS_INLINE const float* get(const Job& j, const uint8_t* row, int64_t c0, int64_t len, float* buf) {
    const auto* b = reinterpret_cast<const BlockMxfp4*>(row) + c0 / kQK;
    for (int64_t i = 0; i < len / kQK; ++i) {
      const Block8 v = decode(j, b[i]);
      for (int k = 0; k < 4; ++k) _mm256_store_ps(buf + i * kQK + 8 * k, v.w[k]);
    }
    return buf;
  }
  static FERRY_ALWAYS_INLINE void fused(const Job& j, const uint8_t* row, const float* x, float* acc_out) {
    const auto* b = reinterpret_cast<const BlockMxfp4*>(row);
    __m256 acc[4];
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_loadu_ps(acc_out + 8 * k);
    for (int64_t i = 0; i < j.cols / kQK; ++i) fused_accum(acc, x + i * kQK, decode(j, b[i]));
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(acc_out + 8 * k, acc[k]);
  }
};
struct Q8Src {
  static constexpr bool kFused = true;
  static FERRY_ALWAYS_INLINE Block8 decode(const Job&, const BlockQ8_0& b) {
    const __m256 d = _mm256_set1_ps(half_to_float(b.d));
    Block8 v;
    for (int k = 0; k < 4; ++k) v.w[k] = i8_to_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * k)), d);
    return v;
  }
  static FERRY_ALWAYS_INLINE const float* get(const Job& j, const uint8_t* row, int64_t c0, int64_t len, float* buf) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + c0 / kQK;
    for (int64_t i = 0; i < len / kQK; ++i) {
      const Block8 v = decode(j, b[i]);
      for (int k = 0; k < 4; ++k) _mm256_store_ps(buf + i * kQK + 8 * k, v.w[k]);
    }
    return buf;
  }
  static FERRY_ALWAYS_INLINE void fused(const Job& j, const uint8_t* row, const float* x, float* acc_out) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
    __m256 acc[4];
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_loadu_ps(acc_out + 8 * k);
    for (int64_t i = 0; i < j.cols / kQK; ++i) fused_accum(acc, x + i * kQK, decode(j, b[i]));
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(acc_out + 8 * k, acc[k]);
  }
};

#include "kernels/cpu/matmul_range.inc"
}  // namespace avx2
#pragma GCC pop_options

bool use_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && !g_force_portable.load(std::memory_order_relaxed);
}
#else
bool use_avx2() { return false; }
namespace avx2 {
using portable::matmul_rows;
}
#endif

const char* type_name(WType t) {
  switch (t) {
    case WType::f32: return "f32";
    case WType::q8_0: return "q8_0";
    case WType::mxfp4: return "mxfp4";
  }
  return "?";
}

}  // namespace

const float* e8m0_half_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int e = 0; e < 256; ++e) t[e] = std::ldexp(1.0f, e - 128);  // exact, denormal for e < 2
    return t;
  }();
  return table.data();
}

void force_portable_kernels(bool on) { g_force_portable.store(on); }

void CpuBackend::matmul(const Weight& w, const float* x, int64_t n, float* y) {
  if (n <= 0) return;
  if (w.empty() || w.rows <= 0 || w.cols <= 0)
    throw TensorError("cpu matmul: empty weight (rows=" + std::to_string(w.rows) + ", cols=" +
                      std::to_string(w.cols) + ")");
  if (w.layout != WLayout::rows)
    throw TensorError(std::string("cpu matmul: a weight in another back-end's layout (") +
                      (w.layout == WLayout::q8_tiles ? "q8_0 tiles" : "mxfp4 tiles") + ")");
  std::vector<float> rounded;  // x as the CUDA prompt kernels take it (prompt_x_emulation.hpp; off by default)
  if (const int bits = prompt_pass_ ? emulated_bits_for(w) : 0) {
    rounded.resize(static_cast<size_t>(n * w.cols));
    round_prompt_x(x, n, w.cols, bits, rounded.data());
    x = rounded.data();
  }
  const Job j{static_cast<const uint8_t*>(w.data), w.row_bytes(), w.rows, w.cols, x, n, y, e8m0_half_table()};
  const bool avx2 = use_avx2();
  // At least ~64k multiply-adds per thread range; smaller matmuls stay on the calling thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (w.cols * std::min<int64_t>(n, kRowGroup)));
  pool_.parallel_for(
      w.rows, [&](int64_t o0, int64_t o1) { avx2 ? avx2::matmul_rows(w.type, j, o0, o1) : portable::matmul_rows(w.type, j, o0, o1); },
      grain);
}

void CpuBackend::embed(const Weight& table, const int32_t* ids_host, int64_t n, float* y) {
  if (table.empty()) throw TensorError("cpu embed: empty table");
  if (table.type == WType::mxfp4) throw TensorError("cpu embed: mxfp4 tables are not supported (f32 or q8_0)");
  if (table.layout != WLayout::rows)
    throw TensorError(std::string("cpu embed: a table in another back-end's layout (") +
                      (table.layout == WLayout::q8_tiles ? "q8_0 tiles" : "mxfp4 tiles") + ")");
  const size_t rb = table.row_bytes();
  const auto* base = static_cast<const uint8_t*>(table.data);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids_host[i];
    if (id < 0 || id >= table.rows)
      throw LimitError("cpu embed: token id " + std::to_string(id) + " outside the " + type_name(table.type) +
                       " table of " + std::to_string(table.rows) + " rows");
    const uint8_t* row = base + static_cast<size_t>(id) * rb;
    float* yr = y + i * table.cols;
    if (table.type == WType::f32) {
      std::copy_n(reinterpret_cast<const float*>(row), table.cols, yr);
    } else {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
      for (int64_t k = 0; k < table.cols / kQK; ++k) decode_q8_0_block(b[k], yr + k * kQK);
    }
  }
}

}  // namespace ferry::cpu
