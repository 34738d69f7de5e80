// Per-family tensor names and shapes. Kimi K3/K3.1 follow make_tiny_k3.py (the released
// checkpoint's layout: "language_model." wrapper, F32 conv/A_log/dt_bias/o_norm); Kimi-Linear and
// DeepSeek follow what transformers 5.17 save_pretrained writes (the fixtures' names).
#include "io/synth/synth_layout.hpp"

#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/formats/ggml_blocks.hpp"

namespace ferry {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t TensorSpec::bytes() const { return numel() * static_cast<int64_t>(dtype_size(dtype)); }

int64_t expert_in_dim(const ModelConfig& c) { return c.moe.latent_dim > 0 ? c.moe.latent_dim : c.hidden; }

MatrixShape expert_matrix_shape(const ModelConfig& c, ExpertMatrix m) {
  const int64_t in = expert_in_dim(c), inter = c.moe.moe_inter;
  return m == ExpertMatrix::down ? MatrixShape{in, inter} : MatrixShape{inter, in};
}

namespace {

bool k3_family(const ModelConfig& c) { return c.arch == Arch::kimi_k3 || c.arch == Arch::kimi_k31; }

// The FFN module name of a layer: Kimi puts MoE (and, in HF's save, Kimi-Linear's dense layer 0)
// under block_sparse_moe; K3's dense layer and DeepSeek use mlp.
std::string ffn_module(const ModelConfig& c, Ffn f) {
  if (c.arch == Arch::kimi_linear) return "block_sparse_moe";
  if (k3_family(c) && f == Ffn::moe) return "block_sparse_moe";
  return "mlp";
}

const char* expert_suffix(const ModelConfig& c, ExpertMatrix m) {
  if (c.is_kimi()) return m == ExpertMatrix::gate ? "w1" : m == ExpertMatrix::up ? "w3" : "w2";
  return m == ExpertMatrix::gate ? "gate_proj" : m == ExpertMatrix::up ? "up_proj" : "down_proj";
}

// Accumulates specs with the current layer stamped on them.
struct Emitter {
  const std::function<void(const TensorSpec&)>& fn;
  int32_t layer = -1;

  void add(std::string name, DType t, std::vector<int64_t> shape, Init init, float gain = 1.0f) {
    TensorSpec s;
    s.name = std::move(name);
    s.dtype = t;
    s.shape = std::move(shape);
    s.init = init;
    s.gain = gain;
    s.layer = layer;
    fn(s);
  }
  void mat(const std::string& name, int64_t rows, int64_t cols, float gain = 1.0f) {
    add(name + ".weight", DType::bf16, {rows, cols}, Init::matrix, gain);
  }
  void norm(const std::string& name, int64_t n, DType t = DType::bf16) {
    add(name + ".weight", t, {n}, Init::norm);
  }
};

void emit_kda(const ModelConfig& c, Emitter& e, const std::string& a) {
  const int64_t nh = c.kda.n_heads, dk = c.kda.head_dim, P = c.kda_width(), D = c.hidden;
  const bool k3 = k3_family(c);
  const DType small_t = k3 ? DType::f32 : DType::bf16;  // K3 keeps these F32; HF's save writes BF16
  for (const char* x : {"q", "k", "v"}) {
    e.mat(fmt::format("{}.{}_proj", a, x), P, D);
    e.add(fmt::format("{}.{}_conv1d.weight", a, x), small_t, {P, 1, c.kda.conv_kernel}, Init::conv);
  }
  e.mat(a + ".f_a_proj", dk, D);
  e.mat(a + ".f_b_proj", P, dk);
  if (k3) {
    if (nh > dk) throw ConfigError(fmt::format("synth layout: K3 stores A_log as [head_dim]; num_heads {} > head_dim {}", nh, dk));
    e.add(a + ".A_log", DType::f32, {dk}, Init::a_log);
  } else {
    e.add(a + ".A_log", DType::bf16, {1, 1, nh, 1}, Init::a_log);
  }
  e.add(a + ".dt_bias", small_t, {P}, Init::dt_bias);
  e.mat(a + ".b_proj", nh, D);
  if (c.kda.full_rank_gate) {
    e.mat(a + ".g_proj", P, D);
  } else {
    e.mat(a + ".g_a_proj", dk, D);
    e.mat(a + ".g_b_proj", P, dk);
  }
  e.norm(a + ".o_norm", dk, small_t);
  e.mat(a + ".o_proj", D, P);
}

void emit_mla(const ModelConfig& c, Emitter& e, const std::string& a, bool dsa) {
  const int64_t D = c.hidden, nh = c.n_heads, qk = c.qk_head_dim();
  if (c.q_lora_rank > 0) {
    e.mat(a + ".q_a_proj", c.q_lora_rank, D);
    e.norm(a + ".q_a_layernorm", c.q_lora_rank);
    e.mat(a + ".q_b_proj", nh * qk, c.q_lora_rank);
  } else {
    e.mat(a + ".q_proj", nh * qk, D);
  }
  e.mat(a + ".kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_dim, D);
  e.norm(a + ".kv_a_layernorm", c.kv_lora_rank);
  e.mat(a + ".kv_b_proj", nh * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank);
  if (c.mla_output_gate) e.mat(a + ".g_proj", nh * c.v_head_dim, D);
  e.mat(a + ".o_proj", D, nh * c.v_head_dim);
  if (!dsa) return;
  if (c.q_lora_rank <= 0) throw ConfigError("synth layout: the DSA indexer's wq_b needs q_lora_rank > 0");
  const int64_t hi = c.index_n_heads, di = c.index_head_dim;
  e.mat(a + ".indexer.wq_b", hi * di, c.q_lora_rank);
  e.mat(a + ".indexer.wk", di, D);
  e.norm(a + ".indexer.k_norm", di);
  e.add(a + ".indexer.k_norm.bias", DType::bf16, {di}, Init::small);
  e.mat(a + ".indexer.weights_proj", hi, D);
}

void emit_gqa(const ModelConfig& c, Emitter& e, const std::string& a) {
  const int64_t D = c.hidden, hd = c.head_dim;
  e.mat(a + ".q_proj", c.n_heads * hd, D);
  e.mat(a + ".k_proj", c.n_kv_heads * hd, D);
  e.mat(a + ".v_proj", c.n_kv_heads * hd, D);
  e.mat(a + ".o_proj", D, c.n_heads * hd);
  e.norm(a + ".q_norm", hd);
  e.norm(a + ".k_norm", hd);
}

void emit_mlp(Emitter& e, const std::string& m, int64_t inter, int64_t D) {
  e.mat(m + ".gate_proj", inter, D);
  e.mat(m + ".up_proj", inter, D);
  e.mat(m + ".down_proj", D, inter);
}

void emit_routed(const ModelConfig& c, Emitter& e, int layer, int expert) {
  // K3's writer emits w1, w2, w3; the order inside a checkpoint is irrelevant to readers.
  for (ExpertMatrix m : {ExpertMatrix::gate, ExpertMatrix::up, ExpertMatrix::down}) {
    const auto [rows, cols] = expert_matrix_shape(c, m);
    const std::string base = expert_matrix_name(c, layer, expert, m);
    TensorSpec s;
    s.layer = layer;
    s.expert = expert;
    s.matrix = m;
    s.init = Init::matrix;
    if (c.moe.experts_mxfp4) {
      s.name = base + ".weight_packed";
      s.dtype = DType::u8;
      s.shape = {rows, cols / 2};
      e.fn(s);
      s.name = base + ".weight_scale";
      s.shape = {rows, cols / kQK};
      s.is_scale = true;
      e.fn(s);
    } else {
      s.name = base + ".weight";
      s.shape = {rows, cols};
      e.fn(s);
    }
  }
}

void emit_moe(const ModelConfig& c, Emitter& e, int layer, const std::string& m) {
  const int64_t D = c.hidden, E = c.moe.n_experts;
  e.mat(m + ".gate", E, D);
  e.add(m + ".gate.e_score_correction_bias", DType::f32, {E}, Init::small);
  if (c.moe.latent_dim > 0) {
    e.mat(m + ".routed_expert_down_proj", c.moe.latent_dim, D);
    if (c.moe.latent_norm) e.norm(m + ".routed_expert_norm", c.moe.latent_dim);
    e.mat(m + ".routed_expert_up_proj", D, c.moe.latent_dim);
  }
  for (int x = 0; x < E; ++x) emit_routed(c, e, layer, x);
  if (c.moe.n_shared > 0) emit_mlp(e, m + ".shared_experts", c.moe.moe_inter * c.moe.n_shared, D);
}

void check_dims(const ModelConfig& c) {
  if (c.count(Ffn::moe) == 0 || !c.moe.experts_mxfp4) return;
  const int64_t in = expert_in_dim(c), inter = c.moe.moe_inter;
  if (in % kQK != 0 || inter % kQK != 0)
    throw ConfigError(fmt::format("MXFP4 experts need input widths that are multiples of 32; got "
                                  "expert in {} and moe_intermediate_size {}", in, inter));
}

}  // namespace

std::string expert_matrix_name(const ModelConfig& c, int layer, int expert, ExpertMatrix m) {
  return fmt::format("{}model.layers.{}.{}.experts.{}.{}", c.tensor_prefix, layer, ffn_module(c, Ffn::moe), expert,
                     expert_suffix(c, m));
}

void visit_checkpoint_layout(const ModelConfig& c, const std::function<void(const TensorSpec&)>& fn) {
  check_dims(c);
  Emitter e{fn};
  const std::string P = c.tensor_prefix + "model";
  const int64_t D = c.hidden;
  e.add(P + ".embed_tokens.weight", DType::bf16, {c.vocab, D}, Init::embed);
  for (int il = 0; il < static_cast<int>(c.n_layers); ++il) {
    e.layer = il;
    const std::string q = fmt::format("{}.layers.{}", P, il);
    if (c.attn_res_block > 0) {
      e.norm(q + ".self_attention_res_norm", D);
      e.mat(q + ".self_attention_res_proj", 1, D);
    }
    e.norm(q + ".input_layernorm", D);
    const Mixer mx = c.mixer.at(il);
    if (mx == Mixer::kda) emit_kda(c, e, q + ".self_attn");
    else if (mx == Mixer::gqa) emit_gqa(c, e, q + ".self_attn");
    else emit_mla(c, e, q + ".self_attn", mx == Mixer::dsa);
    if (c.attn_res_block > 0) {
      e.norm(q + ".mlp_res_norm", D);
      e.mat(q + ".mlp_res_proj", 1, D);
    }
    e.norm(q + ".post_attention_layernorm", D);
    const Ffn f = c.ffn.at(il);
    const std::string m = q + "." + ffn_module(c, f);
    if (f == Ffn::dense) emit_mlp(e, m, c.intermediate, D);
    else emit_moe(c, e, il, m);
  }
  e.layer = -1;
  if (c.attn_res_block > 0) {
    e.norm(P + ".output_attn_res_norm", D);
    e.mat(P + ".output_attn_res_proj", 1, D);
  }
  e.norm(P + ".norm", D);
  if (!c.tie_embeddings) e.mat(c.tensor_prefix + "lm_head", c.vocab, D, 2.0f);
}

std::vector<TensorSpec> checkpoint_layout(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  visit_checkpoint_layout(c, [&](const TensorSpec& s) { out.push_back(s); });
  return out;
}

}  // namespace ferry
