// ModelConfig: one normalised description of every model family ferry runs, parsed from a Hugging
// Face config.json (io/formats/model_config.cpp). The kernels and the model builder read only this struct,
// never the JSON, so a family's quirks (nested text_config, 1-indexed layer lists, renamed fields)
// are resolved in one place. Sources for each field: ../shared/docs/MODEL_SPEC.md §1, §13.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ferry {

enum class Arch { kimi_k3, kimi_k31, kimi_linear, deepseek_v3, deepseek_v32, qwen3 };

// The attention (token mixer) of one layer.
enum class Mixer : uint8_t {
  kda,  // Kimi Delta Attention (linear attention with a recurrent state)
  mla,  // multi-head latent attention (optionally NoPE, optionally output-gated)
  dsa,  // MLA plus the DeepSeek sparse-attention lightning indexer
  gqa,  // grouped-query attention with per-head QK RMSNorm (qwen3)
};

// The feed-forward block of one layer.
enum class Ffn : uint8_t { dense, moe };

enum class Activation : uint8_t { silu, situ };

enum class RopeType : uint8_t { none, default_, yarn };

struct RopeConfig {
  RopeType type = RopeType::none;
  double theta = 10000.0;
  double factor = 1.0;                 // yarn
  int64_t original_max_position = 0;   // yarn
  double beta_fast = 32.0;             // yarn
  double beta_slow = 1.0;              // yarn
  double mscale = 1.0;                 // yarn
  double mscale_all_dim = 0.0;         // yarn (0: not set)
  bool interleaved = false;            // MLA rope on (x[2i], x[2i+1]) pairs
};

struct KdaConfig {
  int64_t n_heads = 0;
  int64_t head_dim = 0;         // K = V
  int64_t conv_kernel = 4;
  bool full_rank_gate = false;  // K3: g_proj [P,D] output gate and the "safe" decay form
  bool has_lower_bound = false;
  double gate_lower_bound = 0;  // K3: -5.0 ; decay g = lower_bound * sigmoid(exp(A_log) * f)
};

struct MoeConfig {
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t n_shared = 0;           // shared experts; their MLP width is moe_inter * n_shared
  int64_t moe_inter = 0;
  int64_t latent_dim = 0;         // K3 latent MoE (routed_expert_hidden_size); 0 = none
  bool latent_norm = false;       // RMSNorm on the latent sum before routed_expert_up_proj
  bool renormalize = true;        // divide the selected weights by their sum
  double routed_scale = 1.0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool experts_mxfp4 = false;     // routed experts stored compressed-tensors MXFP4
};

struct ModelConfig {
  Arch arch = Arch::qwen3;
  std::string model_type;       // as written in config.json (top level)
  std::string tensor_prefix;    // "" or "language_model." (K3/K3.1 wrappers)

  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t n_layers = 0;
  int64_t intermediate = 0;     // dense FFN width
  double rms_eps = 1e-6;
  int64_t max_positions = 0;
  bool tie_embeddings = false;
  int64_t bos_id = -1, eos_id = -1, pad_id = -1;

  // Attention heads (MLA/DSA/GQA).
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;         // GQA only
  int64_t q_lora_rank = 0;      // 0: plain q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;
  bool mla_nope = false;        // Kimi: no rotation in MLA
  bool mla_output_gate = false; // K3: a *= sigmoid(x @ g_proj^T)
  RopeConfig rope;

  // DSA lightning indexer.
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  KdaConfig kda;
  MoeConfig moe;
  Activation act = Activation::silu;
  double situ_beta = 1.0;
  double situ_linear_beta = 0.0;  // 0: u passes unchanged
  int64_t attn_res_block = 0;     // K3 attention residuals block size; 0 = plain residuals

  std::vector<Mixer> mixer;       // per layer, 0-indexed
  std::vector<Ffn> ffn;           // per layer, 0-indexed

  // Derived helpers.
  int64_t qk_head_dim() const { return qk_nope_dim + qk_rope_dim; }
  int64_t kda_width() const { return kda.n_heads * kda.head_dim; }
  int64_t count(Mixer m) const;
  int64_t count(Ffn f) const;
  bool is_kimi() const { return arch == Arch::kimi_k3 || arch == Arch::kimi_k31 || arch == Arch::kimi_linear; }
};

const char* to_string(Arch a);
const char* to_string(Mixer m);

// Parses a Hugging Face config.json. Throws ferry::ConfigError naming the offending field for an
// unknown model_type or a missing/inconsistent field.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin = "config.json");
ModelConfig load_model_config(const std::filesystem::path& path_or_dir);

}  // namespace ferry
