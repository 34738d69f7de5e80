// Sizing arithmetic. Every count is taken from the tensor inventory (io/synth/synth_layout.hpp) or from
// the config fields that define the caches, never from hard-coded per-model constants.
#include "io/store/sizing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/synth/synth_layout.hpp"

namespace ferry {

const char* to_string(SpineType t) {
  switch (t) {
    case SpineType::q8_0: return "q8_0";
    case SpineType::bf16: return "bf16";
    case SpineType::f32: return "f32";
  }
  return "?";
}

SpineType parse_spine_type(const std::string& s) {
  if (s == "q8_0") return SpineType::q8_0;
  if (s == "bf16") return SpineType::bf16;
  if (s == "f32") return SpineType::f32;
  throw ConfigError(fmt::format("spine type '{}' is not one of q8_0, bf16, f32", s));
}

void check_prefill_chunk(int64_t rows) {
  if (rows < 0 || rows % kPrefillChunkAlign != 0)
    throw UsageError(fmt::format("--prefill-chunk {}: must be a multiple of {} (KDA's chunk length), e.g. 512; 0 lets "
                                 "the memory plan choose", rows, kPrefillChunkAlign));
}

GgmlType spine_tensor_type(const std::string& name, const std::vector<int64_t>& shape, SpineType t) {
  const bool matrix = shape.size() == 2 && shape[0] > 1 && shape[1] % kQK == 0;
  const bool router = name.size() >= 12 && name.compare(name.size() - 12, 12, ".gate.weight") == 0;
  if (!matrix || router) return GgmlType::f32;
  switch (t) {
    case SpineType::q8_0: return GgmlType::q8_0;
    case SpineType::bf16: return GgmlType::bf16;
    case SpineType::f32: return GgmlType::f32;
  }
  return GgmlType::f32;
}

int64_t ggml_type_bytes(GgmlType t, int64_t n) {
  switch (t) {
    case GgmlType::f32: return n * 4;
    case GgmlType::f16:
    case GgmlType::bf16: return n * 2;
    case GgmlType::q8_0: return n / kQK * int64_t(sizeof(BlockQ8_0));
    case GgmlType::mxfp4: return n / kQK * int64_t(sizeof(BlockMxfp4));
  }
  return 0;
}

namespace {

void count_layers(const ModelConfig& c, ModelSizing& s) {
  s.n_layers = c.n_layers;
  s.n_kda = c.count(Mixer::kda);
  s.n_mla = c.count(Mixer::mla);
  s.n_dsa = c.count(Mixer::dsa);
  s.n_gqa = c.count(Mixer::gqa);
  s.n_dense = c.count(Ffn::dense);
  s.n_moe = c.count(Ffn::moe);
}

// Caches: MLA/DSA keep the BF16 latent (kv_lora) and the rope key per token; DSA adds the BF16
// indexer key (index_head_dim); GQA keeps K and V for every KV head. KDA keeps a fixed FP32 state
// of heads x head_dim x head_dim plus the last kernel-1 inputs of its q, k and v convolutions.
void size_caches(const ModelConfig& c, ModelSizing& s) {
  const int64_t latent = (c.kv_lora_rank + c.qk_rope_dim) * 2;
  s.kv_bytes_per_token = (s.n_mla + s.n_dsa) * latent + s.n_dsa * c.index_head_dim * 2 +
                         s.n_gqa * 2 * c.n_kv_heads * c.head_dim * 2;
  s.kda_state_bytes = s.n_kda * c.kda.n_heads * c.kda.head_dim * c.kda.head_dim * 4;
  s.conv_state_bytes = s.n_kda * 3 * c.kda_width() * std::max<int64_t>(c.kda.conv_kernel - 1, 0) * 4;
}

}  // namespace

ModelSizing size_model(const ModelConfig& c) {
  ModelSizing s;
  s.arch = to_string(c.arch);
  count_layers(c, s);
  std::map<std::string, DtypeCount> by;
  int64_t routed_params = 0;
  visit_checkpoint_layout(c, [&](const TensorSpec& t) {
    if (t.routed()) {
      auto& d = by["mxfp4 (routed experts)"];
      d.bytes += t.bytes();
      if (!t.is_scale) {
        const int64_t p = t.dtype == DType::u8 ? 2 * t.numel() : t.numel();
        d.params += p;
        routed_params += p;
      }
      return;
    }
    auto& d = by[to_string(t.dtype)];
    d.params += t.numel();
    d.bytes += t.bytes();
    ++s.spine_tensors;
    for (SpineType st : {SpineType::q8_0, SpineType::bf16, SpineType::f32})
      s.spine_bytes[int(st)] += ggml_type_bytes(spine_tensor_type(t.name, t.shape, st), t.numel());
  });
  for (auto& [k, v] : by) {
    v.dtype = k;
    s.by_dtype.push_back(v);
    s.params_total += v.params;
  }
  s.n_experts = s.n_moe > 0 ? c.moe.n_experts : 0;
  s.expert_files = s.n_moe * s.n_experts;
  if (s.expert_files > 0) {
    s.expert_bytes = expert_payload_bytes(c);
    s.expert_file_bytes = expert_file_bytes(c);
  }
  s.experts_total_bytes = s.expert_files * s.expert_file_bytes;
  const int64_t per_expert = s.expert_files > 0 ? routed_params / s.expert_files : 0;
  s.params_active = (s.params_total - routed_params) + s.n_moe * c.moe.top_k * per_expert;
  size_caches(c, s);
  return s;
}

std::vector<MemoryRow> memory_table(const ModelSizing& s, const FitInput& in) {
  std::vector<MemoryRow> rows;
  const int64_t spine = s.spine_bytes[int(in.spine)];
  for (int64_t ctx : {int64_t(32) << 10, int64_t(128) << 10, int64_t(256) << 10, int64_t(1) << 20}) {
    for (int64_t seqs : {1, 8}) {
      MemoryRow r;
      r.context = ctx;
      r.seqs = seqs;
      r.kv_bytes = ctx * seqs * s.kv_bytes_per_token;
      r.state_bytes = seqs * (s.kda_state_bytes + s.conv_state_bytes);
      r.gpu_bytes = spine + r.kv_bytes + r.state_bytes;
      if (in.gpu_mem > 0) {
        r.fits = r.gpu_bytes <= in.gpu_mem;
        r.gpu_expert_slots = r.fits && s.expert_file_bytes > 0 ? (in.gpu_mem - r.gpu_bytes) / s.expert_file_bytes : 0;
        r.gpu_expert_slots = std::min(r.gpu_expert_slots, s.expert_files);  // no use caching more than exist
      }
      rows.push_back(r);
    }
  }
  return rows;
}

int64_t host_expert_slots(const ModelSizing& s, const FitInput& in) {
  if (in.host_mem <= 0) return -1;
  return s.expert_file_bytes > 0 ? std::min(in.host_mem / s.expert_file_bytes, s.expert_files) : 0;
}

int64_t max_context_one_seq(const ModelSizing& s, const FitInput& in) {
  if (in.gpu_mem <= 0) return -1;
  const int64_t left = in.gpu_mem - s.spine_bytes[int(in.spine)] - s.kda_state_bytes - s.conv_state_bytes;
  if (left <= 0) return 0;
  return s.kv_bytes_per_token > 0 ? left / s.kv_bytes_per_token : std::numeric_limits<int64_t>::max();
}

}  // namespace ferry
