#include "actors/model_loader.hpp"

#include <chrono>

#include "io/checkpoint.hpp"
#include "io/errors.hpp"

namespace ferry {

bool has_tokenizer(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "tiktoken.model") || std::filesystem::exists(dir / "tokenizer.json");
}

LoadedModel load_model(const ModelOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path dir(o.dir);
  if (!std::filesystem::is_directory(dir)) throw Error("model directory " + o.dir + " does not exist");
  LoadedModel m;
  m.cfg = load_model_config(dir);
  m.src = open_safetensors_checkpoint(dir);
  m.backend = make_cpu_backend(o.threads);
  if (has_tokenizer(dir)) m.tokenizer = load_tokenizer(dir);
  LoadOptions lo;
  lo.spine_type = parse_spine_type(o.spine_type);
  m.model = std::make_unique<Model>(m.cfg, *m.src, *m.backend, lo);
  m.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace ferry
