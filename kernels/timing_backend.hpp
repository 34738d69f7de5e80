// A Backend decorator that times every op (`ferry run --profile-ops`): where a decode step's device time
// goes, op by op, and how much of the wall time the device sat idle between ops (host-bound gaps).
// On a back-end with timing events (CUDA) each op is bracketed by two events on the compute queue, so
// the times are the device's own and the host is not synchronised per op (recording costs ~2 us of host
// time per op, which the gaps include). On the CPU back-end (synchronous) ops are timed on the host.
// Results are the same bits as without the decorator: it only forwards.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace ferry {

// Not final: tests derive from it to stand in for a back-end with one op of its own over the CPU's
// (tests/kernels/model/route_select_test.cpp).
class TimingBackend : public Backend {
 public:
  explicit TimingBackend(std::unique_ptr<Backend> inner);
  ~TimingBackend() override;

  struct OpTime {
    uint64_t calls = 0;
    double ms = 0;  // device (or host) time summed over calls
  };
  struct Report {
    std::map<std::string, OpTime> ops;  // by label, e.g. "matmul q8_0 7168x7168"
    double busy_ms = 0;                 // sum of op times
    double span_ms = 0;                 // first op start to last op end (device clock where timed)
  };
  // Resolves the events recorded so far (waits for the device) and returns the totals since the start.
  Report report();
  // Forgets everything timed so far (e.g. the weight uploads of loading).
  void reset();
  Backend& inner() const { return *in_; }

  std::string name() const override { return in_->name(); }
  void* alloc(size_t b) override { return in_->alloc(b); }
  void* alloc_uninit(size_t b) override { return in_->alloc_uninit(b); }
  void release(void* p) override { in_->release(p); }
  void upload(void* d, const void* s, size_t b) override;
  void download(void* d, const void* s, size_t b) override;
  void download_start(void* d, const void* s, size_t b) override;
  void download_wait() override;
  bool route_select_start(const float* scores, const float* bias, const RouteRule& rule, int64_t n,
                          uint32_t* picked_host) override;
  void copy(void* d, const void* s, size_t b) override;
  void synchronize() override { in_->synchronize(); }
  void register_host(void* p, size_t b) override { in_->register_host(p, b); }
  void unregister_host(void* p) override { in_->unregister_host(p); }
  MemoryInfo device_memory() override { return in_->device_memory(); }
  uint32_t upload_queues() const override { return in_->upload_queues(); }
  void set_upload_queues(uint32_t n) override { in_->set_upload_queues(n); }
  Event create_event() override { return in_->create_event(); }
  void destroy_event(Event e) override { in_->destroy_event(e); }
  void record_event(Event e, int q) override { in_->record_event(e, q); }
  void wait_event(int q, Event e) override { in_->wait_event(q, e); }
  bool event_done(Event e) override { return in_->event_done(e); }
  void sync_event(Event e) override { in_->sync_event(e); }
  Event create_timing_event() override { return in_->create_timing_event(); }
  double elapsed_ms(Event a, Event b) override { return in_->elapsed_ms(a, b); }
  void upload_async(int q, void* d, const void* s, size_t b) override { in_->upload_async(q, d, s, b); }
  void set_prompt_pass(bool on) override { in_->set_prompt_pass(on); }
  void add_rows(const float* x, const float* b, int64_t rows, int64_t dim, float* y) override;

  void prepare_matmul_weight(Weight& w) override { in_->prepare_matmul_weight(w); }
  void prepare_expert_weights(Weight* const* w, size_t count) override { in_->prepare_expert_weights(w, count); }
  // matmul_group keeps Backend's default (one by one through matmul below): each matmul is timed alone,
  // so the inner back-end's sharing within a group is not part of a profile.
  void matmul(const Weight& w, const float* x, int64_t n, float* y) override;
  void matmul_heads(const Weight& w, const HeadsLayout& l, const float* x, int64_t n, float* y) override;
  void embed(const Weight& t, const int32_t* ids, int64_t n, float* y) override;
  void rmsnorm(const float* x, const float* w, int64_t r, int64_t d, float e, float* y) override;
  void rmsnorm_kept(const float* x, const float* w, int64_t r, int64_t d, float e, float* y) override;
  void drop_x(const float* y) override { in_->drop_x(y); }
  void gate_kept(const GateAct& act, const float* a, const float* b, int64_t r, int64_t c, float* y) override;
  void layernorm(const float* x, const float* w, const float* b, int64_t r, int64_t d, float e, float* y) override;
  void l2norm(const float* x, int64_t r, int64_t d, float e, float* y) override;
  void l2norm_qk(float* q, float* k, int64_t r, int64_t d, float e, float s) override;
  void add(const float* a, const float* b, int64_t n, float* y) override;
  void scale(float* x, float s, int64_t n) override;
  void axpy(float a, const float* x, int64_t n, float* y) override;
  void copy2d(const float* s, int64_t ss, float* d, int64_t ds, int64_t r, int64_t c) override;
  void swiglu(const float* g, const float* u, int64_t n, float* y) override;
  void situ(const float* g, const float* u, int64_t n, float b, float lb, float* y) override;
  void sigmoid(const float* x, int64_t n, float* y) override;
  void sigmoid_mul(const float* x, const float* g, int64_t n, float* y) override;
  void conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t W, float* st, float* y) override;
  void conv1d_silu_many(const Conv1dCall* calls, size_t count, int64_t T, int64_t C, int64_t W) override;
  void kda_gate(const float* f, const float* a, int64_t T, int64_t H, int64_t K, const KdaGateParams& p,
                float* g) override;
  void kda_gate_beta(float* f, const float* bias, const float* a, int64_t T, int64_t H, int64_t K,
                     const KdaGateParams& p, float* g, float* beta) override;
  void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* b, int64_t T,
                     int64_t H, int64_t K, int64_t V, float* st, float* o) override;
  void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* b, int64_t T,
                   int64_t H, int64_t K, int64_t V, int64_t ch, float* st, float* o) override;
  // One label for the four ops it stands for, fused or not ("kda_decode").
  void kda_decode(const KdaDecode& a) override;
  // "conv1d_silu" (the label the convolutions had alone), the l2 norms inside it.
  void kda_conv_l2norm(const Conv1dCall* qkv, int64_t T, int64_t H, int64_t K, int64_t W, float eps,
                       float q_scale) override;
  void rope(float* x, int64_t T, int64_t nh, int64_t ts, int64_t hs, int64_t off, const int32_t* pos,
            const RopeParams& r) override;
  void attention(const AttentionArgs& a) override;
  void indexer_topk(const float* q, const float* k, const float* w, int64_t T, int64_t L, int64_t Hi, int64_t Di,
                    int64_t p0, int64_t topk, int32_t* sel, IndexerTies ties) override;
  void attn_res(const float* const* vs, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                float* out) override;
  void attn_res_norm(const float* const* vs, int64_t nv, const float* w, int64_t T, int64_t D, float eps, float* out,
                     const float* nw, float ne, float* y) override;
  void add_attn_res_norm(float* p, const float* a, const float* const* vs, int64_t nv, const float* w, int64_t T,
                         int64_t D, float eps, float* out, const float* nw, float ne, float* y) override;
  void expert_ffn(const ExpertFfnArgs& a) override;
  void moe_combine(const float* y, const float* w, int64_t n, int64_t k, int64_t dim, float* acc) override;

 private:
  // Brackets one op: events on the compute queue (or host clock), resolved later by report().
  template <class F>
  void timed(std::string label, F&& f);
  void resolve();

  struct Pending {
    std::string label;
    Event a, b;
  };
  std::unique_ptr<Backend> in_;
  bool device_events_ = false;
  std::vector<Event> free_events_;
  std::vector<Pending> pending_;
  Event first_ = nullptr;   // the first op's start (device clock)
  Event last_ = nullptr;    // the last resolved op's end
  Report acc_;
  std::chrono::steady_clock::time_point host_first_{}, host_last_{};
};

}  // namespace ferry
