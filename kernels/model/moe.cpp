// Feed-forward blocks: dense MLP (SwiGLU or SiTU), and the mixture of experts with sigmoid routing,
// grouped top-k, shared experts and K3's latent MoE (MODEL_SPEC.md §2, §6).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/model/kept_x.hpp"
#include "kernels/model/model_ctx.hpp"
#include "kernels/model/top_k.hpp"

namespace ferry {

namespace {
constexpr int64_t kRouteParallelRows = 64;  // rows from which route_finish fans out over host threads
static_assert(kRouteParallelRows > ExpertSource::kMaxHintRows, "the predictor's routing stays on its thread");
constexpr unsigned kRouteThreads = 8;       // at most this many (the readers and hashers need cores too)
}  // namespace

void Model::mlp(const MlpWeights& w, const float* x, int64_t n, float* out, const MatmulOut* with) {
  const size_t ni = static_cast<size_t>(n * w.gate.rows);
  Buf g(be_, ni, Buf::Uninit{}), u(be_, ni, Buf::Uninit{});
  std::vector<MatmulOut> outs;
  if (with) outs.push_back(*with);
  outs.push_back({&w.gate, g});
  outs.push_back({&w.up, u});
  be_.matmul_group(outs.data(), outs.size(), x, n);
  GateAct act;
  if (cfg_.act == Activation::situ)
    act = {GateOp::situ, static_cast<float>(cfg_.situ_beta), static_cast<float>(cfg_.situ_linear_beta)};
  be_.gate_kept(act, g, u, n, w.gate.rows, g);  // the activation kept for the down projection
  const KeptX kept(be_, g);
  be_.matmul(w.down, g, n, out);
}

void Model::ffn(int il, Ctx& c, const float* x, float* out) {
  if (cfg_.ffn[static_cast<size_t>(il)] == Ffn::moe)
    moe(il, c, x, out);
  else
    mlp(w_.layers[static_cast<size_t>(il)].dense, x, c.n, out);
}

// Router (HF DeepseekV3TopkRouter / KimiLinearTopkRouter): f32 logits, sigmoid scores, the correction
// bias only for choosing, optional group restriction, top-k, renormalisation and scaling (RouteRule,
// route_rows). The ids go to the host: the scheduler needs them there anyway. Rank order = descending
// choice score, ties to the lower expert id, so it is deterministic.
//
// In two halves: route_start queues the scores and either the back-end's own selection and the download of
// its ids and weights (Backend::route_select_start: CUDA's device_route) or the download of the scores; the
// caller may queue work that does not depend on the routing (Model::moe: the latent projection and the shared
// experts), which the device runs while the host waits in route_finish (and there selects, when the scores came).
RouteRule Model::route_rule() const {
  RouteRule r;
  r.e = cfg_.moe.n_experts;
  r.k = cfg_.moe.top_k;
  r.n_group = cfg_.moe.n_group;
  r.topk_group = cfg_.moe.topk_group;
  r.renormalize = cfg_.moe.renormalize;
  r.routed_scale = cfg_.moe.routed_scale;
  return r;
}

void Model::route_start(int il, const float* x, int64_t n, RouteWait& w) {
  const MoeWeights& mw = w_.layers[static_cast<size_t>(il)].moe;
  const RouteRule rule = route_rule();
  Buf logits(be_, static_cast<size_t>(n * rule.e), Buf::Uninit{});
  be_.matmul(mw.router, x, n, logits);
  be_.sigmoid(logits, n * rule.e, logits);
  // Releasing logits is safe: whatever reuses its memory is queued after the selection or the copy.
  w.picked.resize(static_cast<size_t>(2 * n * rule.k));
  w.selected = be_.route_select_start(logits, mw.score_bias, rule, n, w.picked.data());
  if (w.selected) return;
  w.scores.resize(static_cast<size_t>(n * rule.e));
  be_.download_start(w.scores.data(), logits.get(), w.scores.size() * sizeof(float));
}

void Model::route(int il, const float* x, int64_t n, std::vector<int32_t>& ids, std::vector<float>& wts) {
  RouteWait w;
  route_start(il, x, n, w);
  route_finish(il, n, w, ids, wts);
}

void Model::route_finish(int il, int64_t n, RouteWait& w, std::vector<int32_t>& ids, std::vector<float>& wts) {
  be_.download_wait();
  const RouteRule rule = route_rule();
  const size_t nk = static_cast<size_t>(n * rule.k);
  ids.resize(nk);
  wts.resize(nk);
  if (w.selected) {
    std::memcpy(ids.data(), w.picked.data(), nk * sizeof(int32_t));
    std::memcpy(wts.data(), w.picked.data() + nk, nk * sizeof(float));
    return;
  }
  const float* bias = score_bias_host_[static_cast<size_t>(il)].data();
  const auto rows = [&](int64_t b, int64_t end) { route_rows(w.scores.data(), bias, rule, b, end, ids.data(), wts.data()); };
  // A prompt pass's rows (1,024 x 896 scores: ~3-5 ms a layer on one core) on a few host threads; the
  // device waits for them (the shared experts queued before cover only part of it). Only the model's
  // thread gets here: the router prefetch's predictor (hint_next_layer, another thread) routes at most
  // ExpertSource::kMaxHintRows = 16 rows, below kRouteParallelRows.
  if (n >= kRouteParallelRows) {
    if (!route_pool_) route_pool_ = std::make_unique<cpu::ThreadPool>(
        static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, kRouteThreads)));
    route_pool_->parallel_for(n, rows, kRouteParallelRows / 4);
  } else {
    rows(0, n);
  }
}

// Router prefetch: the next MoE layer's router on this layer's input predicts the experts it will pick
// (the residual stream changes little from one layer to the next). The source runs the prediction
// once its reads for this layer are issued; the experts come most-picked over the rows first.
void Model::hint_next_layer(int il, const float* x, int64_t n) {
  int next = il + 1;
  while (next < cfg_.n_layers && cfg_.ffn[static_cast<size_t>(next)] != Ffn::moe) ++next;
  if (next >= cfg_.n_layers) return;
  experts_->hint_next(next, [this, next, x, n] {
    std::vector<int32_t> ids;
    std::vector<float> wts;
    route(next, x, n, ids, wts);
    std::map<int32_t, int> picks;
    std::vector<int32_t> order;  // first pick first (rank order of row 0, then new ones of row 1, ...)
    for (int32_t id : ids)
      if (picks[id]++ == 0) order.push_back(id);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return picks[a] > picks[b]; });
    return order;
  });
}

void Model::moe(int il, Ctx& c, const float* x, float* out) {
  const MoeWeights& w = w_.layers[static_cast<size_t>(il)].moe;
  const int64_t n = c.n, d = cfg_.hidden, k = cfg_.moe.top_k;
  const int64_t in = cfg_.moe.latent_dim > 0 ? cfg_.moe.latent_dim : d;
  std::vector<int32_t> ids;
  std::vector<float> wts;
  RouteWait routing;
  route_start(il, x, n, routing);
  // Queued while the host waits for the scores (route_finish): the expert input, the latent projection
  // of x (K3) or x itself, and the shared experts. The latent projection and the shared experts' gate /
  // up projections are one matmul group of x (Backend::matmul_group: the bits of each alone; CUDA: one
  // launch). Only the ops' places in the queue move; every op's inputs are the same, so are the bits.
  // (Tried 2026-12-06: the shared down projection after the experts, in one launch with the latent up
  // projection. The step's kernels took no less time, and the queue the device runs while the host routes
  // got ~20 us shorter: 504 against 511 tok/s on the H100 slice.)
  Buf hl, sh;
  const float* hin = x;
  if (cfg_.moe.latent_dim > 0) {
    hl = Buf(be_, static_cast<size_t>(n * in), Buf::Uninit{});
    hin = hl;
  }
  const MatmulOut latent{&w.latent_down, hl};
  if (!w.shared.gate.empty()) {
    sh = Buf(be_, static_cast<size_t>(n * d), Buf::Uninit{});
    mlp(w.shared, x, n, sh, cfg_.moe.latent_dim > 0 ? &latent : nullptr);
  } else if (cfg_.moe.latent_dim > 0) {
    be_.matmul(w.latent_down, x, n, hl);
  }
  route_finish(il, n, routing, ids, wts);
  // Group rows by expert, experts in order of first use (row-major over ranks).
  std::vector<ExpertUse> uses;
  std::vector<int> slot(static_cast<size_t>(cfg_.moe.n_experts), -1);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = ids[static_cast<size_t>(t * k + j)];
      int& sidx = slot[static_cast<size_t>(id)];
      if (sidx < 0) {
        sidx = static_cast<int>(uses.size());
        uses.push_back({id, {}, {}});
      }
      uses[static_cast<size_t>(sidx)].rows.push_back(static_cast<int32_t>(t));
      uses[static_cast<size_t>(sidx)].ranks.push_back(static_cast<int32_t>(j));
    }
  // Each expert writes its rows' outputs to their own (row, rank) slot of y, in whatever order and
  // batches experts arrive; the combine sums in rank order, so the result never depends on either.
  std::vector<int32_t> dst;  // uses[i]'s slots start at dst[first[i]]
  std::vector<size_t> first(uses.size());
  dst.reserve(static_cast<size_t>(n * k));
  for (size_t i = 0; i < uses.size(); ++i) {
    first[i] = dst.size();
    for (size_t r = 0; r < uses[i].rows.size(); ++r)
      dst.push_back(static_cast<int32_t>(uses[i].rows[r] * k + uses[i].ranks[r]));
  }
  Buf y(be_, static_cast<size_t>(n * k * in), Buf::Uninit{});  // every (row, rank) slot is some expert's
  ExpertFfnArgs fa;
  fa.x = hin;
  fa.x_rows = n;
  fa.y = y;
  fa.y_rows = n * k;
  fa.in = in;
  fa.inter = cfg_.moe.moe_inter;
  fa.act = {cfg_.act == Activation::situ, static_cast<float>(cfg_.situ_beta),
            static_cast<float>(cfg_.situ_linear_beta)};
  if (experts_->wants_hints() && n <= ExpertSource::kMaxHintRows) hint_next_layer(il, x, n);
  experts_->fetch(il, uses, [&](std::span<const size_t> idx, std::span<const ExpertWeights> ws) {
    std::vector<ExpertCall> calls;
    calls.reserve(idx.size());
    for (size_t j = 0; j < idx.size(); ++j) {
      const ExpertUse& u = uses[idx[j]];
      calls.push_back({ws[j].gate, ws[j].up, ws[j].down, u.rows.data(), dst.data() + first[idx[j]],
                       static_cast<int64_t>(u.rows.size())});
    }
    ExpertFfnArgs b = fa;
    b.calls = calls.data();
    b.n_calls = calls.size();
    be_.expert_ffn(b);
  });
  Buf acc(be_, static_cast<size_t>(n * in), Buf::Uninit{});  // moe_combine overwrites it
  be_.moe_combine(y, wts.data(), n, k, in, acc);
  if (cfg_.moe.latent_dim > 0) {
    if (cfg_.moe.latent_norm) be_.rmsnorm_kept(acc, w.latent_norm, n, in, static_cast<float>(cfg_.rms_eps), acc);
    const KeptX kept(be_, acc);  // dropping an x never kept changes nothing
    be_.matmul(w.latent_up, acc, n, out);
  } else {
    be_.copy(out, acc, static_cast<size_t>(n * d) * sizeof(float));
  }
  if (!w.shared.gate.empty()) be_.add(out, sh, n * d, out);
}

}  // namespace ferry
