// Opening a model directory for the apps: config, tensors, tokenizer, back-end and Model in one place,
// so `ferry run`, `ferry-server` and `ferry bench` load models the same way. Two kinds of directory:
// a Hugging Face checkpoint, and a prepared model (`ferry prepare`: spine.gguf + manifest.json +
// expert directories), whose routed experts are either all read into memory or, with ssd_streaming,
// streamed from the expert files by the actor runtime (actors/streaming/streaming_experts.hpp).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "actors/streaming/streaming_experts.hpp"
#include "io/formats/model_config.hpp"
#include "io/formats/tensor_source.hpp"
#include "io/tokenizers/tokenizer.hpp"
#include "kernels/backend.hpp"
#include "kernels/timing_backend.hpp"
#include "kernels/model/model.hpp"

namespace ferry {

class Runtime;

struct ModelOptions {
  std::string dir;
  std::string spine_type = "f32";  // for Hugging Face checkpoints; prepared models keep theirs
  int threads = 0;
  std::string backend = "auto";  // cpu, cuda or auto (cuda when a device is present and built in)
  bool ssd_streaming = false;      // prepared models only: stream routed experts from the expert files
  StreamingOptions streaming;
  bool profile_ops = false;        // time every back-end op (TimingBackend; `ferry run --profile-ops`)
  // CUDA prompt passes: significant bits of each activation in the tensor-core matmuls, 11 (one fp16) or 22
  // (hi + lo, twice the tensor-core work); 0: the back-end's default (22, or FERRY_MMA_LEVELS). `--prompt-x-bits`.
  int prompt_x_bits = 0;
  // Load progress, called on the loading thread: a phase ("host pool", "spine", "experts") starts with
  // done = 0 and ends with done = total (bytes); the spine reports each tensor as it is read.
  std::function<void(const std::string& phase, int64_t done, int64_t total)> progress;
};

struct LoadedModel {
  ModelConfig cfg;
  std::unique_ptr<TensorSource> src;
  std::unique_ptr<Backend> backend;
  TimingBackend* timing = nullptr;       // = backend with profile_ops (times start after loading)
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has no tokenizer files
  bool prepared = false;                 // a `ferry prepare` directory
  std::unique_ptr<ExpertSource> experts;  // routed experts of a prepared model (outlives `model`)
  StreamingExperts* streaming = nullptr;  // = experts when streaming, else null
  Runtime* runtime = nullptr;             // the runtime the streaming actors run in (the caller's)
  std::unique_ptr<Model> model;
  double load_s = 0;
};

// Throws ferry::Error subclasses naming the file/tensor/field when the directory is unusable.
// A non-default --spine-type on a prepared model (whose spine types `ferry prepare` fixed) is refused.
// rt: the process's runtime root (actors/runtime/runtime.hpp), which must outlive the model; needed
// with ssd_streaming (the streaming actors run in it), unused otherwise (may be null).
LoadedModel load_model(const ModelOptions& o, Runtime* rt);
// The same on a back-end made already (make_backend), e.g. one the memory plan asked for its free memory.
LoadedModel load_model(const ModelOptions& o, Runtime* rt, std::unique_ptr<Backend> backend);

// The back-end named "cpu", "cuda" or "auto" (cuda when this build has the CUDA back-end and a device is
// present, else cpu). Throws ConfigError for other names or for "cuda" in a build without CUDA.
// prompt_x_bits (ModelOptions::prompt_x_bits): set on a CUDA back-end when not 0; the CPU's prompt passes are
// exact F32 whatever it says.
std::unique_ptr<Backend> make_backend(const std::string& name, int cpu_threads = 0, int prompt_x_bits = 0);

// True when `dir` holds tokenizer files ferry can read.
bool has_tokenizer(const std::filesystem::path& dir);

}  // namespace ferry
