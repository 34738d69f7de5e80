// Reading a prepared model directory (`ferry prepare` output, docs/FORMATS.md): the config (config.json
// in the directory, else spine.gguf's ferry.config_json), the spine as a TensorSource that answers to
// Hugging Face tensor names, and the all-in-RAM expert source that reads every expert file once.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/formats/model_config.hpp"
#include "io/formats/tensor_source.hpp"
#include "kernels/backend.hpp"
#include "kernels/model/weights.hpp"

namespace ferry {

struct ExpertCatalog;

// True when `dir` holds manifest.json and spine.gguf.
bool is_prepared_model(const std::filesystem::path& dir);

ModelConfig load_prepared_config(const std::filesystem::path& dir);

// spine.gguf with its names mapped: a lookup of "language_model.model.layers.3.x" (or without the
// wrapper prefix) finds the spine's "layers.3.x" (io/store/expert_store_prepare.hpp spine_gguf_name).
std::unique_ptr<TensorSource> open_spine(const std::filesystem::path& dir, const ModelConfig& cfg);

// Every routed expert read from its primary copy into back-end memory: the reference the streaming
// engine must match bit for bit. With `verify` each file is checked against the manifest's xxh64; a
// bad copy is replaced by the next good one. Throws FormatError naming a file that is short or
// unreadable, or the last bad copy when no copy is good.
class FileExperts final : public ExpertSource {
 public:
  FileExperts(const ModelConfig& cfg, const ExpertCatalog& catalog, Backend& be, bool verify = true);
  void fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) override;

 private:
  int64_t n_experts_ = 0;
  std::vector<ExpertWeights> experts_;  // [layer * n_experts + expert]
  std::vector<Buf> storage_;
};

}  // namespace ferry
