#include "actors/model_loader.hpp"

#include <chrono>

#include "io/checkpoint.hpp"
#include "io/errors.hpp"
#if FERRY_WITH_CUDA
#include "kernels/cuda_backend.hpp"
#endif

namespace ferry {

bool has_tokenizer(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "tiktoken.model") || std::filesystem::exists(dir / "tokenizer.json");
}

std::unique_ptr<Backend> make_backend(const std::string& name, int cpu_threads) {
  if (name == "cpu") return make_cpu_backend(cpu_threads);
#if FERRY_WITH_CUDA
  if (name == "cuda") return make_cuda_backend();
  if (name == "auto") return cuda_available() ? make_cuda_backend() : make_cpu_backend(cpu_threads);
#else
  if (name == "cuda") throw ConfigError("--backend cuda: this build has no CUDA back-end (configure with FERRY_CUDA=ON)");
  if (name == "auto") return make_cpu_backend(cpu_threads);
#endif
  throw ConfigError("--backend: unknown back-end '" + name + "' (cpu, cuda or auto)");
}

LoadedModel load_model(const ModelOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path dir(o.dir);
  if (!std::filesystem::is_directory(dir)) throw Error("model directory " + o.dir + " does not exist");
  LoadedModel m;
  m.cfg = load_model_config(dir);
  m.src = open_safetensors_checkpoint(dir);
  m.backend = make_backend(o.backend, o.threads);
  if (has_tokenizer(dir)) m.tokenizer = load_tokenizer(dir);
  LoadOptions lo;
  lo.spine_type = parse_spine_type(o.spine_type);
  m.model = std::make_unique<Model>(m.cfg, *m.src, *m.backend, lo);
  m.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace ferry
