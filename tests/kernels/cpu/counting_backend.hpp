// A Backend decorator that forwards every op to another back-end and counts the calls per op name:
// how many back-end calls (each one or more CUDA API calls on the GPU) a forward pass issues.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace ferry::test {

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Backend& inner) : in_(inner) {}
  std::map<std::string, int64_t> counts;
  int64_t total() const {
    int64_t t = 0;
    for (const auto& [k, v] : counts) t += v;
    return t;
  }

  std::string name() const override { return "counting(" + in_.name() + ")"; }
  void* alloc(size_t b) override { return tick("alloc"), in_.alloc(b); }
  void release(void* p) override { tick("release"), in_.release(p); }
  void upload(void* d, const void* s, size_t b) override { tick("upload"), in_.upload(d, s, b); }
  void download(void* d, const void* s, size_t b) override { tick("download"), in_.download(d, s, b); }
  void copy(void* d, const void* s, size_t b) override { tick("copy"), in_.copy(d, s, b); }
  void synchronize() override { tick("synchronize"), in_.synchronize(); }
  // Prompt passes are counted ("prompt_pass on" / "off"), and matmuls inside one as "matmul (prompt)".
  void set_prompt_pass(bool on) override {
    tick(on ? "prompt_pass on" : "prompt_pass off");
    prompt_ = on;
    in_.set_prompt_pass(on);
  }
  // With mark_prepared, every q8_0 weight handed to prepare_matmul_weight is marked as the CUDA
  // back-end's q8_0 tiles (bytes unchanged) and matmul takes the mark off before the inner back-end sees
  // it; every other op passes it on, so the CPU back-end refuses a marked weight that reaches anything
  // but matmul (tests/kernels/model: which weights load_spine prepares).
  bool mark_prepared = false;
  std::vector<const void*> prepared;
  void prepare_matmul_weight(Weight& w) override {
    tick("prepare_matmul_weight");
    if (mark_prepared && w.type == WType::q8_0 && !w.empty()) {
      w.layout = WLayout::q8_tiles;
      prepared.push_back(w.data);
    }
    in_.prepare_matmul_weight(w);
  }
  std::vector<const void*> expert_prepared;  // data of every weight handed to prepare_expert_weights
  void prepare_expert_weights(Weight* const* w, size_t count) override {
    tick("prepare_expert_weights");
    for (size_t i = 0; i < count; ++i) expert_prepared.push_back(w[i]->data);
    in_.prepare_expert_weights(w, count);
  }
  void matmul(const Weight& w, const float* x, int64_t n, float* y) override {
    tick(prompt_ ? "matmul (prompt)" : "matmul");
    Weight plain = w;
    if (mark_prepared) plain.layout = WLayout::rows;
    in_.matmul(plain, x, n, y);
  }
  void matmul_heads(const Weight& w, const HeadsLayout& l, const float* x, int64_t n, float* y) override {
    tick("matmul_heads"), in_.matmul_heads(w, l, x, n, y);
  }
  void embed(const Weight& t, const int32_t* ids, int64_t n, float* y) override { tick("embed"), in_.embed(t, ids, n, y); }
  void rmsnorm(const float* x, const float* w, int64_t r, int64_t d, float e, float* y) override {
    tick("rmsnorm"), in_.rmsnorm(x, w, r, d, e, y);
  }
  void layernorm(const float* x, const float* w, const float* b, int64_t r, int64_t d, float e, float* y) override {
    tick("layernorm"), in_.layernorm(x, w, b, r, d, e, y);
  }
  void l2norm(const float* x, int64_t r, int64_t d, float e, float* y) override { tick("l2norm"), in_.l2norm(x, r, d, e, y); }
  void add(const float* a, const float* b, int64_t n, float* y) override { tick("add"), in_.add(a, b, n, y); }
  void scale(float* x, float s, int64_t n) override { tick("scale"), in_.scale(x, s, n); }
  void axpy(float a, const float* x, int64_t n, float* y) override { tick("axpy"), in_.axpy(a, x, n, y); }
  void copy2d(const float* s, int64_t ss, float* d, int64_t ds, int64_t r, int64_t c) override {
    tick("copy2d"), in_.copy2d(s, ss, d, ds, r, c);
  }
  void swiglu(const float* g, const float* u, int64_t n, float* y) override { tick("swiglu"), in_.swiglu(g, u, n, y); }
  void situ(const float* g, const float* u, int64_t n, float b, float lb, float* y) override {
    tick("situ"), in_.situ(g, u, n, b, lb, y);
  }
  void sigmoid(const float* x, int64_t n, float* y) override { tick("sigmoid"), in_.sigmoid(x, n, y); }
  void sigmoid_mul(const float* x, const float* g, int64_t n, float* y) override {
    tick("sigmoid_mul"), in_.sigmoid_mul(x, g, n, y);
  }
  void conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t W, float* st, float* y) override {
    tick("conv1d_silu"), in_.conv1d_silu(x, T, C, w, W, st, y);
  }
  void kda_gate(const float* f, const float* a, int64_t T, int64_t H, int64_t K, const KdaGateParams& p,
                float* g) override {
    tick("kda_gate"), in_.kda_gate(f, a, T, H, K, p, g);
  }
  void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* b, int64_t T,
                     int64_t H, int64_t K, int64_t V, float* st, float* o) override {
    tick("kda_recurrent"), in_.kda_recurrent(q, k, v, g, b, T, H, K, V, st, o);
  }
  void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* b, int64_t T,
                   int64_t H, int64_t K, int64_t V, int64_t ch, float* st, float* o) override {
    tick("kda_chunked"), in_.kda_chunked(q, k, v, g, b, T, H, K, V, ch, st, o);
  }
  void rope(float* x, int64_t T, int64_t nh, int64_t ts, int64_t hs, int64_t off, const int32_t* pos,
            const RopeParams& r) override {
    tick("rope"), in_.rope(x, T, nh, ts, hs, off, pos, r);
  }
  void attention(const AttentionArgs& a) override { tick("attention"), in_.attention(a); }
  void indexer_topk(const float* q, const float* k, const float* w, int64_t T, int64_t L, int64_t Hi, int64_t Di,
                    int64_t p0, int64_t topk, int32_t* sel, IndexerTies ties) override {
    tick("indexer_topk"), in_.indexer_topk(q, k, w, T, L, Hi, Di, p0, topk, sel, ties);
  }
  void attn_res(const float* const* vs, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                float* out) override {
    tick("attn_res"), in_.attn_res(vs, nv, w, T, D, eps, out);
  }
  void expert_ffn(const ExpertFfnArgs& a) override { tick("expert_ffn"), in_.expert_ffn(a); }
  void moe_combine(const float* y, const float* w, int64_t n, int64_t k, int64_t dim, float* acc) override {
    tick("moe_combine"), in_.moe_combine(y, w, n, k, dim, acc);
  }

 private:
  void tick(const char* op) { ++counts[op]; }
  Backend& in_;
  bool prompt_ = false;
};

}  // namespace ferry::test
