// What a checkpoint needs, from its config alone: layer split, parameters by dtype, expert files,
// spine size per spine type, KV cache per token, KDA state per sequence, a memory table by context
// and what fits on a given GPU / host. `ferry inspect` prints this; the numbers come from the same
// tensor inventory `ferry synth` writes (io/synth/synth_layout.hpp).
//
// Units: byte counts are exact integers; reports print decimal units (1 GB = 1e9 B), the units the
// published K3.1 figures use (33,792 B/token, 0.43 GB KDA state per sequence).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/formats/ggml_blocks.hpp"
#include "io/formats/model_config.hpp"
#include "io/units.hpp"

namespace ferry {

// A long prompt runs in passes of a multiple of this many rows (Model::set_prefill_chunk, the memory
// plan's prefill chunk): KDA's chunked form works in chunks of 64, so every pass starts on a chunk
// boundary and the passes compute the bits one pass would.
constexpr int64_t kPrefillChunkAlign = 64;
// `--prefill-chunk N` (every front-end and `ferry inspect`): 0 (the plan chooses) or a positive multiple
// of kPrefillChunkAlign; UsageError naming the flag otherwise.
void check_prefill_chunk(int64_t rows);

enum class SpineType : uint8_t { q8_0, bf16, f32 };
const char* to_string(SpineType t);
// "q8_0" | "bf16" | "f32"; throws ConfigError otherwise.
SpineType parse_spine_type(const std::string& s);

// The GGUF type a spine tensor gets: matrices (2-D, more than one row, columns a multiple of 32)
// take the spine type, except the MoE router (".gate.weight"), which stays F32 as llama.cpp keeps
// ffn_gate_inp; norms, vectors, convolutions and other small tensors are F32.
GgmlType spine_tensor_type(const std::string& name, const std::vector<int64_t>& shape, SpineType t);
// Bytes of n elements of a ggml type (n a multiple of 32 for block types).
int64_t ggml_type_bytes(GgmlType t, int64_t n);

struct DtypeCount {
  std::string dtype;   // "mxfp4 (routed experts)", "bf16", "f32"
  int64_t params = 0;
  int64_t bytes = 0;   // as stored in the checkpoint
};

struct ModelSizing {
  std::string arch;
  int64_t n_layers = 0, n_kda = 0, n_mla = 0, n_dsa = 0, n_gqa = 0, n_dense = 0, n_moe = 0;
  std::vector<DtypeCount> by_dtype;
  int64_t params_total = 0;
  int64_t params_active = 0;        // per token: spine + top_k routed experts per MoE layer
  int64_t n_experts = 0;            // routed experts per MoE layer
  int64_t expert_files = 0;         // n_moe * n_experts
  int64_t expert_bytes = 0;         // payload of one expert file (3 MXFP4 matrices)
  int64_t expert_file_bytes = 0;    // on disk, padded to 4096
  int64_t experts_total_bytes = 0;  // expert_files * expert_file_bytes
  int64_t spine_tensors = 0;
  int64_t spine_bytes[3] = {0, 0, 0};  // indexed by SpineType (tensor data, without GGUF header)
  int64_t kv_bytes_per_token = 0;   // MLA/DSA latent + rope key (BF16) + DSA indexer key (BF16); GQA K+V
  int64_t kda_state_bytes = 0;      // per sequence: n_kda * heads * head_dim^2 * 4 (FP32)
  int64_t conv_state_bytes = 0;     // per sequence: n_kda * 3 * width * (kernel-1) * 4 (FP32)
};

ModelSizing size_model(const ModelConfig& c);

struct MemoryRow {
  int64_t context = 0, seqs = 0;
  int64_t kv_bytes = 0, state_bytes = 0;
  int64_t gpu_bytes = 0;            // spine + KV + state (before any expert cache)
  int64_t gpu_expert_slots = -1;    // experts cached in what is left of --gpu-mem (at most all); -1: no GPU given
  bool fits = true;                 // spine + KV + state fit in --gpu-mem
};

struct FitInput {
  SpineType spine = SpineType::q8_0;
  int64_t gpu_mem = 0;   // 0: not given
  int64_t host_mem = 0;  // 0: not given
};

// Rows for 32K, 128K, 256K and 1M tokens of context, each for 1 and 8 sequences.
std::vector<MemoryRow> memory_table(const ModelSizing& s, const FitInput& in);
// Host pool slots (experts, at most all of them) in --host-mem; -1 when not given.
int64_t host_expert_slots(const ModelSizing& s, const FitInput& in);
// Longest context one sequence can hold on the GPU with no expert cache; -1 when no GPU given.
int64_t max_context_one_seq(const ModelSizing& s, const FitInput& in);

nlohmann::json sizing_json(const ModelSizing& s, const FitInput& in);
std::string sizing_report(const ModelSizing& s, const FitInput& in);

}  // namespace ferry
