// MLA (with the K3 output gate and the DSA indexer) and GQA attention layers (MODEL_SPEC.md §4, §5).
#include <cmath>
#include <iterator>

#include "kernels/model/kept_x.hpp"
#include "kernels/model/model_ctx.hpp"

namespace ferry {
namespace {
// q_a_layernorm / kv_a_layernorm are built with the class default eps (DeepSeek and Kimi code alike).
constexpr float kLatentNormEps = 1e-6f;
// DSA indexer k_norm: LayerNorm(di, eps=1e-6).
constexpr float kIndexerNormEps = 1e-6f;
}  // namespace

void Model::indexer(int il, Ctx& c, const float* x, const float* cq, Buf& sel) {
  const MlaWeights& w = w_.layers[static_cast<size_t>(il)].mla;
  LayerState& st = c.s->layers[static_cast<size_t>(il)];
  const int64_t n = c.n, hi = cfg_.index_n_heads, di = cfg_.index_head_dim, dr = cfg_.qk_rope_dim;
  // The indexer's keys of the new positions go to its cache in every case.
  float* kdst = st.index_k.get() + c.pos0 * di;
  be_.matmul(w.idx_wk, x, n, kdst);
  be_.layernorm(kdst, w.idx_k_norm_w, w.idx_k_norm_b, n, di, kIndexerNormEps, kdst);
  // The indexer rotates its first dr dims with half-split (non-interleaved) RoPE.
  const RopeParams rp{inv_freq_.data(), dr, rope_attention_factor_, false};
  if (!inv_freq_.empty()) be_.rope(kdst, n, 1, di, di, 0, c.pos.data(), rp);
  const int64_t topk = cfg_.index_topk;
  // Query t sees the keys 0 .. pos0 + t. While that is at most topk keys for every query (contexts up to
  // index_topk = 2,048 for K3.1), the selection is every visible key whatever the scores, in both tie modes
  // (by position: n = visible; torch's top-k of the whole row takes all pos0 + n entries and drops none that
  // is visible): dense causal attention, the same keys in the same order (so the same bits: tests
  // Attention.SelectionOfAllVisibleEqualsDenseBitwise, Ops.AttentionWithEveryVisibleKeySelectedHasTheDenseBits).
  // So no selection at all (sel empty): no query side, no score kernel, no host round trip for the scores,
  // and no [n, topk] list for the back-end to check and stage (8 MB for a 1,024-token pass).
  if (c.pos0 + n <= topk) {
    sel.reset();
    return;
  }
  // [n, topk] int32 in the back-end's memory (float-sized slots), written in full by indexer_topk and read by
  // attention: on a GPU the selection need not visit the host (CUDA's device_select).
  sel = Buf(be_, static_cast<size_t>(n * topk), Buf::Uninit{});
  Buf q(be_, static_cast<size_t>(n * hi * di), Buf::Uninit{}), wts(be_, static_cast<size_t>(n * hi), Buf::Uninit{});
  be_.matmul(w.idx_wq_b, cq, n, q);
  if (!inv_freq_.empty()) be_.rope(q, n, hi, hi * di, di, 0, c.pos.data(), rp);
  be_.matmul(w.idx_w, x, n, wts);
  // HF: weights * Hi^-0.5, scores * di^-0.5 inside the ReLU (a positive scale commutes with it).
  be_.scale(wts, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hi * di))), n * hi);
  be_.indexer_topk(q, st.index_k, wts, n, c.pos0 + n, hi, di, c.pos0, topk, reinterpret_cast<int32_t*>(sel.get()),
                   indexer_ties_);
}

void Model::mixer_mla(int il, Ctx& c, const float* x, float* out) {
  const MlaWeights& w = w_.layers[static_cast<size_t>(il)].mla;
  LayerState& st = c.s->layers[static_cast<size_t>(il)];
  const int64_t n = c.n, h = cfg_.n_heads, dn = cfg_.qk_nope_dim, dr = cfg_.qk_rope_dim, dv = cfg_.v_head_dim;
  const int64_t r = cfg_.kv_lora_rank, qk = dn + dr, lw = r + dr, len = c.pos0 + n;
  // Queries [n, H, dn+dr]. The query's first projection and the latent cache rows [c | k_pe] of the new
  // positions, both of x, are one matmul group (Backend::matmul_group: the bits of each alone).
  Buf q(be_, static_cast<size_t>(n * h * qk), Buf::Uninit{}), cq;
  float* lat = st.latent.get() + c.pos0 * lw;
  if (!w.q_a.empty()) {
    cq = Buf(be_, static_cast<size_t>(n * cfg_.q_lora_rank), Buf::Uninit{});
    const MatmulOut outs[] = {{&w.q_a, cq}, {&w.kv_a, lat}};
    be_.matmul_group(outs, std::size(outs), x, n);
    be_.rmsnorm(cq, w.q_a_norm, n, cfg_.q_lora_rank, kLatentNormEps, cq);
    be_.matmul(w.q_b, cq, n, q);
  } else {
    const MatmulOut outs[] = {{&w.q, q}, {&w.kv_a, lat}};
    be_.matmul_group(outs, std::size(outs), x, n);
  }
  // The latent rows' c part normalised in place.
  {
    Buf ckv(be_, static_cast<size_t>(n * r), Buf::Uninit{});
    be_.copy2d(lat, lw, ckv, r, n, r);
    be_.rmsnorm(ckv, w.kv_a_norm, n, r, kLatentNormEps, ckv);
    be_.copy2d(ckv, r, lat, lw, n, r);
  }
  if (!inv_freq_.empty()) {  // DeepSeek/K2: interleaved RoPE on q_pe and k_pe; Kimi is NoPE
    RopeParams rp{inv_freq_.data(), dr, rope_attention_factor_, cfg_.rope.interleaved};
    be_.rope(q, n, h, h * qk, qk, dn, c.pos.data(), rp);
    be_.rope(lat, n, 1, lw, lw, r, c.pos.data(), rp);
  }
  Buf sel;
  if (cfg_.mixer[static_cast<size_t>(il)] == Mixer::dsa)
    indexer(il, c, x, cq.get() ? cq.get() : x, sel);

  AttentionArgs aa;
  aa.T = n;
  aa.L = len;
  aa.Hq = h;
  aa.q_pos0 = c.pos0;
  aa.scale = attn_scale_;
  if (sel.get()) {
    aa.sel = reinterpret_cast<const int32_t*>(sel.get());
    aa.sel_k = cfg_.index_topk;
    aa.sel_ascending = true;
  }
  Buf att(be_, static_cast<size_t>(n * h * dv), Buf::Uninit{});
  if (c.prefill) {
    // Unabsorbed: expand every cached latent to per-head keys [L, H, dn+dr] and values.
    Buf cl(be_, static_cast<size_t>(len * r), Buf::Uninit{}), kv(be_, static_cast<size_t>(len * h * (dn + dv)), Buf::Uninit{});
    Buf kf(be_, static_cast<size_t>(len * h * qk), Buf::Uninit{});
    be_.copy2d(st.latent, lw, cl, r, len, r);
    be_.matmul(w.kv_b, cl, len, kv);
    // Keys [L, H, dn+dr]: every (position, head)'s nope part in one copy (rows of kv and kf are (position,
    // head) pairs alike), then the shared rope part into each head's slot.
    be_.copy2d(kv, dn + dv, kf, qk, len * h, dn);
    for (int64_t hh = 0; hh < h; ++hh) be_.copy2d(st.latent.get() + r, lw, kf.get() + hh * qk + dn, h * qk, len, dr);
    aa.q = q; aa.q_tok_stride = h * qk; aa.q_head_stride = qk;
    aa.k = kf; aa.k_tok_stride = h * qk; aa.k_head_stride = qk;
    aa.v = kv.get() + dn; aa.v_tok_stride = h * (dn + dv); aa.v_head_stride = dn + dv;
    aa.Hk = h; aa.Dk = qk; aa.Dv = dv;
    aa.out = att;
    be_.attention(aa);
  } else {
    // Absorbed: q_abs_h = [q_nope_h @ W_uk_h | q_pe_h] against the shared latent (MQA, one kv head).
    // Every head at once (Backend::matmul_heads); q_pe rows of all (token, head) pairs in one copy.
    Buf qa(be_, static_cast<size_t>(n * h * lw), Buf::Uninit{});
    const Weight uk{WType::f32, r, dn, w.w_uk_t.get()};
    be_.matmul_heads(uk, HeadsLayout{h, r, h * qk, qk, h * lw, lw}, q, n, qa);
    if (dr > 0) be_.copy2d(q.get() + dn, qk, qa.get() + r, lw, n * h, dr);
    Buf ol(be_, static_cast<size_t>(n * h * r), Buf::Uninit{});
    aa.q = qa; aa.q_tok_stride = h * lw; aa.q_head_stride = lw;
    aa.k = st.latent; aa.k_tok_stride = lw; aa.k_head_stride = 0;
    aa.v = st.latent; aa.v_tok_stride = lw; aa.v_head_stride = 0;
    aa.Hk = 1; aa.Dk = lw; aa.Dv = r;
    aa.out = ol;
    be_.attention(aa);
    Weight uv = w.kv_b;  // head h's value rows: kv_b rows h*(dn+dv)+dn .. +dv
    uv.rows = dv;
    uv.data = static_cast<const char*>(w.kv_b.data) + dn * static_cast<int64_t>(w.kv_b.row_bytes());
    be_.matmul_heads(uv, HeadsLayout{h, dn + dv, h * r, r, h * dv, dv}, ol, n, att);
  }
  if (!w.gate.empty()) {  // K3 gated MLA: a *= sigmoid(x @ g_proj^T), kept for w.o
    Buf g(be_, static_cast<size_t>(n * h * dv), Buf::Uninit{});
    be_.matmul(w.gate, x, n, g);
    be_.gate_kept(GateAct{GateOp::sigmoid_mul}, att, g, n, h * dv, att);
    const KeptX kept(be_, att);
    be_.matmul(w.o, att, n, out);
    return;
  }
  be_.matmul(w.o, att, n, out);
}

void Model::mixer_gqa(int il, Ctx& c, const float* x, float* out) {
  const GqaWeights& w = w_.layers[static_cast<size_t>(il)].gqa;
  LayerState& st = c.s->layers[static_cast<size_t>(il)];
  const int64_t n = c.n, h = cfg_.n_heads, hk = cfg_.n_kv_heads, hd = cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_eps);
  Buf q(be_, static_cast<size_t>(n * h * hd), Buf::Uninit{});
  float* kd = st.k.get() + c.pos0 * hk * hd;
  float* vd = st.v.get() + c.pos0 * hk * hd;
  be_.matmul(w.q, x, n, q);
  be_.matmul(w.k, x, n, kd);
  be_.matmul(w.v, x, n, vd);
  be_.rmsnorm(q, w.q_norm, n * h, hd, eps, q);
  be_.rmsnorm(kd, w.k_norm, n * hk, hd, eps, kd);
  RopeParams rp{inv_freq_.data(), hd, 1.0f, false};
  be_.rope(q, n, h, h * hd, hd, 0, c.pos.data(), rp);
  be_.rope(kd, n, hk, hk * hd, hd, 0, c.pos.data(), rp);
  Buf att(be_, static_cast<size_t>(n * h * hd), Buf::Uninit{});
  AttentionArgs aa;
  aa.q = q; aa.q_tok_stride = h * hd; aa.q_head_stride = hd;
  aa.k = st.k; aa.k_tok_stride = hk * hd; aa.k_head_stride = hd;
  aa.v = st.v; aa.v_tok_stride = hk * hd; aa.v_head_stride = hd;
  aa.out = att;
  aa.T = n; aa.L = c.pos0 + n; aa.Hq = h; aa.Hk = hk; aa.Dk = hd; aa.Dv = hd;
  aa.q_pos0 = c.pos0;
  aa.scale = attn_scale_;
  be_.attention(aa);
  be_.matmul(w.o, att, n, out);
}

}  // namespace ferry
