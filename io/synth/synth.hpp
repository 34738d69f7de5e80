// `ferry synth`: a random checkpoint in the real Hugging Face layout (config.json, sharded
// safetensors + index, compressed-tensors MXFP4 routed experts, a tokenizer for Kimi archs) at any
// size, streamed so memory stays bounded however many GB are written. The tensor list is
// io/synth/synth_layout.hpp's; the values follow make_tiny_k3.py's scales so activations stay sane.
// With a usage file, each MoE layer's e_score_correction_bias is fitted so the router's selection
// frequencies on random inputs follow the usage counts (io/synth/synth_router.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/formats/model_config.hpp"

namespace ferry {

// Model dimensions; 0 (or -1 for `shared`) means the arch's default for the chosen preset.
struct SynthDims {
  int64_t layers = 0, hidden = 0, heads = 0, kda_heads = 0, kda_head_dim = 0;
  int64_t q_lora = -1, kv_lora = 0, nope = 0, rope = 0, v_head = 0;
  int64_t experts = 0, top_k = 0, shared = -1, moe_inter = 0, latent = -1, dense_inter = 0;
  int64_t vocab = 0, res_block = -1, index_heads = 0, index_head_dim = 0, index_topk = 0;
  int64_t n_group = 0, topk_group = 0;
};

struct SynthOptions {
  Arch arch = Arch::kimi_k31;
  bool full_width = false;        // K3.1 dimensions (hidden 7168, 896 experts 3584->3072->3584, top-16)
  SynthDims dims;                 // overrides
  std::filesystem::path usage;    // optional usage counts ("L<l>-E<e>.bin": n)
  uint64_t seed = 20260826;
  int64_t shard_bytes = 0;        // 0: 5 GB, but at least 3 shards for small models
  bool progress = true;
};

// Per MoE layer: how well the fitted router biases make selection follow the usage counts,
// measured on fresh random router inputs (not the ones used to fit).
struct RouterTracking {
  int layer = 0;          // decoder layer
  int usage_layer = 0;    // the usage file's layer its counts came from
  double correlation = 0; // Pearson r between target shares and measured selection shares
  double tv_distance = 0; // total-variation distance between the two share vectors (0 = identical)
  double top10_target = 0, top10_measured = 0;  // share of selections going to the top 10% of experts
};

struct SynthResult {
  std::vector<std::filesystem::path> files;
  int64_t tensors = 0;
  int64_t bytes = 0;      // tensor data bytes written
  std::vector<RouterTracking> tracking;  // empty without a usage file
};

// Parses "kimi_k31" etc.; throws ConfigError listing the choices.
Arch parse_synth_arch(const std::string& s);
// The config.json text synth writes for these options (parseable by parse_model_config).
std::string synth_config_json(const SynthOptions& opt);
// Writes the checkpoint into out_dir (created). Throws ConfigError for impossible dimensions.
SynthResult synth_checkpoint(const std::filesystem::path& out_dir, const SynthOptions& opt);

// The safetensors shard size synth_checkpoint uses for `total` tensor bytes (opt.shard_bytes, else
// a third of the model within [1 MB, 5 GB]).
int64_t synth_shard_bytes(const SynthOptions& opt, int64_t total);
// Writes config.json (cfg_text) and, for Kimi archs, the tokenizer files into dir; returns their paths.
std::vector<std::filesystem::path> write_synth_side_files(const std::filesystem::path& dir, const ModelConfig& c,
                                                          const std::string& cfg_text);

}  // namespace ferry
