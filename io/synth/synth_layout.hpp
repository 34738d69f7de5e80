// The tensor inventory of a checkpoint in the real Hugging Face layout, derived from a ModelConfig:
// every tensor's name, stored dtype, shape and how a synthetic value is drawn for it. This is the ONE
// place that knows the per-family names; `ferry synth` writes exactly this list and `ferry inspect`
// / io/store/sizing.hpp count parameters from it, so the two always agree.
// Sources: ../shared/tools/make_tiny_k3.py (K3 layout and value scales), the fixtures in
// tests/fixtures/*-a (transformers 5.17 save_pretrained names), MODEL_SPEC.md §5 (indexer).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/formats/model_config.hpp"
#include "io/formats/tensor_source.hpp"

namespace ferry {

// How a synthetic value is drawn (make_tiny_k3.py's helpers):
enum class Init : uint8_t {
  matrix,    // N(0,1) * gain / sqrt(cols)
  embed,     // N(0,1)
  norm,      // 1 + 0.1 N(0,1)   (not exactly 1, so a missing multiply is visible)
  conv,      // 0.5 N(0,1)
  a_log,     // log U(1,4) for the first n_heads entries, 0 beyond
  dt_bias,   // -1 + 0.5 N(0,1)
  small,     // 0.05 N(0,1)      (router correction bias, LayerNorm bias)
};

// Which of a routed expert's three matrices (file order in L<l>-E<e>.bin).
enum class ExpertMatrix : int8_t { none = -1, gate = 0, up = 1, down = 2 };

struct TensorSpec {
  std::string name;            // full checkpoint name, wrapper prefix included
  DType dtype = DType::bf16;   // as stored in the checkpoint (bf16, f32; u8 for MXFP4 parts)
  std::vector<int64_t> shape;  // PyTorch order
  Init init = Init::matrix;
  float gain = 1.0f;
  int32_t layer = -1;          // 0-based decoder layer; -1 = model level
  int32_t expert = -1;         // routed expert id; -1 = not a routed expert
  ExpertMatrix matrix = ExpertMatrix::none;
  bool is_scale = false;       // routed MXFP4: true for weight_scale, false for weight_packed

  bool routed() const { return expert >= 0; }
  int64_t numel() const;
  int64_t bytes() const;       // stored bytes
};

// The shape [rows, cols] of one routed expert matrix (unpacked element counts).
struct MatrixShape {
  int64_t rows = 0, cols = 0;
};
MatrixShape expert_matrix_shape(const ModelConfig& c, ExpertMatrix m);
// Expert input width: routed_expert_hidden_size for latent MoE, else hidden_size.
int64_t expert_in_dim(const ModelConfig& c);
// Checkpoint name of a routed expert matrix without the ".weight_packed"/".weight_scale" suffix,
// e.g. "language_model.model.layers.3.block_sparse_moe.experts.7.w1".
std::string expert_matrix_name(const ModelConfig& c, int layer, int expert, ExpertMatrix m);

// Calls fn for every tensor of the checkpoint in write order (model-level first, then layer by
// layer, lm_head last). Memory stays O(1) in the number of experts: a full K3.1 has ~500k tensors.
// Throws ConfigError when the config cannot be laid out (e.g. an MXFP4 dimension not a multiple of 32).
void visit_checkpoint_layout(const ModelConfig& c, const std::function<void(const TensorSpec&)>& fn);
// Convenience for small models and tests.
std::vector<TensorSpec> checkpoint_layout(const ModelConfig& c);

}  // namespace ferry
