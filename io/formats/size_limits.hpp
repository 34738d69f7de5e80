// Limits on every size ferry reads from a file (config.json and the config inside spine.gguf,
// safetensors headers, GGUF, manifest.json), and the checked arithmetic that applies them. A size
// that comes from a file is hostile until checked: a product of dimensions that wraps passes the
// shape checks that follow and turns into an out-of-bounds write. So every dimension is bounded
// here, in one place, BEFORE anything is allocated or multiplied, and the products the loaders form
// are computed with checked_mul/checked_add, which throw instead of wrapping.
//
// The limits are far above every real model (the reason is given with each) and far below the
// point where the products of a few of them could overflow 64 bits: hidden × vocab ≤ 2^44,
// heads × head_dim × rank ≤ 2^48.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "io/errors.hpp"

namespace ferry {

struct ModelConfig;

namespace limits {
// Model width. K3 / DeepSeek-V3 7168, Llama-3.1-405B 16384, the widest open models < 2^15.
constexpr int64_t kMaxHidden = int64_t(1) << 20;
// Attention / KDA / indexer heads per layer. Real models use ≤ 128.
constexpr int64_t kMaxHeads = int64_t(1) << 14;
// One head's width (qk_nope, qk_rope, v_head_dim, head_dim, KDA head_dim, indexer head_dim). Real ≤ 512.
constexpr int64_t kMaxHeadDim = int64_t(1) << 14;
// Feed-forward widths and LoRA ranks (intermediate, moe_intermediate, q/kv_lora_rank, latent MoE).
// K3 dense MLP 33792, the widest open dense MLPs 53248 (405B) < 2^17.
constexpr int64_t kMaxWidth = int64_t(1) << 20;
// Decoder layers. K3 93, DeepSeek-V3 61, the deepest open models 126.
constexpr int64_t kMaxLayers = 4096;
// Routed experts per MoE layer (K3 896) and shared experts (≤ 8 in every released model).
constexpr int64_t kMaxExperts = int64_t(1) << 16;
constexpr int64_t kMaxSharedExperts = 256;
// Vocabulary. K3 163840, Gemma 262144 (2^18).
constexpr int64_t kMaxVocab = int64_t(1) << 24;
// Context length a config may claim (1M-token models exist; 10M-token ones are announced).
constexpr int64_t kMaxPositions = int64_t(1) << 30;
// KDA short-convolution kernel (4 in every Kimi model).
constexpr int64_t kMaxConvKernel = 64;
// Elements of one tensor: vocab × hidden at the limits is 2^44; real embeddings are < 2^31.
constexpr int64_t kMaxTensorElements = int64_t(1) << 44;
// One expert file (a K3 expert is 33 MB; 64 GiB leaves room for any width within kMaxWidth).
constexpr int64_t kMaxExpertFileBytes = int64_t(1) << 36;
// Expert directories in a manifest (stored as uint16 indexes).
constexpr int64_t kMaxExpertDirs = 4096;
}  // namespace limits

// a * b, a + b over non-negative sizes; throws E("<what>: <a> x <b> overflows ...") instead of wrapping.
template <class E = FormatError>
int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    throw E(fmt::format("{}: {} x {} overflows a 64-bit size", what, a, b));
  return r;
}
template <class E = FormatError>
int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
    throw E(fmt::format("{}: {} + {} overflows a 64-bit size", what, a, b));
  return r;
}

// Throws E("<what> = <v> is outside [lo, hi] (<why>)") unless lo <= v <= hi.
template <class E = FormatError>
void check_size(std::string_view what, int64_t v, int64_t lo, int64_t hi, std::string_view why = {}) {
  if (v < lo || v > hi)
    throw E(fmt::format("{} = {} is outside [{}, {}]{}{}", what, v, lo, hi, why.empty() ? "" : ": ", why));
}

// Every dimension of `c` within the limits above, and every weight tensor's element count (the
// products the loaders form: heads × (nope + v) × rank, vocab × hidden, ...) ≤ kMaxTensorElements.
// Throws ConfigError naming `origin` and the field. parse_model_config calls it on every config, so
// the loaders, `prepare`, `inspect`, `synth` and the server all get it.
void validate_model_sizes(const ModelConfig& c, const std::string& origin);

}  // namespace ferry
