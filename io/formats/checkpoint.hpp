// Opening a model directory as a TensorSource, whatever it holds: a Hugging Face checkpoint (one
// model.safetensors, or shards listed by model.safetensors.index.json) or a prepared ferry model
// (spine.gguf + expert files; see io/store/expert_store.hpp).
#pragma once

#include <filesystem>
#include <memory>

#include "io/formats/tensor_source.hpp"

namespace ferry {

// Throws FormatError / TensorError naming the file when the directory is not a readable checkpoint.
std::unique_ptr<TensorSource> open_safetensors_checkpoint(const std::filesystem::path& dir);

}  // namespace ferry
