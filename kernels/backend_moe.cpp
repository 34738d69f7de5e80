// The default (composed) Backend::expert_ffn and Backend::moe_combine, and the argument check every
// back-end runs first. The composition is the per-expert op sequence the MoE layer used to issue
// itself, with the batch's rows concatenated so it costs one set of buffers per batch instead of one
// per expert: matmul is row-invariant and the activation element-wise, so concatenating changes no bit.
#include <span>
#include <string>
#include <vector>

#include "io/errors.hpp"
#include "kernels/backend.hpp"

namespace ferry {

namespace {

std::string where(const char* who, size_t i, const char* field) {
  return std::string(who) + ": expert call " + std::to_string(i) + " " + field;
}

void check_weight(const Weight& w, int64_t rows, int64_t cols, const char* who, size_t i, const char* name) {
  if (w.empty()) throw TensorError(where(who, i, name) + " is empty");
  if (w.layout == WLayout::q8_tiles) throw TensorError(where(who, i, name) + " is in a matmul-only layout (q8_0 tiles)");
  if (w.rows != rows || w.cols != cols)
    throw TensorError(where(who, i, name) + " is [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                      "], expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
}

void check_rows(const int32_t* idx, int64_t m, int64_t limit, const char* who, size_t i, const char* field) {
  if (m > 0 && !idx) throw TensorError(where(who, i, field) + " is null with m=" + std::to_string(m));
  for (int64_t r = 0; r < m; ++r)
    if (idx[r] < 0 || idx[r] >= limit)
      throw LimitError(where(who, i, field) + "[" + std::to_string(r) + "] = " + std::to_string(idx[r]) +
                       " outside [0, " + std::to_string(limit) + ")");
}

std::span<const ExpertCall> calls_of(const ExpertFfnArgs& a) { return {a.calls, a.n_calls}; }

}  // namespace

void validate_expert_ffn(const ExpertFfnArgs& a, const char* who) {
  if (a.in <= 0 || a.inter <= 0)
    throw TensorError(std::string(who) + ": in=" + std::to_string(a.in) + ", inter=" + std::to_string(a.inter) +
                      " must be positive");
  if (a.n_calls > 0 && (!a.calls || !a.x || !a.y)) throw TensorError(std::string(who) + ": null calls, x or y");
  for (size_t i = 0; i < a.n_calls; ++i) {
    const ExpertCall& c = a.calls[i];
    if (c.m < 0) throw LimitError(where(who, i, "m") + " = " + std::to_string(c.m) + " is negative");
    check_weight(c.gate, a.inter, a.in, who, i, "gate");
    check_weight(c.up, a.inter, a.in, who, i, "up");
    check_weight(c.down, a.in, a.inter, who, i, "down");
    check_rows(c.rows_host, c.m, a.x_rows, who, i, "rows_host");
    check_rows(c.dst_host, c.m, a.y_rows, who, i, "dst_host");
  }
}

namespace {

// Rows per set of buffers: bounds the memory of prompt-pass batches (thousands of rows) to a few
// wave-sized buffers; an expert with more rows runs as a wave of its own (as before expert_ffn).
constexpr int64_t kWaveRows = 2048;

// The calls of one wave (`rows` rows in all) through one set of concatenated buffers.
void ffn_wave(Backend& be, const ExpertFfnArgs& a, std::span<const ExpertCall> calls, int64_t rows) {
  const size_t row_bytes = static_cast<size_t>(a.in) * sizeof(float);
  Buf xin(be, static_cast<size_t>(rows * a.in)), g(be, static_cast<size_t>(rows * a.inter)),
      u(be, static_cast<size_t>(rows * a.inter)), yo(be, static_cast<size_t>(rows * a.in));
  int64_t off = 0;  // first row of the current call in the concatenated buffers
  for (const ExpertCall& c : calls) {
    for (int64_t r = 0; r < c.m; ++r) be.copy(xin.get() + (off + r) * a.in, a.x + c.rows_host[r] * a.in, row_bytes);
    be.matmul(c.gate, xin.get() + off * a.in, c.m, g.get() + off * a.inter);
    be.matmul(c.up, xin.get() + off * a.in, c.m, u.get() + off * a.inter);
    off += c.m;
  }
  if (a.act.situ)
    be.situ(g, u, rows * a.inter, a.act.beta, a.act.lbeta, g);
  else
    be.swiglu(g, u, rows * a.inter, g);
  off = 0;
  for (const ExpertCall& c : calls) {
    be.matmul(c.down, g.get() + off * a.inter, c.m, yo.get() + off * a.in);
    for (int64_t r = 0; r < c.m; ++r) be.copy(a.y + c.dst_host[r] * a.in, yo.get() + (off + r) * a.in, row_bytes);
    off += c.m;
  }
}

}  // namespace

void Backend::expert_ffn(const ExpertFfnArgs& a) {
  validate_expert_ffn(a, "expert_ffn");
  const auto calls = calls_of(a);
  size_t first = 0;
  int64_t rows = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (rows > 0 && rows + calls[i].m > kWaveRows) {
      ffn_wave(*this, a, calls.subspan(first, i - first), rows);
      first = i;
      rows = 0;
    }
    rows += calls[i].m;
  }
  if (rows > 0) ffn_wave(*this, a, calls.subspan(first), rows);
}

void Backend::moe_combine(const float* y, const float* wts_host, int64_t n, int64_t k, int64_t dim, float* acc) {
  if (n <= 0 || dim <= 0) return;
  if (k <= 0) throw LimitError("moe_combine: k=" + std::to_string(k) + " must be positive");
  Buf zero(*this, static_cast<size_t>(n * dim));  // alloc zero-fills
  copy(acc, zero, static_cast<size_t>(n * dim) * sizeof(float));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) axpy(wts_host[t * k + j], y + (t * k + j) * dim, dim, acc + t * dim);
}

}  // namespace ferry
