// Memory, element-wise and normalisation ops of the CPU back-end. Element-wise ops compute each output
// from its own inputs only, so any split over threads gives the same bits. Row reductions (norms) are
// done in double in index order, one row per thread, so a row's result is the same whatever the row
// count of the call.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/errors.hpp"
#include "kernels/cpu/cpu_backend.hpp"

namespace ferry::cpu {

namespace {
constexpr int64_t kElemGrain = 1 << 15;  // below ~32k elements a thread wake-up costs more than it saves
constexpr size_t kAlign = 64;
}  // namespace

std::string CpuBackend::name() const { return "cpu(" + std::to_string(pool_.size()) + " threads)"; }

void* CpuBackend::alloc(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded ? rounded : kAlign);
  if (!p) throw LimitError("cpu back-end: out of host memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  return p;
}
void* CpuBackend::alloc_uninit(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded ? rounded : kAlign);
  if (!p) throw LimitError("cpu back-end: out of host memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0xff, rounded);  // every float a NaN: reading what no op wrote poisons the logits
  return p;
}
void CpuBackend::release(void* p) { std::free(p); }
void CpuBackend::upload(void* dst, const void* src_host, size_t bytes) { std::memcpy(dst, src_host, bytes); }
void CpuBackend::download(void* dst_host, const void* src, size_t bytes) { std::memcpy(dst_host, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

template <class F>
void CpuBackend::for_elems(int64_t n, F&& f) {
  pool_.parallel_for(
      n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) f(i);
      },
      kElemGrain);
}

// ---- normalisation ---------------------------------------------------------------------------------

namespace {
// 1/sqrt(mean(x^2) + eps) with the sum of squares in double, in index order.
float rms_inv(const float* x, int64_t dim, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
}
int64_t row_grain(int64_t dim) { return std::max<int64_t>(1, kElemGrain / std::max<int64_t>(dim, 1)); }
}  // namespace

void CpuBackend::rmsnorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) {
  pool_.parallel_for(
      rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * dim;
          float* yr = y + r * dim;
          const float inv = rms_inv(xr, dim, eps);
          // HF order: (x * rsqrt(...)) then * w.
          for (int64_t i = 0; i < dim; ++i) yr[i] = w ? (xr[i] * inv) * w[i] : xr[i] * inv;
        }
      },
      row_grain(dim));
}

void CpuBackend::layernorm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                           float* y) {
  pool_.parallel_for(
      rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * dim;
          float* yr = y + r * dim;
          double s = 0.0;
          for (int64_t i = 0; i < dim; ++i) s += xr[i];
          const double mean = s / static_cast<double>(dim);
          double ss = 0.0;  // two-pass variance: no cancellation
          for (int64_t i = 0; i < dim; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
          const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
          const auto meanf = static_cast<float>(mean);
          for (int64_t i = 0; i < dim; ++i) {
            float v = (xr[i] - meanf) * inv;
            if (w) v = v * w[i];
            if (b) v = v + b[i];
            yr[i] = v;
          }
        }
      },
      row_grain(dim));
}

void CpuBackend::l2norm(const float* x, int64_t rows, int64_t dim, float eps, float* y) {
  pool_.parallel_for(
      rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * dim;
          float* yr = y + r * dim;
          double ss = 0.0;
          for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
          const auto inv = static_cast<float>(1.0 / std::sqrt(ss + eps));  // fla: x * rsqrt(sum + eps)
          for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv;
        }
      },
      row_grain(dim));
}

// ---- element-wise ------------------------------------------------------------------------------------

void CpuBackend::add(const float* a, const float* b, int64_t n, float* y) {
  for_elems(n, [&](int64_t i) { y[i] = a[i] + b[i]; });
}
void CpuBackend::scale(float* x, float s, int64_t n) {
  for_elems(n, [&](int64_t i) { x[i] = x[i] * s; });
}
void CpuBackend::axpy(float a, const float* x, int64_t n, float* y) {
  for_elems(n, [&](int64_t i) { y[i] = y[i] + a * x[i]; });
}
void CpuBackend::copy2d(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                        int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    std::memmove(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(cols) * sizeof(float));
}
void CpuBackend::swiglu(const float* g, const float* u, int64_t n, float* y) {
  for_elems(n, [&](int64_t i) { y[i] = silu(g[i]) * u[i]; });
}
void CpuBackend::situ(const float* g, const float* u, int64_t n, float beta, float lbeta, float* y) {
  for_elems(n, [&](int64_t i) {
    const float gp = (beta * std::tanh(g[i] / beta)) * sigmoidf(g[i]);
    const float up = lbeta > 0.0f ? lbeta * std::tanh(u[i] / lbeta) : u[i];
    y[i] = gp * up;
  });
}
void CpuBackend::sigmoid(const float* x, int64_t n, float* y) {
  for_elems(n, [&](int64_t i) { y[i] = sigmoidf(x[i]); });
}
void CpuBackend::sigmoid_mul(const float* x, const float* gate, int64_t n, float* y) {
  for_elems(n, [&](int64_t i) { y[i] = x[i] * sigmoidf(gate[i]); });
}

// ---- mixture of experts -------------------------------------------------------------------------------

// The axpy sequence from a zero acc, fused: per element acc = acc + w*y with the product and the sum
// rounded separately (-ffp-contract=off), j in rank order; starting from +0.0f keeps the one case where
// the fused form could differ from the sequence (a -0 first product: 0 + -0 = +0) identical.
void CpuBackend::moe_combine(const float* y, const float* wts_host, int64_t n, int64_t k, int64_t dim, float* acc) {
  if (n <= 0 || dim <= 0) return;
  if (k <= 0) throw LimitError("moe_combine: k=" + std::to_string(k) + " must be positive");
  for_elems(n * dim, [&](int64_t i) {
    const int64_t t = i / dim, c = i - t * dim;
    float a = 0.0f;
    for (int64_t j = 0; j < k; ++j) a = a + wts_host[t * k + j] * y[(t * k + j) * dim + c];
    acc[i] = a;
  });
}

}  // namespace ferry::cpu
