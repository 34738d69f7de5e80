#include "kernels/model/weights.hpp"

#include <cmath>

#include "io/formats/convert.hpp"
#include "io/errors.hpp"
#include "kernels/model/tensor_loader.hpp"

namespace ferry {

std::string layer_prefix(const ModelConfig& cfg, int layer) {
  return cfg.tensor_prefix + "model.layers." + std::to_string(layer) + ".";
}

namespace {

// The MoE block's module name differs by family: Kimi checkpoints say block_sparse_moe, DeepSeek mlp.
std::string moe_module(const ModelConfig& cfg) { return cfg.is_kimi() ? "block_sparse_moe." : "mlp."; }

std::string lp(int layer) { return "model.layers." + std::to_string(layer) + "."; }

MlpWeights load_mlp(TensorLoader& ld, const std::string& base, int64_t d, int64_t inter, SpineType st) {
  MlpWeights m;
  m.gate = ld.matrix(base + "gate_proj", inter, d, st);
  m.up = ld.matrix(base + "up_proj", inter, d, st);
  m.down = ld.matrix(base + "down_proj", d, inter, st);
  return m;
}

KdaWeights load_kda(const ModelConfig& c, TensorLoader& ld, const std::string& p, SpineType st) {
  const int64_t d = c.hidden, h = c.kda.n_heads, k = c.kda.head_dim, pw = h * k, w = c.kda.conv_kernel;
  KdaWeights x;
  x.q = ld.matrix(p + "q_proj", pw, d, st);
  x.k = ld.matrix(p + "k_proj", pw, d, st);
  x.v = ld.matrix(p + "v_proj", pw, d, st);
  x.q_conv = ld.vector(p + "q_conv1d.weight", pw * w);
  x.k_conv = ld.vector(p + "k_conv1d.weight", pw * w);
  x.v_conv = ld.vector(p + "v_conv1d.weight", pw * w);
  x.f_a = ld.matrix(p + "f_a_proj", k, d, st);
  x.f_b = ld.matrix(p + "f_b_proj", pw, k, st);
  // K3 stores A_log with head_dim entries for its heads (zero beyond H); Kimi-Linear [1,1,H,1].
  x.a_log = ld.vector_prefix(p + "A_log", h);
  x.dt_bias = ld.vector(p + "dt_bias", pw);
  x.b = ld.matrix(p + "b_proj", h, d, st);
  if (c.kda.full_rank_gate) {
    x.g = ld.matrix(p + "g_proj", pw, d, st);
  } else {
    x.g_a = ld.matrix(p + "g_a_proj", k, d, st);
    x.g_b = ld.matrix(p + "g_b_proj", pw, k, st);
  }
  x.o_norm = ld.vector(p + "o_norm.weight", k);
  x.o = ld.matrix(p + "o_proj", d, pw, st);
  return x;
}

MlaWeights load_mla(const ModelConfig& c, TensorLoader& ld, const std::string& p, bool dsa, SpineType st) {
  const int64_t d = c.hidden, h = c.n_heads, dn = c.qk_nope_dim, dr = c.qk_rope_dim, dv = c.v_head_dim;
  const int64_t r = c.kv_lora_rank, qd = h * (dn + dr);
  MlaWeights m;
  if (c.q_lora_rank > 0) {
    m.q_a = ld.matrix(p + "q_a_proj", c.q_lora_rank, d, st);
    m.q_a_norm = ld.vector(p + "q_a_layernorm.weight", c.q_lora_rank);
    m.q_b = ld.matrix(p + "q_b_proj", qd, c.q_lora_rank, st);
  } else {
    m.q = ld.matrix(p + "q_proj", qd, d, st);
  }
  m.kv_a = ld.matrix(p + "kv_a_proj_with_mqa", r + dr, d, st);
  m.kv_a_norm = ld.vector(p + "kv_a_layernorm.weight", r);
  m.kv_b = ld.matrix(p + "kv_b_proj", h * (dn + dv), r, st);
  m.o = ld.matrix(p + "o_proj", d, h * dv, st);
  if (c.mla_output_gate) m.gate = ld.matrix(p + "g_proj", h * dv, d, st);
  // Absorbed decode needs W_uk^T per head: [R, dn] from kv_b rows [h*(dn+dv), +dn). Taken from the
  // matrix as stored (dequantized if Q8_0) so both attention forms use the same weight values.
  {
    std::vector<float> kvb;
    if (m.kv_b.type == WType::f32) {
      kvb = ld.host_matrix(p + "kv_b_proj", h * (dn + dv), r);
    } else {
      std::vector<BlockQ8_0> q(static_cast<size_t>(h * (dn + dv) * r / kQK));
      auto f = ld.host_matrix(p + "kv_b_proj", h * (dn + dv), r);
      quantize_q8_0(f.data(), q.data(), static_cast<int64_t>(f.size()));
      kvb.resize(f.size());
      dequant_q8_0(q.data(), kvb.data(), static_cast<int64_t>(f.size()));
    }
    std::vector<float> t(static_cast<size_t>(h * r * dn));
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < dn; ++i)
        for (int64_t j = 0; j < r; ++j) t[(hh * r + j) * dn + i] = kvb[(hh * (dn + dv) + i) * r + j];
    m.w_uk_t = ld.upload_floats(t);
  }
  if (dsa) {
    const int64_t hi = c.index_n_heads, di = c.index_head_dim;
    const int64_t qin = c.q_lora_rank > 0 ? c.q_lora_rank : d;
    m.idx_wq_b = ld.matrix(p + "indexer.wq_b", hi * di, qin, st);
    m.idx_wk = ld.matrix(p + "indexer.wk", di, d, st);
    m.idx_w = ld.matrix(p + "indexer.weights_proj", hi, d, SpineType::f32);
    m.idx_k_norm_w = ld.vector(p + "indexer.k_norm.weight", di);
    m.idx_k_norm_b = ld.vector(p + "indexer.k_norm.bias", di);
  }
  return m;
}

GqaWeights load_gqa(const ModelConfig& c, TensorLoader& ld, const std::string& p, SpineType st) {
  const int64_t d = c.hidden, hd = c.head_dim;
  GqaWeights g;
  g.q = ld.matrix(p + "q_proj", c.n_heads * hd, d, st);
  g.k = ld.matrix(p + "k_proj", c.n_kv_heads * hd, d, st);
  g.v = ld.matrix(p + "v_proj", c.n_kv_heads * hd, d, st);
  g.o = ld.matrix(p + "o_proj", d, c.n_heads * hd, st);
  g.q_norm = ld.vector(p + "q_norm.weight", hd);
  g.k_norm = ld.vector(p + "k_norm.weight", hd);
  return g;
}

MoeWeights load_moe(const ModelConfig& c, TensorLoader& ld, const std::string& p, SpineType st) {
  const int64_t d = c.hidden, e = c.moe.n_experts;
  MoeWeights m;
  m.router = ld.matrix(p + "gate", e, d, SpineType::f32);
  if (ld.has(p + "gate.e_score_correction_bias"))
    m.score_bias = ld.vector(p + "gate.e_score_correction_bias", e);
  else
    m.score_bias = ld.upload_floats(std::vector<float>(static_cast<size_t>(e), 0.0f));
  if (c.moe.n_shared > 0) m.shared = load_mlp(ld, p + "shared_experts.", d, c.moe.moe_inter * c.moe.n_shared, st);
  if (c.moe.latent_dim > 0) {
    const int64_t l = c.moe.latent_dim;
    m.latent_down = ld.matrix(p + "routed_expert_down_proj", l, d, st);
    m.latent_up = ld.matrix(p + "routed_expert_up_proj", d, l, st);
    if (c.moe.latent_norm) m.latent_norm = ld.vector(p + "routed_expert_norm.weight", l);
  }
  return m;
}

// AttnRes weight: norm.w * proj.w, fused once (both BF16-exact, so the product is exact in f32).
Buf load_res(TensorLoader& ld, const std::string& stem, int64_t d) {
  auto n = ld.host_floats(stem + "_norm.weight", d);
  auto pr = ld.host_floats(stem + "_proj.weight", d);
  for (size_t i = 0; i < n.size(); ++i) n[i] *= pr[i];
  return ld.upload_floats(n);
}

// The weights that only ever go to Backend::matmul take the back-end's own layout (CUDA: q8_0 tiles).
// Not the embedding table (embed), nor lm_head when it is the same table, nor MLA's kv_b (its value
// rows go to matmul_heads in decode steps), nor anything of the routed experts.
void prepare_matmul_weights(const ModelConfig& c, SpineWeights& s, Backend& be) {
  auto mlp = [&](MlpWeights& m) {
    for (Weight* w : {&m.gate, &m.up, &m.down}) be.prepare_matmul_weight(*w);
  };
  if (!c.tie_embeddings) be.prepare_matmul_weight(s.lm_head);
  for (int il = 0; il < c.n_layers; ++il) {
    LayerWeights& L = s.layers[static_cast<size_t>(il)];
    switch (c.mixer[static_cast<size_t>(il)]) {
      case Mixer::kda:
        for (Weight* w : {&L.kda.q, &L.kda.k, &L.kda.v, &L.kda.f_a, &L.kda.f_b, &L.kda.b, &L.kda.g, &L.kda.g_a,
                          &L.kda.g_b, &L.kda.o})
          be.prepare_matmul_weight(*w);
        break;
      case Mixer::mla:
      case Mixer::dsa:
        for (Weight* w : {&L.mla.q, &L.mla.q_a, &L.mla.q_b, &L.mla.kv_a, &L.mla.o, &L.mla.gate, &L.mla.idx_wq_b,
                          &L.mla.idx_wk, &L.mla.idx_w})
          be.prepare_matmul_weight(*w);
        break;
      case Mixer::gqa:
        for (Weight* w : {&L.gqa.q, &L.gqa.k, &L.gqa.v, &L.gqa.o}) be.prepare_matmul_weight(*w);
        break;
    }
    if (c.ffn[static_cast<size_t>(il)] == Ffn::moe) {
      if (!L.moe.shared.gate.empty()) mlp(L.moe.shared);
      be.prepare_matmul_weight(L.moe.latent_down);
      be.prepare_matmul_weight(L.moe.latent_up);
    } else {
      mlp(L.dense);
    }
  }
}

}  // namespace

SpineWeights load_spine(const ModelConfig& c, const TensorSource& src, Backend& be, const LoadOptions& opt,
                        std::vector<Buf>& storage) {
  TensorLoader ld(src, be, c.tensor_prefix, storage);
  const SpineType st = opt.spine_type;
  SpineWeights s;
  s.embed = ld.matrix("model.embed_tokens", c.vocab, c.hidden, st);
  s.final_norm = ld.vector("model.norm.weight", c.hidden);
  if (c.tie_embeddings)
    s.lm_head = s.embed;
  else
    s.lm_head = ld.matrix("lm_head", c.vocab, c.hidden, st);
  if (c.attn_res_block > 0) s.out_res_w = load_res(ld, "model.output_attn_res", c.hidden);
  s.layers.resize(static_cast<size_t>(c.n_layers));
  for (int il = 0; il < c.n_layers; ++il) {
    LayerWeights& L = s.layers[static_cast<size_t>(il)];
    const std::string p = lp(il), a = p + "self_attn.";
    L.attn_norm = ld.vector(p + "input_layernorm.weight", c.hidden);
    L.ffn_norm = ld.vector(p + "post_attention_layernorm.weight", c.hidden);
    if (c.attn_res_block > 0) {
      L.attn_res_w = load_res(ld, p + "self_attention_res", c.hidden);
      L.mlp_res_w = load_res(ld, p + "mlp_res", c.hidden);
    }
    switch (c.mixer[static_cast<size_t>(il)]) {
      case Mixer::kda: L.kda = load_kda(c, ld, a, st); break;
      case Mixer::mla: L.mla = load_mla(c, ld, a, false, st); break;
      case Mixer::dsa: L.mla = load_mla(c, ld, a, true, st); break;
      case Mixer::gqa: L.gqa = load_gqa(c, ld, a, st); break;
    }
    if (c.ffn[static_cast<size_t>(il)] == Ffn::moe) {
      L.moe = load_moe(c, ld, p + moe_module(c), st);
    } else {
      // Kimi-Linear's save_pretrained writes the dense layer-0 MLP under block_sparse_moe.
      const std::string base = ld.has(p + "mlp.gate_proj.weight") ? p + "mlp." : p + "block_sparse_moe.";
      L.dense = load_mlp(ld, base, c.hidden, c.intermediate, st);
    }
  }
  prepare_matmul_weights(c, s, be);
  return s;
}

std::array<std::string, 3> expert_tensor_bases(const ModelConfig& c, int layer, int expert) {
  const std::string p = layer_prefix(c, layer) + moe_module(c) + "experts." + std::to_string(expert) + ".";
  if (c.is_kimi()) return {p + "w1", p + "w3", p + "w2"};
  return {p + "gate_proj", p + "up_proj", p + "down_proj"};
}

ResidentExperts::ResidentExperts(const ModelConfig& c, const TensorSource& src, Backend& be)
    : n_experts_(c.moe.n_experts) {
  TensorLoader ld(src, be, "", storage_);
  experts_.resize(static_cast<size_t>(c.n_layers * n_experts_));
  const int64_t in = c.moe.latent_dim > 0 ? c.moe.latent_dim : c.hidden, inter = c.moe.moe_inter;
  for (int il = 0; il < c.n_layers; ++il) {
    if (c.ffn[static_cast<size_t>(il)] != Ffn::moe) continue;
    for (int e = 0; e < n_experts_; ++e) {
      const auto names = expert_tensor_bases(c, il, e);
      ExpertWeights& x = experts_[static_cast<size_t>(il * n_experts_ + e)];
      const int64_t rows[3] = {inter, inter, in}, cols[3] = {in, in, inter};
      Weight* dst[3] = {&x.gate, &x.up, &x.down};
      for (int m = 0; m < 3; ++m) {
        if (ld.has(names[m] + ".weight_packed")) {
          *dst[m] = ld.matrix(names[m], rows[m], cols[m], SpineType::f32);
        } else {  // unquantized checkpoint experts: quantize to MXFP4 as `ferry prepare` does
          auto f = ld.host_matrix(names[m], rows[m], cols[m]);
          std::vector<BlockMxfp4> b(f.size() / kQK);
          quantize_mxfp4(f.data(), b.data(), static_cast<int64_t>(f.size()));
          *dst[m] = ld.upload_weight(WType::mxfp4, rows[m], cols[m], b.data(), b.size() * sizeof(BlockMxfp4));
        }
      }
    }
  }
  prepare_resident_experts(experts_, be);
}

void prepare_resident_experts(std::vector<ExpertWeights>& experts, Backend& be) {
  std::vector<Weight*> ws;
  ws.reserve(3 * experts.size());
  for (ExpertWeights& e : experts)
    for (Weight* w : {&e.gate, &e.up, &e.down})
      if (!w->empty()) ws.push_back(w);
  if (!ws.empty()) be.prepare_expert_weights(ws.data(), ws.size());
}

const ExpertWeights& ResidentExperts::get(int layer, int expert) const {
  return experts_[static_cast<size_t>(layer * n_experts_ + expert)];
}

void ResidentExperts::fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) {
  std::vector<size_t> idx(uses.size());
  std::vector<ExpertWeights> w(uses.size());
  for (size_t i = 0; i < uses.size(); ++i) {
    idx[i] = i;
    w[i] = get(layer, uses[i].expert);
  }
  compute(idx, w);
}

}  // namespace ferry
