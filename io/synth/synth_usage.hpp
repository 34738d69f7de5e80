// Usage counts mapped onto a synthetic model's MoE layers, and the per-layer router-bias fit that
// both synth writers (HF checkpoint, prepared model) share, so they produce the same biases.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "io/store/expert_store.hpp"
#include "io/formats/model_config.hpp"
#include "io/synth/synth_router.hpp"

namespace ferry {

// Our m-th MoE layer takes the m-th layer present in the file (wrapping); our expert e takes its
// expert e (wrapping past the file's count).
struct SynthUsage {
  UsageCounts counts;
  std::vector<int> layers;
  int n_experts = 0;

  explicit SynthUsage(const std::filesystem::path& file);  // throws FormatError for an empty file
  std::vector<int64_t> layer_counts(int moe_index, int64_t n_experts_out, int& usage_layer) const;
};

// The counts each MoE layer's router was fitted to, keyed by our (decoder layer, expert): the store's
// usage.json for a synthetic prepared model.
UsageCounts synth_layer_usage(const ModelConfig& c, const SynthUsage& usage);

// Decoder layer -> 0-based index among the MoE layers (-1 for dense layers).
std::vector<int> moe_layer_indexes(const ModelConfig& c);

// Fits decoder layer `layer`'s e_score_correction_bias from its stored router weight (BF16 bytes,
// [n_experts, hidden]); tracking.layer / usage_layer are filled in.
BiasFit fit_synth_router_bias(const ModelConfig& c, const SynthUsage& usage, int layer, const uint8_t* gate_bf16,
                              uint64_t seed);

}  // namespace ferry
