// validate_model_sizes: the limits of size_limits.hpp applied to a parsed ModelConfig.
#include "io/formats/size_limits.hpp"

#include <algorithm>
#include <initializer_list>

#include "io/formats/model_config.hpp"

namespace ferry {

namespace {

struct Field {
  const char* name;  // the config.json field (generic HF name)
  int64_t value;
  int64_t lo, hi;
  const char* why;
};

void check_fields(const std::string& origin, std::initializer_list<Field> fields) {
  for (const Field& f : fields)
    check_size<ConfigError>(fmt::format("{}: {}", origin, f.name), f.value, f.lo, f.hi, f.why);
}

void check_dims(const ModelConfig& c, const std::string& o) {
  using namespace limits;
  check_fields(o, {
      {"vocab_size", c.vocab, 1, kMaxVocab, "real vocabularies are < 2^19"},
      {"hidden_size", c.hidden, 1, kMaxHidden, "real models are < 2^15 wide"},
      {"num_hidden_layers", c.n_layers, 1, kMaxLayers, "real models have < 200 layers"},
      {"intermediate_size", c.intermediate, 0, kMaxWidth, "real MLPs are < 2^17 wide"},
      {"max_position_embeddings", c.max_positions, 0, kMaxPositions, "0 means not given"},
      {"num_attention_heads", c.n_heads, 1, kMaxHeads, "real models use <= 128 heads"},
      {"num_key_value_heads", c.n_kv_heads, 1, kMaxHeads, "real models use <= 128 heads"},
      {"head_dim", c.head_dim, 0, kMaxHeadDim, "real heads are <= 512 wide"},
      {"q_lora_rank", c.q_lora_rank, 0, kMaxWidth, "a rank below the model width"},
      {"kv_lora_rank", c.kv_lora_rank, 0, kMaxWidth, "a rank below the model width"},
      {"qk_nope_head_dim", c.qk_nope_dim, 0, kMaxHeadDim, "real heads are <= 512 wide"},
      {"qk_rope_head_dim", c.qk_rope_dim, 0, kMaxHeadDim, "real heads are <= 512 wide"},
      {"v_head_dim", c.v_head_dim, 0, kMaxHeadDim, "real heads are <= 512 wide"},
      {"index_n_heads", c.index_n_heads, 0, kMaxHeads, "DeepSeek-V3.2 uses 64"},
      {"index_head_dim", c.index_head_dim, 0, kMaxHeadDim, "DeepSeek-V3.2 uses 128"},
      {"index_topk", c.index_topk, 0, kMaxPositions, "at most the context"},
      {"linear_attn_config.num_heads", c.kda.n_heads, 0, kMaxHeads, "real models use <= 128 heads"},
      {"linear_attn_config.head_dim", c.kda.head_dim, 0, kMaxHeadDim, "real heads are <= 512 wide"},
      {"linear_attn_config.short_conv_kernel_size", c.kda.conv_kernel, 0, kMaxConvKernel, "Kimi uses 4"},
      {"attn_res_block_size", c.attn_res_block, 0, kMaxLayers, "a block of layers"},
      {"rope original_max_position_embeddings", c.rope.original_max_position, 0, kMaxPositions, "a context length"},
  });
}

void check_moe_dims(const ModelConfig& c, const std::string& o) {
  using namespace limits;
  check_fields(o, {
      {"num_experts / n_routed_experts", c.moe.n_experts, 0, kMaxExperts, "K3 routes over 896"},
      {"num_experts_per_tok", c.moe.top_k, 0, kMaxExperts, "at most the experts"},
      {"num_shared_experts / n_shared_experts", c.moe.n_shared, 0, kMaxSharedExperts, "real models use <= 8"},
      {"moe_intermediate_size", c.moe.moe_inter, 0, kMaxWidth, "real experts are < 2^14 wide"},
      {"routed_expert_hidden_size", c.moe.latent_dim, 0, kMaxHidden, "a latent below the model width"},
      {"num_expert_group / n_group", c.moe.n_group, 0, kMaxExperts, "at most the experts"},
  });
}

// The element count of every weight tensor the loaders build, formed with checked arithmetic.
void check_tensor_products(const ModelConfig& c, const std::string& o) {
  const std::string where = o + ": tensor size";
  auto mul = [&](std::initializer_list<int64_t> xs) {
    int64_t r = 1;
    for (int64_t x : xs) r = checked_mul<ConfigError>(r, x, where);
    return r;
  };
  const int64_t qin = std::max(c.q_lora_rank, c.hidden);
  const int64_t moe_in = c.moe.latent_dim > 0 ? c.moe.latent_dim : c.hidden;
  struct Product {
    const char* name;
    int64_t elements;
  };
  const Product products[] = {
      {"embed_tokens (vocab_size x hidden_size)", mul({c.vocab, c.hidden})},
      {"MLA q (heads x (nope + rope) x input)", mul({c.n_heads, c.qk_nope_dim + c.qk_rope_dim, qin})},
      {"MLA kv_b (heads x (nope + v) x kv_lora_rank)", mul({c.n_heads, c.qk_nope_dim + c.v_head_dim, c.kv_lora_rank})},
      {"MLA o (hidden x heads x v_head_dim)", mul({c.hidden, c.n_heads, c.v_head_dim})},
      {"MLA kv_a ((kv_lora_rank + rope) x hidden)", mul({c.kv_lora_rank + c.qk_rope_dim, c.hidden})},
      {"GQA q (heads x head_dim x hidden)", mul({c.n_heads, c.head_dim, c.hidden})},
      {"KDA projections (heads x head_dim x hidden)", mul({c.kda.n_heads, c.kda.head_dim, c.hidden})},
      {"KDA conv (heads x head_dim x kernel)", mul({c.kda.n_heads, c.kda.head_dim, c.kda.conv_kernel})},
      {"dense MLP (intermediate x hidden)", mul({c.intermediate, c.hidden})},
      {"shared experts (moe_intermediate x shared x hidden)", mul({c.moe.moe_inter, c.moe.n_shared, c.hidden})},
      {"routed expert (moe_intermediate x input)", mul({c.moe.moe_inter, moe_in})},
      {"router (experts x hidden)", mul({c.moe.n_experts, c.hidden})},
      {"indexer wq_b (heads x head_dim x input)", mul({c.index_n_heads, c.index_head_dim, qin})},
  };
  for (const Product& p : products)
    if (p.elements > limits::kMaxTensorElements)
      throw ConfigError(fmt::format("{}: {} has {} elements, above the limit of {} per tensor", o, p.name, p.elements,
                                    limits::kMaxTensorElements));
}

}  // namespace

void validate_model_sizes(const ModelConfig& c, const std::string& origin) {
  check_dims(c, origin);
  check_moe_dims(c, origin);
  check_tensor_products(c, origin);
}

}  // namespace ferry
