// `ferry prepare`: a Hugging Face checkpoint -> a prepared model (docs/FORMATS.md): spine.gguf,
// one MXFP4 file per routed expert placed over the expert directories, manifest.json.
// Streams (one spine tensor chunk or one expert in memory), writes atomically (tmp + rename), keeps
// a journal so a re-run after kill -9 skips what is done, and checks free space before writing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io/store/expert_store.hpp"
#include "io/store/sizing.hpp"

namespace ferry {

struct PrepareOptions {
  std::filesystem::path checkpoint;                 // HF directory (config.json + safetensors)
  std::filesystem::path out;                        // MODEL_DIR
  std::vector<std::filesystem::path> expert_dirs;   // primary directories (their union holds every expert)
  SpineType spine = SpineType::q8_0;
  std::filesystem::path replicas_usage;             // usage counts for replica order (and primary spreading)
  std::vector<std::pair<std::filesystem::path, int64_t>> replica_budgets;  // DIR -> bytes it may hold in all
  bool progress = true;
  // Free bytes of the filesystem holding a path (default: statvfs f_bavail * f_frsize of its nearest
  // existing ancestor). Injectable so tests can simulate a small disk.
  std::function<int64_t(const std::filesystem::path&)> free_bytes;
};

struct PrepareResult {
  int64_t experts = 0;          // routed experts in the model
  int64_t copies_written = 0;   // expert files written this run
  int64_t copies_skipped = 0;   // already done by an earlier (interrupted) run
  int64_t bytes_written = 0;
  bool spine_written = false;
  int64_t spine_tensors = 0;
  std::filesystem::path manifest;
};

PrepareResult prepare_model(const PrepareOptions& opt);

// The placement directories prepare uses: expert dirs then replica dirs, absolute and canonical,
// duplicates merged (the manifest's `dirs`). Throws ConfigError for budgets without a usage file.
std::vector<PlacementDir> prepare_placement_dirs(const PrepareOptions& opt);

// spine.gguf tensor names: the checkpoint name without the wrapper prefix ("language_model.") and
// without the leading "model." (K3.1's "model.layers.92.block_sparse_moe.shared_experts.gate_proj.weight"
// is 64 bytes, over GGUF's 63-byte limit). lm_head keeps its name. The inverse restores the HF name.
std::string spine_gguf_name(const std::string& hf_name, const std::string& tensor_prefix);
std::string hf_name_from_spine(const std::string& gguf_name, const std::string& tensor_prefix);
// True for a routed expert's tensor ("...experts.<digit>..."), which goes to the expert files.
bool is_routed_expert_tensor(const std::string& hf_name);

// Writes spine.gguf from the checkpoint (used by prepare_model). Returns the tensors written.
int64_t write_spine_gguf(const std::filesystem::path& file, const class TensorSource& src, const struct ModelConfig& c,
                         const std::string& config_text, const std::vector<std::string>& expert_dirs, SpineType spine,
                         class Progress* progress);
// Bytes spine.gguf's tensor data will take (without header), for the free-space check.
int64_t spine_data_bytes(const class TensorSource& src, const struct ModelConfig& c, SpineType spine);

// Free bytes on the filesystem that holds `p` (or, for a path not created yet, its nearest existing
// parent), and an id of that filesystem: prepare and synth --prepared check space per filesystem.
int64_t statvfs_free(const std::filesystem::path& p);
uint64_t device_of(const std::filesystem::path& p);

}  // namespace ferry
