#include "actors/runtime/model_loader.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "actors/streaming/expert_catalog.hpp"
#include "actors/runtime/prepared_model.hpp"
#include "io/formats/checkpoint.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#if FERRY_WITH_CUDA
#include "kernels/cuda_backend.hpp"
#endif

namespace ferry {

bool has_tokenizer(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "tiktoken.model") || std::filesystem::exists(dir / "tokenizer.json");
}

std::unique_ptr<Backend> make_backend(const std::string& name, int cpu_threads, int prompt_x_bits) {
  if (prompt_x_bits != 0 && prompt_x_bits != 11 && prompt_x_bits != 22)
    throw ConfigError("--prompt-x-bits " + std::to_string(prompt_x_bits) + " is not 11 or 22");
  if (name == "cpu") return make_cpu_backend(cpu_threads);
#if FERRY_WITH_CUDA
  const auto cuda = [&] {
    if (prompt_x_bits) cuda_prompt_x_bits(prompt_x_bits);
    return make_cuda_backend();
  };
  if (name == "cuda") return cuda();
  if (name == "auto") return cuda_available() ? cuda() : make_cpu_backend(cpu_threads);
#else
  if (name == "cuda") throw ConfigError("--backend cuda: this build has no CUDA back-end (configure with FERRY_CUDA=ON)");
  if (name == "auto") return make_cpu_backend(cpu_threads);
#endif
  throw ConfigError("--backend: unknown back-end '" + name + "' (cpu, cuda or auto)");
}

namespace {

// Counts the bytes the Model constructor reads, tensor by tensor, for the load progress.
class ProgressSource final : public TensorSource {
 public:
  ProgressSource(const TensorSource& in, const ModelOptions& o, int64_t total) : in_(in), o_(o), total_(total) {}
  bool has(const std::string& name) const override { return in_.has(name); }
  TensorView get(const std::string& name) const override {
    TensorView v = in_.get(name);
    done_ = std::min(total_, done_ + int64_t(v.nbytes));
    o_.progress("spine", done_, total_);
    return v;
  }
  std::vector<std::string> names() const override { return in_.names(); }
  std::string describe() const override { return in_.describe(); }

 private:
  const TensorSource& in_;
  const ModelOptions& o_;
  int64_t total_;
  mutable int64_t done_ = 0;
};

void report(const ModelOptions& o, const char* phase, int64_t done, int64_t total) {
  if (o.progress) o.progress(phase, done, total);
}

void load_prepared(const ModelOptions& o, Runtime* rt, LoadedModel& m, LoadOptions& lo) {
  const std::filesystem::path dir(o.dir);
  m.prepared = true;
  m.cfg = load_prepared_config(dir);
  m.src = open_spine(dir, m.cfg);
  lo.spine_type = SpineType::f32;  // BF16/F32 tensors exactly as f32, Q8_0 kept as stored
  const Manifest manifest = read_manifest(dir / "manifest.json");
  if (o.ssd_streaming) {
    StreamingOptions so = o.streaming;
    if (so.usage_path.empty()) so.usage_path = usage_file(dir).string();  // seeds the caches, learns
    if (so.device_tier || m.backend->name().rfind("cuda", 0) == 0) {
      // CUDA: --cache-experts sizes the device cache (the compute tier); the host pool below it is
      // --host-pool alone.
      so.device = m.backend.get();
      so.device_cache_experts = so.cache_experts ? so.cache_experts
                                                 : (manifest.expert_bytes ? so.cache_bytes / uint64_t(manifest.expert_bytes) : 0);
      so.cache_experts = 0;
      so.cache_bytes = 0;
    }
    const int64_t pool = int64_t(std::max(so.host_pool_bytes, so.cache_bytes + so.cache_experts * uint64_t(manifest.file_bytes)));
    report(o, "host pool", 0, pool);
    if (!rt) throw ConfigError("--ssd-streaming: load_model was given no runtime to run the streaming actors in");
    auto s = std::make_unique<StreamingExperts>(*rt, m.cfg, manifest, so);
    report(o, "host pool", pool, pool);
    m.streaming = s.get();
    m.runtime = rt;
    m.experts = std::move(s);
  } else {
    const int64_t all = int64_t(manifest.experts.size()) * manifest.expert_bytes;
    report(o, "experts", 0, all);
    m.experts = std::make_unique<FileExperts>(m.cfg, make_catalog(manifest, o.streaming.expert_dirs), *m.backend,
                                              o.streaming.verify_reads);
    report(o, "experts", all, all);
  }
}

// Bytes the spine's tensors hold (what the progress counts to).
int64_t source_bytes(const TensorSource& src) {
  int64_t n = 0;
  for (const auto& name : src.names()) n += int64_t(src.get(name).nbytes);
  return n;
}

}  // namespace

LoadedModel load_model(const ModelOptions& o, Runtime* rt) {
  return load_model(o, rt, make_backend(o.backend, o.threads, o.prompt_x_bits));
}

LoadedModel load_model(const ModelOptions& o, Runtime* rt, std::unique_ptr<Backend> backend) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path dir(o.dir);
  if (!std::filesystem::is_directory(dir)) throw Error("model directory " + o.dir + " does not exist");
  LoadedModel m;
  m.backend = std::move(backend);
  if (o.profile_ops) {
    auto t = std::make_unique<TimingBackend>(std::move(m.backend));
    m.timing = t.get();
    m.backend = std::move(t);
  }
  LoadOptions lo;
  if (is_prepared_model(dir)) {
    if (o.spine_type != "f32")
      throw ConfigError("--spine-type " + o.spine_type + " does not apply to a prepared model: its spine keeps the "
                        "types `ferry prepare --spine-type` wrote");
    load_prepared(o, rt, m, lo);
  } else {
    if (o.ssd_streaming)
      throw ConfigError("--ssd-streaming needs a prepared model directory (spine.gguf + manifest.json from `ferry "
                        "prepare`); " + o.dir + " has none");
    m.cfg = load_model_config(dir);
    m.src = open_safetensors_checkpoint(dir);
    lo.spine_type = parse_spine_type(o.spine_type);
  }
  if (has_tokenizer(dir)) m.tokenizer = load_tokenizer(dir);
  if (o.progress) {
    const ProgressSource counted(*m.src, o, m.prepared ? source_bytes(*m.src) : 0);
    m.model = std::make_unique<Model>(m.cfg, counted, *m.backend, lo, m.experts.get());
  } else {
    m.model = std::make_unique<Model>(m.cfg, *m.src, *m.backend, lo, m.experts.get());
  }
  if (m.timing) m.timing->reset();
  m.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace ferry
