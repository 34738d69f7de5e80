// The model's resident weights ("spine") in back-end memory, loaded from any TensorSource by Hugging
// Face tensor names, and the interface through which routed experts reach the MoE layer.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/formats/model_config.hpp"
#include "io/store/sizing.hpp"
#include "io/formats/tensor_source.hpp"
#include "kernels/backend.hpp"

namespace ferry {

// Non-expert matrices are held as Q8_0 when the spine type is q8_0, else as F32 (which keeps BF16
// checkpoint values exactly); SpineType itself is io/store/sizing.hpp's.

struct MlpWeights {
  Weight gate, up, down;
};

struct KdaWeights {
  Weight q, k, v, f_a, f_b, b, g, g_a, g_b, o;  // g (full rank) or g_a + g_b
  Buf q_conv, k_conv, v_conv;                   // [P, W]
  Buf a_log;                                    // [H]
  Buf dt_bias;                                  // [P]
  Buf o_norm;                                   // [V]
};

struct MlaWeights {
  Weight q, q_a, q_b, kv_a, kv_b, o, gate;  // q (no LoRA) or q_a + q_b; gate = K3 output gate
  Buf q_a_norm, kv_a_norm;
  Buf w_uk_t;                               // [H][R, dn]: kv_b's k_nope rows, transposed (absorbed decode)
  // DSA lightning indexer (Mixer::dsa).
  Weight idx_wq_b, idx_wk, idx_w;
  Buf idx_k_norm_w, idx_k_norm_b;
};

struct GqaWeights {
  Weight q, k, v, o;
  Buf q_norm, k_norm;
};

struct MoeWeights {
  Weight router;            // [E, D], always f32: rounding it flips routing
  Buf score_bias;           // [E] e_score_correction_bias (zeros if absent)
  MlpWeights shared;        // empty if n_shared == 0
  Weight latent_down, latent_up;  // K3 latent MoE
  Buf latent_norm;
};

struct LayerWeights {
  Buf attn_norm, ffn_norm;
  Buf attn_res_w, mlp_res_w;  // AttnRes: norm.w * proj.w, fused
  KdaWeights kda;
  MlaWeights mla;
  GqaWeights gqa;
  MlpWeights dense;
  MoeWeights moe;
};

// One routed expert's matrices (MXFP4 in practice): gate/up [inter, in], down [in, inter].
struct ExpertWeights {
  Weight gate, up, down;
};

// The rows of one MoE call that use one expert.
struct ExpertUse {
  int32_t expert = 0;
  std::vector<int32_t> rows;   // row indices into the call's rows
  std::vector<int32_t> ranks;  // routing rank of this expert in each of those rows
};

// A batch of experts ready to compute: uses[idx[j]] with weights w[j]. A batch lets the back-end run
// several experts in one launch (every device hit of a layer at once); one that arrives alone is a
// batch of one.
using ExpertCompute = std::function<void(std::span<const size_t> idx, std::span<const ExpertWeights> w)>;

// Where the MoE layer gets routed experts from. fetch() must pass every uses[i] to compute exactly
// once, in batches, in any order (e.g. as bytes arrive from disk), and return once all calls have
// returned. The weights must stay valid until the work compute queued on the back-end has run
// (a device source orders its slot reuse after that work; host memory is read synchronously).
// A source that streams may also want hints: wants_hints() true makes the MoE layer call hint_next()
// before each fetch of a decode step or block (at most kMaxHintRows rows) with the next MoE layer and
// a predictor of its experts (that layer's router applied to this layer's input, most-picked first).
// The source runs the predictor inside the fetch that follows, once its own reads are on their way,
// or not at all. Hints never change which experts a layer uses, only where their bytes wait.
using ExpertPredictor = std::function<std::vector<int32_t>()>;

class ExpertSource {
 public:
  static constexpr int64_t kMaxHintRows = 16;
  virtual ~ExpertSource() = default;
  virtual void fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) = 0;
  virtual bool wants_hints() const { return false; }
  virtual void hint_next(int next_layer, ExpertPredictor predict) { (void)next_layer, (void)predict; }
};

struct SpineWeights {
  Weight embed;   // [vocab, D] (f32 or q8_0)
  Weight lm_head; // [vocab, D]
  Buf final_norm;
  Buf out_res_w;  // AttnRes output mix
  std::vector<LayerWeights> layers;
};

struct LoadOptions {
  SpineType spine_type = SpineType::f32;
  IndexerTies indexer_ties = IndexerTies::by_position;  // torch_cpu only to compare with HF references
};

// Loads every non-routed tensor. Throws TensorError naming the tensor on a missing tensor or a
// wrong shape/dtype. Names are looked up as in the checkpoint (with cfg.tensor_prefix) and, failing
// that, without the prefix (prepared spine.gguf files drop it).
SpineWeights load_spine(const ModelConfig& cfg, const TensorSource& src, Backend& be, const LoadOptions& opt,
                        std::vector<Buf>& storage);

// All routed experts resident in back-end memory (the "all in RAM" engine), read from the
// checkpoint's compressed-tensors MXFP4 (or BF16/F32, quantized to MXFP4 exactly as prepare does).
class ResidentExperts final : public ExpertSource {
 public:
  ResidentExperts(const ModelConfig& cfg, const TensorSource& src, Backend& be);
  void fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) override;
  const ExpertWeights& get(int layer, int expert) const;

 private:
  int64_t n_experts_ = 0;
  std::vector<ExpertWeights> experts_;  // [layer * n_experts + expert], empty for dense layers
  std::vector<Buf> storage_;
};

// Hands every matrix of resident experts (empty entries skipped) to Backend::prepare_expert_weights: the
// back-end's own layout for its expert kernels, same bits (CUDA: mxfp4 tiles). ResidentExperts and the
// prepared model's FileExperts call it once all are loaded.
void prepare_resident_experts(std::vector<ExpertWeights>& experts, Backend& be);

// Names of a routed expert's three matrices in a checkpoint ("gate", "up", "down" order), without
// the ".weight"/".weight_packed" suffix.
std::array<std::string, 3> expert_tensor_bases(const ModelConfig& cfg, int layer, int expert);
std::string layer_prefix(const ModelConfig& cfg, int layer);  // e.g. "language_model.model.layers.3."

}  // namespace ferry
