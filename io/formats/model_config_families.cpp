// The family-specific halves of parse_model_config: where each family keeps its fields and what
// it calls them (MODEL_SPEC.md §1, §13).
#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/formats/model_config_parse.hpp"

namespace ferry::detail {

namespace {

// Kimi layer lists are 1-INDEXED (K3 config: full_attn_layers [4, 8, ..., 92, 93]). Marks
// `kind` for each listed layer; a layer listed twice (in this list or an earlier one) is an error.
void mark_layers(const JsonFields& obj, const std::string& key, int64_t n_layers, Mixer kind,
                 std::vector<int>& assigned, const std::vector<std::string>& owner_names) {
  for (int64_t one_based : obj.req_int_list(key)) {
    if (one_based < 1 || one_based > n_layers)
      obj.fail(key, fmt::format("layer {} is out of range: these lists are 1-indexed, 1..num_hidden_layers={}",
                                one_based, n_layers));
    int& slot = assigned[one_based - 1];
    if (slot >= 0)
      obj.fail(key, fmt::format("layer {} (1-indexed) is also listed in {}", one_based, owner_names[slot]));
    slot = static_cast<int>(kind);
  }
}

void parse_kimi_layers(const JsonFields& t, const JsonFields& lac, ModelConfig& c) {
  // assigned[i] = the Mixer (as int) that claimed layer i, -1 while unclaimed.
  std::vector<int> assigned(c.n_layers, -1);
  std::vector<std::string> owner(4);
  owner[static_cast<int>(Mixer::kda)] = lac.where("kda_layers");
  owner[static_cast<int>(Mixer::mla)] = lac.where("full_attn_layers");
  mark_layers(lac, "kda_layers", c.n_layers, Mixer::kda, assigned, owner);
  if (c.arch == Arch::kimi_k31) {
    // K3.1: the DSA layers replace the full-attention (MLA) layers; mark them first so a
    // full_attn_layers entry that repeats a DSA layer is accepted, not reported as a duplicate.
    auto dsa = t.req_obj("dsa_config");
    owner[static_cast<int>(Mixer::dsa)] = dsa.where("dsa_layers");
    mark_layers(dsa, "dsa_layers", c.n_layers, Mixer::dsa, assigned, owner);
    c.index_n_heads = dsa.req_int("index_n_heads");
    c.index_head_dim = dsa.req_int("index_head_dim");
    c.index_topk = dsa.req_int("index_topk");
    check_indexer(dsa, c);
    for (int64_t one_based : lac.req_int_list("full_attn_layers")) {
      if (one_based < 1 || one_based > c.n_layers)
        lac.fail("full_attn_layers", fmt::format("layer {} is out of range: these lists are 1-indexed, "
                                                 "1..num_hidden_layers={}", one_based, c.n_layers));
      int& slot = assigned[one_based - 1];
      if (slot == static_cast<int>(Mixer::kda))
        lac.fail("full_attn_layers", fmt::format("layer {} (1-indexed) is also listed in {}", one_based, owner[slot]));
      if (slot < 0) slot = static_cast<int>(Mixer::mla);
    }
  } else {
    mark_layers(lac, "full_attn_layers", c.n_layers, Mixer::mla, assigned, owner);
  }
  c.mixer.resize(c.n_layers);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    if (assigned[i] < 0)
      lac.fail("kda_layers", fmt::format("layer {} (1-indexed) is in neither kda_layers nor full_attn_layers", i + 1));
    c.mixer[i] = static_cast<Mixer>(assigned[i]);
  }
}

void parse_kda(const JsonFields& t, const JsonFields& lac, ModelConfig& c) {
  c.kda.n_heads = lac.req_int("num_heads");
  c.kda.head_dim = lac.req_int("head_dim");
  c.kda.conv_kernel = lac.opt_int("short_conv_kernel_size", 4);
  c.kda.full_rank_gate = lac.opt_bool("use_full_rank_gate", false);
  if (auto lb = lac.maybe_num("gate_lower_bound")) {
    c.kda.has_lower_bound = true;
    c.kda.gate_lower_bound = *lb;
  }
  if (c.kda.n_heads <= 0) lac.fail("num_heads", "must be positive");
  if (c.kda.head_dim <= 0) lac.fail("head_dim", "must be positive");
  if (c.kda.conv_kernel <= 0) lac.fail("short_conv_kernel_size", "must be positive");
  // HF KimiLinearConfig also writes the KDA sizes at top level; they must agree.
  if (t.has("linear_num_heads") && t.req_int("linear_num_heads") != c.kda.n_heads)
    t.fail("linear_num_heads", fmt::format("is {} but {} is {}", t.req_int("linear_num_heads"),
                                           lac.where("num_heads"), c.kda.n_heads));
  if (t.has("linear_head_dim") && t.req_int("linear_head_dim") != c.kda.head_dim)
    t.fail("linear_head_dim", fmt::format("is {} but {} is {}", t.req_int("linear_head_dim"),
                                          lac.where("head_dim"), c.kda.head_dim));
}

void parse_kimi_moe(const JsonFields& t, ModelConfig& c) {
  c.moe.n_experts = t.req_int("num_experts");
  c.moe.top_k = t.req_int("num_experts_per_token");
  c.moe.n_shared = t.opt_int("num_shared_experts", 0);
  c.moe.moe_inter = t.req_int("moe_intermediate_size");
  c.moe.latent_dim = t.opt_int("routed_expert_hidden_size", 0);
  c.moe.latent_norm = t.opt_bool("latent_moe_use_norm", false);
  c.moe.renormalize = t.opt_bool("moe_renormalize", true);
  c.moe.routed_scale = t.opt_num("routed_scaling_factor", 1.0);
  c.moe.n_group = t.opt_int("num_expert_group", 1);
  c.moe.topk_group = t.opt_int("topk_group", 1);
  check_moe(t, c.moe, {"num_experts", "num_experts_per_token", "num_expert_group", "topk_group"});
  if (c.moe.n_shared < 0) t.fail("num_shared_experts", "must not be negative");
  if (c.moe.latent_dim < 0) t.fail("routed_expert_hidden_size", "must not be negative");
  std::string router = t.opt_str("moe_router_activation_func", "sigmoid");
  if (router != "sigmoid") t.fail("moe_router_activation_func", fmt::format("'{}' is not supported (sigmoid is)", router));
}

void parse_activation(const JsonFields& t, ModelConfig& c) {
  std::string act = t.opt_str("hidden_act", "silu");
  if (act == "silu") {
    c.act = Activation::silu;
  } else if (act == "situ") {
    c.act = Activation::situ;
    c.situ_beta = t.opt_num("activation_situ_beta", 1.0);
    c.situ_linear_beta = t.opt_num("activation_situ_linear_beta", 0.0);
    if (!(c.situ_beta > 0)) t.fail("activation_situ_beta", "must be positive");
    if (c.situ_linear_beta < 0) t.fail("activation_situ_linear_beta", "must not be negative");
  } else {
    t.fail("hidden_act", fmt::format("'{}' is not supported (silu, situ are)", act));
  }
}

}  // namespace

void parse_kimi(const JsonFields& top, ModelConfig& c) {
  const bool wrapped = c.arch != Arch::kimi_linear;
  // K3/K3.1 wrap the language model in text_config (its own model_type kimi_linear is expected).
  JsonFields t = wrapped ? top.req_obj("text_config") : top;
  c.tensor_prefix = wrapped ? "language_model." : "";
  parse_common_fields(t, c);
  parse_mla_fields(t, c);
  // HF 5.17 KimiLinear applies no RoPE in MLA; K3 says so with mla_use_nope. A K3-family config that
  // turns NoPE off gets plain interleaved RoPE from rope_theta, since Moonshot's code is the only spec.
  c.mla_nope = c.arch == Arch::kimi_linear ? true : t.opt_bool("mla_use_nope", true);
  c.mla_output_gate = t.opt_bool("mla_use_output_gate", false);
  if (c.mla_nope)
    c.rope = RopeConfig{};
  else
    c.rope = parse_rope(t, true);
  auto lac = t.req_obj("linear_attn_config");
  parse_kimi_layers(t, lac, c);
  parse_kda(t, lac, c);
  parse_kimi_moe(t, c);
  parse_activation(t, c);
  c.attn_res_block = t.opt_int("attn_res_block_size", 0);
  if (c.attn_res_block < 0) t.fail("attn_res_block_size", "must not be negative");
  assign_ffn(t, c, true);
  check_layer_type_lists(t, c);
  // compressed-tensors puts quantization_config at the top level of the checkpoint's config; some
  // exports keep it inside text_config.
  auto q = top.maybe_obj("quantization_config");
  parse_quantization(q ? q : (wrapped ? t.maybe_obj("quantization_config") : std::nullopt), c);
}

void parse_deepseek(const JsonFields& top, ModelConfig& c) {
  const JsonFields& t = top;
  parse_common_fields(t, c);
  parse_mla_fields(t, c);
  c.rope = parse_rope(t, true);
  c.moe.n_experts = t.req_int("n_routed_experts");
  c.moe.top_k = t.req_int("num_experts_per_tok");
  c.moe.n_shared = t.opt_int("n_shared_experts", 1);  // HF DeepseekV3Config default
  c.moe.moe_inter = t.req_int("moe_intermediate_size");
  c.moe.renormalize = t.opt_bool("norm_topk_prob", true);
  c.moe.routed_scale = t.opt_num("routed_scaling_factor", 1.0);
  c.moe.n_group = t.opt_int("n_group", 1);
  c.moe.topk_group = t.opt_int("topk_group", 1);
  check_moe(t, c.moe, {"n_routed_experts", "num_experts_per_tok", "n_group", "topk_group"});
  if (c.moe.n_shared < 0) t.fail("n_shared_experts", "must not be negative");
  std::string scoring = t.opt_str("scoring_func", "sigmoid");
  if (scoring != "sigmoid") t.fail("scoring_func", fmt::format("'{}' is not supported (sigmoid is)", scoring));
  parse_activation(t, c);
  if (c.act != Activation::silu) t.fail("hidden_act", "must be silu for DeepSeek models");
  const Mixer m = c.arch == Arch::deepseek_v32 ? Mixer::dsa : Mixer::mla;
  c.mixer.assign(c.n_layers, m);
  if (m == Mixer::dsa) {
    c.index_n_heads = t.req_int("index_n_heads");
    c.index_head_dim = t.req_int("index_head_dim");
    c.index_topk = t.req_int("index_topk");
    check_indexer(t, c);
  }
  assign_ffn(t, c, true);
  check_layer_type_lists(t, c);
  parse_quantization(t.maybe_obj("quantization_config"), c);
}

void parse_qwen3(const JsonFields& top, ModelConfig& c) {
  const JsonFields& t = top;
  parse_common_fields(t, c);
  c.head_dim = t.opt_int("head_dim", c.hidden / c.n_heads);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) t.fail("head_dim", fmt::format("must be positive and even, got {}", c.head_dim));
  if (c.n_heads % c.n_kv_heads != 0)
    t.fail("num_key_value_heads", fmt::format("{} does not divide num_attention_heads {}", c.n_kv_heads, c.n_heads));
  c.rope = parse_rope(t, false);
  if (c.rope.type == RopeType::none) c.rope.type = RopeType::default_;
  parse_activation(t, c);
  if (c.act != Activation::silu) t.fail("hidden_act", "must be silu for qwen3");
  if (c.intermediate <= 0) t.fail("intermediate_size", "must be positive");
  c.mixer.assign(c.n_layers, Mixer::gqa);
  assign_ffn(t, c, false);
  check_layer_type_lists(t, c);
  parse_quantization(t.maybe_obj("quantization_config"), c);
}

}  // namespace ferry::detail
