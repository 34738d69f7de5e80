// The CPU back-end: the reference implementation of kernels/backend.hpp. Its op bodies are split by
// topic: memory and element-wise ops (cpu_backend.cpp), matmul and embed (matmul.cpp), KDA (kda.cpp,
// kda_chunked.cpp), attention and friends (attention.cpp, attn_res.cpp).
#pragma once

#include <cmath>

#include "kernels/backend.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace ferry::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}
  std::string name() const override;
  ThreadPool& pool() { return pool_; }

  void* alloc(size_t bytes) override;
  void* alloc_uninit(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src_host, size_t bytes) override;
  void download(void* dst_host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}

  // Inside a prompt pass with emulate_prompt_x_bits set (prompt_x_emulation.hpp), x is rounded as the CUDA
  // back-end's prompt kernels see it before the product; otherwise the pass changes nothing here.
  void set_prompt_pass(bool on) override { prompt_pass_ = on; }
  void matmul(const Weight& w, const float* x, int64_t n, float* y) override;
  void embed(const Weight& table, const int32_t* ids_host, int64_t n, float* y) override;

  void rmsnorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) override;
  void layernorm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                 float* y) override;
  void l2norm(const float* x, int64_t rows, int64_t dim, float eps, float* y) override;
  void add(const float* a, const float* b, int64_t n, float* y) override;
  void scale(float* x, float s, int64_t n) override;
  void axpy(float a, const float* x, int64_t n, float* y) override;
  void copy2d(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
              int64_t cols) override;
  void swiglu(const float* g, const float* u, int64_t n, float* y) override;
  void situ(const float* g, const float* u, int64_t n, float beta, float lbeta, float* y) override;
  void sigmoid(const float* x, int64_t n, float* y) override;
  void sigmoid_mul(const float* x, const float* gate, int64_t n, float* y) override;

  void conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t W, float* state,
                   float* y) override;
  void kda_gate(const float* f, const float* a_log, int64_t T, int64_t H, int64_t K, const KdaGateParams& p,
                float* g) override;
  void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T,
                     int64_t H, int64_t K, int64_t V, float* state, float* o) override;
  void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T,
                   int64_t H, int64_t K, int64_t V, int64_t chunk, float* state, float* o) override;

  void rope(float* x, int64_t T, int64_t n_heads, int64_t tok_stride, int64_t head_stride, int64_t offset,
            const int32_t* pos_host, const RopeParams& rope) override;
  void attention(const AttentionArgs& a) override;
  void indexer_topk(const float* q, const float* k, const float* w, int64_t T, int64_t L, int64_t Hi, int64_t Di,
                    int64_t q_pos0, int64_t topk, int32_t* sel, IndexerTies ties) override;

  void attn_res(const float* const* vs_host, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                float* out) override;

  void moe_combine(const float* y, const float* wts_host, int64_t n, int64_t k, int64_t dim, float* acc) override;

 private:
  // Element-wise work: split n elements over threads in pieces of at least kElemGrain.
  template <class F>
  void for_elems(int64_t n, F&& f);

  ThreadPool pool_;
  bool prompt_pass_ = false;
};

// Small shared helpers of the CPU kernels.
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace ferry::cpu
