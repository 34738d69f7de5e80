// Internal to io/: the per-family config parsers behind parse_model_config (io/formats/model_config.cpp).
// Each fills a ModelConfig from the JSON object that holds the language model's fields; the common
// checks (validate_model_config) then run on the result whatever the family.
#pragma once

#include "io/formats/json_fields.hpp"
#include "io/formats/model_config.hpp"

namespace ferry::detail {

// Fields every family shares (sizes, eps, token ids, head counts). `t` is the text config object.
void parse_common_fields(const JsonFields& t, ModelConfig& c);
// MLA dimensions (q/kv LoRA ranks, nope/rope/v head dims), shared by Kimi and DeepSeek.
void parse_mla_fields(const JsonFields& t, ModelConfig& c);
// RoPE from `rope_parameters` (newer HF) or `rope_scaling` + `rope_theta` (older configs).
RopeConfig parse_rope(const JsonFields& t, bool interleaved_default);
// ffn[i] = dense for i < first_k_dense_replace, else moe when i % moe_layer_freq == 0.
void assign_ffn(const JsonFields& t, ModelConfig& c, bool has_moe);
// Checks the optional HF `layer_types` / `mlp_layer_types` lists against the parsed layout.
void check_layer_type_lists(const JsonFields& t, const ModelConfig& c);
// experts_mxfp4 from a quantization_config (compressed-tensors mxfp4-pack-quantized); other
// quantizations are refused by name since no loader reads them.
void parse_quantization(const std::optional<JsonFields>& q, ModelConfig& c);

void parse_kimi(const JsonFields& top, ModelConfig& c);
void parse_deepseek(const JsonFields& top, ModelConfig& c);
void parse_qwen3(const JsonFields& top, ModelConfig& c);

// Range checks that name the family's own field names.
struct MoeKeys {
  const char* n_experts;
  const char* top_k;
  const char* n_group;
  const char* topk_group;
};
void check_moe(const JsonFields& t, const MoeConfig& m, const MoeKeys& keys);
// DSA indexer sizes; `obj` is where they were read (top level or K3.1's dsa_config).
void check_indexer(const JsonFields& obj, const ModelConfig& c);

}  // namespace ferry::detail
