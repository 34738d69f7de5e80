// Helpers of the expert_ffn / moe_combine tests (CPU in tests/kernels, CUDA in tests/gpu): random
// quantized experts in a back-end's memory, random batches, and the reference every batched result is
// held to: the per-expert op sequence the MoE layer issued before expert_ffn existed.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "tests/kernels/cpu/test_util.hpp"

namespace ferry::test {

// E random experts (gate/up [inter, in], down [in, inter]) of one quantized type in `be`'s memory.
class RandomExperts {
 public:
  RandomExperts(Backend& be, WType t, int64_t e, int64_t in, int64_t inter, uint32_t seed) : be_(be) {
    for (int64_t i = 0; i < e; ++i) {
      const uint32_t s = seed + 3 * static_cast<uint32_t>(i);
      ExpertCall c;
      c.gate = make(t, inter, in, s);
      c.up = make(t, inter, in, s + 1);
      c.down = make(t, in, inter, s + 2);
      experts_.push_back(c);
    }
  }
  ~RandomExperts() {
    for (void* p : bufs_) be_.release(p);
  }
  RandomExperts(const RandomExperts&) = delete;
  RandomExperts& operator=(const RandomExperts&) = delete;
  // Weights of expert i (rows_host, dst_host and m left empty).
  const ExpertCall& operator[](size_t i) const { return experts_[i]; }
  // Hands every matrix to Backend::prepare_expert_weights, as resident experts are (CUDA: mxfp4 tiles).
  void prepare_resident() {
    std::vector<Weight*> ws;
    for (ExpertCall& c : experts_)
      for (Weight* w : {&c.gate, &c.up, &c.down}) ws.push_back(w);
    be_.prepare_expert_weights(ws.data(), ws.size());
  }
  size_t size() const { return experts_.size(); }

 private:
  Weight make(WType t, int64_t rows, int64_t cols, uint32_t seed) {
    const Weight shape{t, rows, cols, nullptr};
    std::vector<uint8_t> bytes(shape.nbytes());
    const auto nb = static_cast<size_t>(rows * cols / kQK);
    if (t == WType::mxfp4) {
      const auto q = random_mxfp4(nb, seed);
      std::memcpy(bytes.data(), q.data(), bytes.size());
    } else {
      const auto q = random_q8_0(nb, seed);
      std::memcpy(bytes.data(), q.data(), bytes.size());
    }
    void* p = be_.alloc(bytes.size());
    be_.upload(p, bytes.data(), bytes.size());
    bufs_.push_back(p);
    return Weight{t, rows, cols, p};
  }
  Backend& be_;
  std::vector<ExpertCall> experts_;
  std::vector<void*> bufs_;
};

// A batch: the calls plus the storage of their row lists.
struct Batch {
  std::vector<ExpertCall> calls;
  std::vector<std::vector<int32_t>> rows, dst;
  void add(const ExpertCall& weights, std::vector<int32_t> r, std::vector<int32_t> d) {
    rows.push_back(std::move(r));
    dst.push_back(std::move(d));
    calls.push_back(weights);
  }
  // Pointers into rows/dst, valid once every add is done.
  std::span<const ExpertCall> bind() {
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i].rows_host = rows[i].data();
      calls[i].dst_host = dst[i].data();
      calls[i].m = static_cast<int64_t>(rows[i].size());
    }
    return calls;
  }
};

// Experts[first..first+e) with m[i] rows each: input rows drawn from [0, x_rows) without repeats within an
// expert (a token uses an expert once), outputs to distinct rows of a y of sum(m) rows in shuffled order.
inline Batch random_batch(const RandomExperts& ex, size_t first, const std::vector<int64_t>& m, int64_t x_rows,
                          uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t total = std::accumulate(m.begin(), m.end(), int64_t{0});
  std::vector<int32_t> slots(static_cast<size_t>(total));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<int32_t> tokens(static_cast<size_t>(x_rows));
  std::iota(tokens.begin(), tokens.end(), 0);
  Batch b;
  size_t next = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    std::shuffle(tokens.begin(), tokens.end(), rng);
    std::vector<int32_t> r(tokens.begin(), tokens.begin() + m[i]);
    std::vector<int32_t> d(slots.begin() + static_cast<int64_t>(next), slots.begin() + static_cast<int64_t>(next) + m[i]);
    next += static_cast<size_t>(m[i]);
    b.add(ex[first + i], std::move(r), std::move(d));
  }
  return b;
}

// The per-expert op sequence of the MoE layer before expert_ffn (kernels/model/moe.cpp at 4da75a3): per
// expert, fresh buffers, one row copy in and out per row, three matmuls and the activation.
inline void per_expert_sequence(Backend& be, const ExpertFfnArgs& a) {
  const size_t row_bytes = static_cast<size_t>(a.in) * sizeof(float);
  for (size_t i = 0; i < a.n_calls; ++i) {
    const ExpertCall& c = a.calls[i];
    const int64_t m = c.m;
    Buf xin(be, static_cast<size_t>(m * a.in)), g(be, static_cast<size_t>(m * a.inter)),
        up(be, static_cast<size_t>(m * a.inter)), yo(be, static_cast<size_t>(m * a.in));
    for (int64_t r = 0; r < m; ++r) be.copy(xin.get() + r * a.in, a.x + c.rows_host[r] * a.in, row_bytes);
    be.matmul(c.gate, xin, m, g);
    be.matmul(c.up, xin, m, up);
    if (a.act.situ)
      be.situ(g, up, m * a.inter, a.act.beta, a.act.lbeta, g);
    else
      be.swiglu(g, up, m * a.inter, g);
    be.matmul(c.down, g, m, yo);
    for (int64_t r = 0; r < m; ++r) be.copy(a.y + c.dst_host[r] * a.in, yo.get() + r * a.in, row_bytes);
  }
}

// The combine sequence of the MoE layer before moe_combine: acc zero-filled, one axpy per (row, rank).
inline void axpy_sequence(Backend& be, const float* y, const float* wts, int64_t n, int64_t k, int64_t dim,
                          float* acc) {
  Buf zero(be, static_cast<size_t>(n * dim));
  be.copy(acc, zero, static_cast<size_t>(n * dim) * sizeof(float));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) be.axpy(wts[t * k + j], y + (t * k + j) * dim, dim, acc + t * dim);
}

// The three activations the models use: SwiGLU, K3's SiTU with and without the linear-branch clamp.
inline std::vector<ExpertAct> all_acts() { return {ExpertAct{false, 1.0f, 0.0f}, ExpertAct{true, 3.0f, 0.0f},
                                                   ExpertAct{true, 3.0f, 6.0f}}; }

}  // namespace ferry::test
