// config.json for synthetic checkpoints, in each family's real shape: K3/K3.1 as a
// KimiK3(1)ForConditionalGeneration wrapper with text_config (make_tiny_k3.py), Kimi-Linear and
// DeepSeek flat as transformers 5.17 writes them (tests/fixtures/*-a/config.json).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/synth/synth.hpp"
#include "io/synth/synth_tokenizer_data.hpp"

namespace ferry {

using ordered = nlohmann::ordered_json;

Arch parse_synth_arch(const std::string& s) {
  if (s == "kimi_k31") return Arch::kimi_k31;
  if (s == "kimi_k3") return Arch::kimi_k3;
  if (s == "kimi_linear") return Arch::kimi_linear;
  if (s == "deepseek_v3") return Arch::deepseek_v3;
  if (s == "deepseek_v32") return Arch::deepseek_v32;
  throw ConfigError(fmt::format("--arch '{}' is not one of kimi_k31, kimi_k3, kimi_linear, deepseek_v3, deepseek_v32", s));
}

namespace {

bool k3_family(Arch a) { return a == Arch::kimi_k3 || a == Arch::kimi_k31; }
bool kimi(Arch a) { return k3_family(a) || a == Arch::kimi_linear; }

void def(int64_t& v, int64_t d, int64_t unset = 0) {
  if (v == unset) v = d;
}

// The small defaults are make_tiny_k3.py's preset "a" (runs on a CPU in well under a second per
// token); full_width is Kimi K3.1's real dimensions (MODEL_SPEC §1, §13) with the tiny vocabulary.
SynthDims resolve(const SynthOptions& o) {
  SynthDims d = o.dims;
  const bool full = o.full_width;
  if (full && !k3_family(o.arch)) throw ConfigError("--preset full is for kimi_k3 / kimi_k31");
  def(d.layers, full ? 2 : 6);
  def(d.hidden, full ? 7168 : 256);
  def(d.heads, full ? 96 : 4);
  def(d.kda_heads, d.heads);
  def(d.kda_head_dim, full ? 128 : 64);
  def(d.q_lora, full ? 1536 : (o.arch == Arch::kimi_linear ? 0 : 128), -1);
  def(d.kv_lora, full ? 512 : 64);
  def(d.nope, full ? 128 : 32);
  def(d.rope, full ? 64 : 16);
  def(d.v_head, full ? 128 : 32);
  def(d.experts, full ? 896 : 32);
  def(d.top_k, full ? 16 : 4);
  def(d.shared, k3_family(o.arch) ? 2 : 1, -1);
  def(d.moe_inter, full ? 3072 : 64);
  def(d.latent, k3_family(o.arch) ? (full ? 3584 : 128) : 0, -1);
  def(d.dense_inter, full ? 33792 : 512);
  def(d.vocab, synth_tokenizer::kVocab);
  def(d.res_block, k3_family(o.arch) ? (full ? 12 : 2) : 0, -1);
  def(d.index_heads, full ? 64 : 2);
  def(d.index_head_dim, full ? 128 : 32);
  def(d.index_topk, full ? 2048 : 8);
  def(d.n_group, o.arch == Arch::deepseek_v3 || o.arch == Arch::deepseek_v32 ? 4 : 1);
  def(d.topk_group, d.n_group > 1 ? 2 : 1);
  if (d.layers < 2) throw ConfigError(fmt::format("--layers {}: need at least 2 (a dense layer 0 and a MoE layer)", d.layers));
  if (d.top_k > d.experts) throw ConfigError(fmt::format("--top-k {} is more than --experts {}", d.top_k, d.experts));
  if (d.vocab < synth_tokenizer::kVocab && kimi(o.arch))
    throw ConfigError(fmt::format("--vocab {}: Kimi synth models carry the 1024-token test tokenizer", d.vocab));
  return d;
}

// Every 4th layer (1-based) plus the last, as in K3's 93 layers.
std::pair<std::vector<int64_t>, std::vector<int64_t>> kimi_layers(int64_t n) {
  std::vector<int64_t> full, kda;
  for (int64_t i = 1; i <= n; ++i) (i % 4 == 0 || i == n ? full : kda).push_back(i);
  return {full, kda};
}

ordered quantization(bool kimi_ignore) {
  ordered weights = {{"num_bits", 4}, {"group_size", 32}, {"type", "float"}, {"strategy", "group"},
                     {"symmetric", true}, {"dynamic", false}, {"scale_dtype", "uint8"}};
  ordered ignore = kimi_ignore ? ordered{"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                                         "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"}
                               : ordered{"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                         "re:.*mlp\\.(gate|up|down)_proj.*", "re:.*\\.gate$"};
  return {{"quant_method", "compressed-tensors"},
          {"format", "mxfp4-pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"format", "mxfp4-pack-quantized"}, {"targets", {"Linear"}}, {"weights", weights}}}}},
          {"ignore", ignore}};
}

void common(ordered& t, const SynthDims& d) {
  t["vocab_size"] = d.vocab;
  t["hidden_size"] = d.hidden;
  t["intermediate_size"] = d.dense_inter;
  t["num_hidden_layers"] = d.layers;
  t["num_attention_heads"] = d.heads;
  t["num_key_value_heads"] = d.heads;
  t["rms_norm_eps"] = 1e-5;
  t["max_position_embeddings"] = 4096;
  t["bos_token_id"] = synth_tokenizer::kBosId;
  t["eos_token_id"] = synth_tokenizer::kEosId;
  t["pad_token_id"] = synth_tokenizer::kPadId;
  t["tie_word_embeddings"] = false;
  t["q_lora_rank"] = d.q_lora > 0 ? ordered(d.q_lora) : ordered(nullptr);
  t["kv_lora_rank"] = d.kv_lora;
  t["qk_nope_head_dim"] = d.nope;
  t["qk_rope_head_dim"] = d.rope;
  t["v_head_dim"] = d.v_head;
  t["first_k_dense_replace"] = 1;
  t["moe_layer_freq"] = 1;
}

ordered kimi_text(const SynthOptions& o, const SynthDims& d) {
  ordered t;
  t["model_type"] = "kimi_linear";
  t["architectures"] = {"KimiLinearForCausalLM"};
  common(t, d);
  const bool k3 = k3_family(o.arch);
  t["mla_use_nope"] = true;
  t["mla_use_output_gate"] = k3;
  auto [full, kda] = kimi_layers(d.layers);
  ordered lac = {{"num_heads", d.kda_heads}, {"head_dim", d.kda_head_dim}, {"short_conv_kernel_size", 4}};
  if (k3) {
    lac["gate_lower_bound"] = -5.0;
    lac["use_full_rank_gate"] = true;
  }
  lac["full_attn_layers"] = full;
  lac["kda_layers"] = kda;
  t["linear_attn_config"] = lac;
  if (o.arch == Arch::kimi_k31)
    t["dsa_config"] = {{"dsa_layers", full}, {"index_head_dim", d.index_head_dim}, {"index_n_heads", d.index_heads},
                       {"index_topk", d.index_topk}};
  t["num_experts"] = d.experts;
  t["num_experts_per_token"] = d.top_k;
  t["num_shared_experts"] = d.shared;
  t["moe_intermediate_size"] = d.moe_inter;
  if (d.latent > 0) {
    t["routed_expert_hidden_size"] = d.latent;
    t["latent_moe_use_norm"] = true;
  }
  t["moe_renormalize"] = true;
  t["moe_router_activation_func"] = "sigmoid";
  t["topk_method"] = "noaux_tc";
  t["num_expert_group"] = 1;
  t["topk_group"] = 1;
  t["routed_scaling_factor"] = k3 ? 1.0 : 2.446;
  if (k3) {
    t["hidden_act"] = "situ";
    t["activation_situ_beta"] = 4.0;
    t["activation_situ_linear_beta"] = 25.0;
    t["attn_res_block_size"] = d.res_block;
  } else {
    t["hidden_act"] = "silu";
  }
  return t;
}

ordered deepseek(const SynthOptions& o, const SynthDims& d) {
  ordered t;
  const bool v32 = o.arch == Arch::deepseek_v32;
  t["architectures"] = {v32 ? "DeepseekV32ForCausalLM" : "DeepseekV3ForCausalLM"};
  t["model_type"] = v32 ? "deepseek_v32" : "deepseek_v3";
  common(t, d);
  t["hidden_act"] = "silu";
  t["n_routed_experts"] = d.experts;
  t["num_experts_per_tok"] = d.top_k;
  t["n_shared_experts"] = d.shared;
  t["moe_intermediate_size"] = d.moe_inter;
  t["n_group"] = d.n_group;
  t["topk_group"] = d.topk_group;
  t["norm_topk_prob"] = true;
  t["routed_scaling_factor"] = 2.5;
  t["scoring_func"] = "sigmoid";
  t["topk_method"] = "noaux_tc";
  t["rope_interleave"] = true;
  t["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 50000.0}, {"factor", 4.0}, {"original_max_position_embeddings", 1024},
                          {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  if (v32) {
    t["index_n_heads"] = d.index_heads;
    t["index_head_dim"] = d.index_head_dim;
    t["index_topk"] = d.index_topk;
  }
  t["quantization_config"] = quantization(false);
  return t;
}

}  // namespace

std::string synth_config_json(const SynthOptions& o) {
  const SynthDims d = resolve(o);
  ordered cfg;
  if (k3_family(o.arch)) {
    const bool k31 = o.arch == Arch::kimi_k31;
    cfg["model_type"] = k31 ? "kimi_k31" : "kimi_k3";
    cfg["architectures"] = {k31 ? "KimiK31ForConditionalGeneration" : "KimiK3ForConditionalGeneration"};
    cfg["media_placeholder_token_id"] = synth_tokenizer::kBosId + 21;
    cfg["torch_dtype"] = "bfloat16";
    cfg["text_config"] = kimi_text(o, d);
    cfg["quantization_config"] = quantization(true);
  } else if (o.arch == Arch::kimi_linear) {
    cfg = kimi_text(o, d);
    cfg["quantization_config"] = quantization(false);
  } else {
    cfg = deepseek(o, d);
  }
  cfg["ferry_synth"] = {{"seed", o.seed}, {"usage", o.usage.empty() ? ordered(nullptr) : ordered(o.usage.filename().string())}};
  return cfg.dump(2) + "\n";
}

}  // namespace ferry
