// Kimi Delta Attention layer (MODEL_SPEC.md §3): projections, short convolutions, decay gate, the
// gated delta rule (recurrent for decode rows, chunked for the prompt pass), gated output RMSNorm.
#include <cmath>
#include <iterator>

#include "kernels/model/kept_x.hpp"
#include "kernels/model/model_ctx.hpp"

namespace ferry {
namespace {
// L2 normalisation epsilon of q and k (fla / HF "use_qk_l2norm_in_kernel": rsqrt(sum + 1e-6)).
constexpr float kL2Eps = 1e-6f;
// Chunk length of the chunked (prefill) form: HF and fla use 64. A long prompt's passes are a
// multiple of it (Model::set_prefill_chunk), so every pass starts on a chunk boundary.
constexpr int64_t kKdaChunk = 64;
static_assert(kPrefillChunkAlign % kKdaChunk == 0);
}  // namespace

void Model::mixer_kda(int il, Ctx& c, const float* x, float* out) {
  const KdaWeights& w = w_.layers[static_cast<size_t>(il)].kda;
  LayerState& st = c.s->layers[static_cast<size_t>(il)];
  const int64_t n = c.n, h = cfg_.kda.n_heads, k = cfg_.kda.head_dim, p = h * k, cw = cfg_.kda.conv_kernel;
  const size_t np = static_cast<size_t>(n * p);
  // Every temporary here is written in full by its first op: no zero fill (Buf::Uninit).
  const Buf::Uninit u;
  // Decode rows: every projection of x (q, k, v, f_a, b and the output gate's first matrix) in one
  // matmul group (Backend::matmul_group: the bits of each alone; the CUDA back-end may prepare x once),
  // the k, v and gate projections in t past its first n x p floats (one allocation, as before). A prompt
  // pass keeps one projection buffer at a time: its activations are what the memory plan sized.
  const bool group = !c.prefill;
  const size_t ng = cfg_.kda.full_rank_gate ? np : static_cast<size_t>(n * k);
  Buf q(be_, np, u), kk(be_, np, u), v(be_, np, u), t(be_, group ? 3 * np + ng : np, u);
  float* const tk = group ? t.get() + np : nullptr;
  float* const tv = group ? t.get() + 2 * np : nullptr;
  float* const tg = group ? t.get() + 3 * np : nullptr;
  // A snapshot after row r of this pass (ForwardOptions::snapshot): the convolutions and the delta rule
  // run in two calls split there, each state copied in between (the same bits as one call).
  const int64_t r = c.snap ? c.snap_row : 0;
  float* snap = r ? snapshot_part(*c.snap, *c.s, il) : nullptr;
  const size_t state_n = st.kda_state.size(), conv_n = st.conv_q.size();
  // q, k, v: projection, causal depthwise conv (history carried in the state), SiLU.
  auto conv = [&](const float* in, const float* wc, Buf& hist, float* out, size_t slot) {
    if (!r) return be_.conv1d_silu(in, n, p, wc, cw, hist, out);
    be_.conv1d_silu(in, r, p, wc, cw, hist, out);
    be_.copy(snap + state_n + slot * conv_n, hist, conv_n * sizeof(float));
    be_.conv1d_silu(in + r * p, n - r, p, wc, cw, hist, out + r * p);
  };
  Buf fa(be_, static_cast<size_t>(n * k), u), g(be_, np, u), beta(be_, static_cast<size_t>(n * h), u);
  const Weight& gate1 = cfg_.kda.full_rank_gate ? w.g : w.g_a;
  if (group) {
    const MatmulOut outs[] = {{&w.q, t}, {&w.k, tk}, {&w.v, tv}, {&w.f_a, fa}, {&w.b, beta}, {&gate1, tg}};
    be_.matmul_group(outs, std::size(outs), x, n);
  }
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(k)));
  if (group && !r) {  // the three convolutions and q's and k's l2 norms in one call (CUDA: one or two launches)
    const Backend::Conv1dCall calls[] = {{t, w.q_conv, st.conv_q, q}, {tk, w.k_conv, st.conv_k, kk},
                                         {tv, w.v_conv, st.conv_v, v}};
    be_.kda_conv_l2norm(calls, n, h, k, cw, kL2Eps, q_scale);
  } else {
    if (!group) be_.matmul(w.q, x, n, t);
    conv(t, w.q_conv, st.conv_q, q, 0);
    if (!group) be_.matmul(w.k, x, n, t);
    conv(group ? tk : t.get(), w.k_conv, st.conv_k, kk, 1);
    if (!group) be_.matmul(w.v, x, n, t);
    conv(group ? tv : t.get(), w.v_conv, st.conv_v, v, 2);
  }
  if (!group || r) be_.l2norm_qk(q, kk, n * h, k, kL2Eps, q_scale);
  // Decay gate g [n, H, K] from f = f_b(f_a(x)) + dt_bias.
  if (!group) be_.matmul(w.f_a, x, n, fa);
  be_.matmul(w.f_b, fa, n, t);
  if (!group) be_.matmul(w.b, x, n, beta);
  const KdaGateParams gp{.safe_gate = cfg_.kda.has_lower_bound,
                         .lower_bound = static_cast<float>(cfg_.kda.gate_lower_bound)};
  Buf o(be_, np, u);
  const auto eps = static_cast<float>(cfg_.rms_eps);
  if (group && !r) {
    // Decode rows: the gate inputs, the delta rule and the gated output norm as one op (Backend::kda_decode:
    // the bits of the four ops below, CUDA may run them as one launch). The output gate's logits are needed
    // before it, and t holds f: a low-rank gate's second matrix writes into a buffer of its own.
    Buf gl(be_, cfg_.kda.full_rank_gate ? 0 : np, u);
    if (!cfg_.kda.full_rank_gate) be_.matmul(w.g_b, tg, n, gl);
    be_.kda_decode({.q = q, .k = kk, .v = v, .f = t, .dt_bias = w.dt_bias, .a_log = w.a_log, .gp = gp, .beta = beta,
                    .g = g, .T = n, .H = h, .K = k, .V = k, .state = st.kda_state, .o_norm = w.o_norm, .eps = eps,
                    .gate = cfg_.kda.full_rank_gate ? static_cast<const float*>(tg) : gl.get(), .o = o});
  } else {
    be_.kda_gate_beta(t, w.dt_bias, w.a_log, n, h, k, gp, g, beta);  // t += dt_bias, g, beta = sigmoid(beta)
    // The delta rule. Decode rows always use the recurrent form (row-exact); a prompt pass the chunked one,
    // even of one row: its last pass (or a pass continuing a cached prefix) may have one, and must compute
    // the bits one pass over the whole prompt would.
    if (c.prefill && r) {
      be_.kda_chunked(q, kk, v, g, beta, r, h, k, k, kKdaChunk, st.kda_state, o);
      be_.copy(snap, st.kda_state, state_n * sizeof(float));
      be_.kda_chunked(q.get() + r * p, kk.get() + r * p, v.get() + r * p, g.get() + r * p, beta.get() + r * h, n - r,
                      h, k, k, kKdaChunk, st.kda_state, o.get() + r * p);
    } else if (c.prefill)
      be_.kda_chunked(q, kk, v, g, beta, n, h, k, k, kKdaChunk, st.kda_state, o);
    else
      be_.kda_recurrent(q, kk, v, g, beta, n, h, k, k, st.kda_state, o);
    // Output gate and per-head RMSNorm: o = rmsnorm(o) * o_norm * sigmoid(gate).
    const float* gate = t;
    if (cfg_.kda.full_rank_gate) {
      if (group)
        gate = tg;
      else
        be_.matmul(w.g, x, n, t);
    } else {
      if (!group) be_.matmul(w.g_a, x, n, fa);
      be_.matmul(w.g_b, group ? tg : fa.get(), n, t);
    }
    be_.rmsnorm(o, w.o_norm, n * h, k, eps, o);
    be_.gate_kept(GateAct{GateOp::sigmoid_mul}, o, gate, n, p, o);  // o *= sigmoid(gate), kept for w.o
  }
  const KeptX kept(be_, o);
  be_.matmul(w.o, o, n, out);
}

}  // namespace ferry
