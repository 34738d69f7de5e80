#include "kernels/timing_backend.hpp"

#include <fmt/format.h>

namespace ferry {
namespace {

const char* tname(WType t) { return t == WType::f32 ? "f32" : t == WType::q8_0 ? "q8_0" : "mxfp4"; }

}  // namespace

TimingBackend::TimingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {
  Event e = in_->create_timing_event();
  device_events_ = e != nullptr;
  if (e) free_events_.push_back(e);
}

TimingBackend::~TimingBackend() {
  if (!device_events_) return;
  in_->synchronize();
  for (auto& p : pending_) free_events_.push_back(p.a), free_events_.push_back(p.b);
  for (Event e : free_events_) in_->destroy_event(e);
  if (first_) in_->destroy_event(first_);
}

template <class F>
void TimingBackend::timed(std::string label, F&& f) {
  if (!device_events_) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    if (acc_.ops.empty() && host_first_ == decltype(host_first_){}) host_first_ = t0;
    host_last_ = t1;
    OpTime& o = acc_.ops[label];
    o.calls += 1;
    o.ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
    return;
  }
  auto take = [&] {
    if (free_events_.empty()) return in_->create_timing_event();
    Event e = free_events_.back();
    free_events_.pop_back();
    return e;
  };
  if (!first_) {  // the span's origin: just before the first timed op
    first_ = in_->create_timing_event();
    in_->record_event(first_, kComputeQueue);
  }
  Pending p{std::move(label), take(), take()};
  in_->record_event(p.a, kComputeQueue);
  f();
  in_->record_event(p.b, kComputeQueue);
  pending_.push_back(std::move(p));
  if (pending_.size() >= 4096) resolve();  // bounded memory and events
}

void TimingBackend::resolve() {
  for (auto& p : pending_) {
    const double ms = in_->elapsed_ms(p.a, p.b);
    OpTime& o = acc_.ops[p.label];
    o.calls += 1;
    o.ms += ms;
    if (last_) free_events_.push_back(last_);
    free_events_.push_back(p.a);
    last_ = p.b;
  }
  pending_.clear();
}

void TimingBackend::reset() {
  if (device_events_) {
    resolve();
    if (first_) in_->destroy_event(first_);
    if (last_) free_events_.push_back(last_);
  }
  first_ = last_ = nullptr;
  acc_ = Report{};
  host_first_ = host_last_ = {};
}

TimingBackend::Report TimingBackend::report() {
  if (device_events_) resolve();
  Report r = acc_;
  r.busy_ms = 0;
  for (const auto& [k, o] : r.ops) r.busy_ms += o.ms;
  if (device_events_ && first_ && last_)
    r.span_ms = in_->elapsed_ms(first_, last_);
  else
    r.span_ms = std::chrono::duration<double, std::milli>(host_last_ - host_first_).count();
  return r;
}

void TimingBackend::upload(void* d, const void* s, size_t b) { timed("upload", [&] { in_->upload(d, s, b); }); }
void TimingBackend::download(void* d, const void* s, size_t b) { timed("download", [&] { in_->download(d, s, b); }); }
void TimingBackend::download_start(void* d, const void* s, size_t b) { in_->download_start(d, s, b); }
void TimingBackend::download_wait() { timed("download_wait", [&] { in_->download_wait(); }); }
bool TimingBackend::route_select_start(const float* scores, const float* bias, const RouteRule& rule, int64_t n,
                                       uint32_t* picked_host) {
  bool taken = false;
  timed("route_select", [&] { taken = in_->route_select_start(scores, bias, rule, n, picked_host); });
  return taken;
}
void TimingBackend::copy(void* d, const void* s, size_t b) { timed("copy", [&] { in_->copy(d, s, b); }); }
void TimingBackend::matmul(const Weight& w, const float* x, int64_t n, float* y) {
  timed(fmt::format("matmul {} {}x{}", tname(w.type), w.rows, w.cols), [&] { in_->matmul(w, x, n, y); });
}
void TimingBackend::matmul_heads(const Weight& w, const HeadsLayout& l, const float* x, int64_t n, float* y) {
  timed(fmt::format("matmul_heads {} {}x{}x{}", tname(w.type), l.heads, w.rows, w.cols),
        [&] { in_->matmul_heads(w, l, x, n, y); });
}
void TimingBackend::embed(const Weight& t, const int32_t* ids, int64_t n, float* y) {
  timed("embed", [&] { in_->embed(t, ids, n, y); });
}
void TimingBackend::rmsnorm(const float* x, const float* w, int64_t r, int64_t d, float e, float* y) {
  timed("rmsnorm", [&] { in_->rmsnorm(x, w, r, d, e, y); });
}
void TimingBackend::rmsnorm_kept(const float* x, const float* w, int64_t r, int64_t d, float e, float* y) {
  timed("rmsnorm", [&] { in_->rmsnorm_kept(x, w, r, d, e, y); });
}
void TimingBackend::gate_kept(const GateAct& act, const float* a, const float* b, int64_t r, int64_t c, float* y) {
  static constexpr const char* kName[] = {"swiglu", "situ", "sigmoid_mul"};
  timed(kName[static_cast<int>(act.op)], [&] { in_->gate_kept(act, a, b, r, c, y); });
}
void TimingBackend::layernorm(const float* x, const float* w, const float* b, int64_t r, int64_t d, float e, float* y) {
  timed("layernorm", [&] { in_->layernorm(x, w, b, r, d, e, y); });
}
void TimingBackend::l2norm(const float* x, int64_t r, int64_t d, float e, float* y) {
  timed("l2norm", [&] { in_->l2norm(x, r, d, e, y); });
}
void TimingBackend::l2norm_qk(float* q, float* k, int64_t r, int64_t d, float e, float s) {
  timed("l2norm", [&] { in_->l2norm_qk(q, k, r, d, e, s); });
}
void TimingBackend::add(const float* a, const float* b, int64_t n, float* y) { timed("add", [&] { in_->add(a, b, n, y); }); }
void TimingBackend::add_rows(const float* x, const float* b, int64_t rows, int64_t dim, float* y) {
  timed("add_rows", [&] { in_->add_rows(x, b, rows, dim, y); });
}
void TimingBackend::scale(float* x, float s, int64_t n) { timed("scale", [&] { in_->scale(x, s, n); }); }
void TimingBackend::axpy(float a, const float* x, int64_t n, float* y) { timed("axpy", [&] { in_->axpy(a, x, n, y); }); }
void TimingBackend::copy2d(const float* s, int64_t ss, float* d, int64_t ds, int64_t r, int64_t c) {
  timed("copy2d", [&] { in_->copy2d(s, ss, d, ds, r, c); });
}
void TimingBackend::swiglu(const float* g, const float* u, int64_t n, float* y) {
  timed("swiglu", [&] { in_->swiglu(g, u, n, y); });
}
void TimingBackend::situ(const float* g, const float* u, int64_t n, float b, float lb, float* y) {
  timed("situ", [&] { in_->situ(g, u, n, b, lb, y); });
}
void TimingBackend::sigmoid(const float* x, int64_t n, float* y) { timed("sigmoid", [&] { in_->sigmoid(x, n, y); }); }
void TimingBackend::sigmoid_mul(const float* x, const float* g, int64_t n, float* y) {
  timed("sigmoid_mul", [&] { in_->sigmoid_mul(x, g, n, y); });
}
void TimingBackend::conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t W, float* st, float* y) {
  timed("conv1d_silu", [&] { in_->conv1d_silu(x, T, C, w, W, st, y); });
}
void TimingBackend::conv1d_silu_many(const Conv1dCall* calls, size_t count, int64_t T, int64_t C, int64_t W) {
  timed("conv1d_silu", [&] { in_->conv1d_silu_many(calls, count, T, C, W); });
}
void TimingBackend::kda_gate(const float* f, const float* a, int64_t T, int64_t H, int64_t K, const KdaGateParams& p,
                             float* g) {
  timed("kda_gate", [&] { in_->kda_gate(f, a, T, H, K, p, g); });
}
void TimingBackend::kda_gate_beta(float* f, const float* bias, const float* a, int64_t T, int64_t H, int64_t K,
                                  const KdaGateParams& p, float* g, float* beta) {
  timed("kda_gate", [&] { in_->kda_gate_beta(f, bias, a, T, H, K, p, g, beta); });
}
void TimingBackend::kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* b,
                                  int64_t T, int64_t H, int64_t K, int64_t V, float* st, float* o) {
  timed("kda_recurrent", [&] { in_->kda_recurrent(q, k, v, g, b, T, H, K, V, st, o); });
}
void TimingBackend::kda_conv_l2norm(const Conv1dCall* qkv, int64_t T, int64_t H, int64_t K, int64_t W, float eps,
                                    float q_scale) {
  timed("conv1d_silu", [&] { in_->kda_conv_l2norm(qkv, T, H, K, W, eps, q_scale); });
}
void TimingBackend::kda_decode(const KdaDecode& a) {
  timed("kda_decode", [&] { in_->kda_decode(a); });
}
void TimingBackend::kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* b,
                                int64_t T, int64_t H, int64_t K, int64_t V, int64_t ch, float* st, float* o) {
  timed("kda_chunked", [&] { in_->kda_chunked(q, k, v, g, b, T, H, K, V, ch, st, o); });
}
void TimingBackend::rope(float* x, int64_t T, int64_t nh, int64_t ts, int64_t hs, int64_t off, const int32_t* pos,
                         const RopeParams& r) {
  timed("rope", [&] { in_->rope(x, T, nh, ts, hs, off, pos, r); });
}
void TimingBackend::attention(const AttentionArgs& a) { timed("attention", [&] { in_->attention(a); }); }
void TimingBackend::indexer_topk(const float* q, const float* k, const float* w, int64_t T, int64_t L, int64_t Hi,
                                 int64_t Di, int64_t p0, int64_t topk, int32_t* sel, IndexerTies ties) {
  timed("indexer_topk", [&] { in_->indexer_topk(q, k, w, T, L, Hi, Di, p0, topk, sel, ties); });
}
void TimingBackend::attn_res(const float* const* vs, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                             float* out) {
  timed("attn_res", [&] { in_->attn_res(vs, nv, w, T, D, eps, out); });
}
void TimingBackend::attn_res_norm(const float* const* vs, int64_t nv, const float* w, int64_t T, int64_t D, float eps,
                                  float* out, const float* nw, float ne, float* y) {
  timed("attn_res_norm", [&] { in_->attn_res_norm(vs, nv, w, T, D, eps, out, nw, ne, y); });
}
void TimingBackend::add_attn_res_norm(float* p, const float* a, const float* const* vs, int64_t nv, const float* w,
                                      int64_t T, int64_t D, float eps, float* out, const float* nw, float ne, float* y) {
  timed("attn_res_norm", [&] { in_->add_attn_res_norm(p, a, vs, nv, w, T, D, eps, out, nw, ne, y); });
}
// Labelled by batch size and whether every expert has one row (a decode step's batch) or some have
// more (prompt passes, verify blocks), so a decode batch's time is not averaged with a prompt's.
void TimingBackend::expert_ffn(const ExpertFfnArgs& a) {
  bool one_row = true;
  for (size_t i = 0; i < a.n_calls; ++i) one_row = one_row && a.calls[i].m <= 1;
  timed(fmt::format("expert_ffn (batches of {}, {})", a.n_calls >= 8 ? "8+" : std::to_string(a.n_calls),
                    one_row ? "1 row each" : "more rows"),
        [&] { in_->expert_ffn(a); });
}
void TimingBackend::moe_combine(const float* y, const float* w, int64_t n, int64_t k, int64_t dim, float* acc) {
  timed("moe_combine", [&] { in_->moe_combine(y, w, n, k, dim, acc); });
}

}  // namespace ferry
