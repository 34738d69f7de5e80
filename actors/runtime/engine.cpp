#include "actors/runtime/engine.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "actors/runtime/prepared_model.hpp"
#include "io/errors.hpp"
#include "io/progress.hpp"
#include "io/store/expert_store.hpp"

namespace fs = std::filesystem;

namespace ferry {

PlanRequest plan_request(const EngineOptions& o) {
  const fs::path dir(o.model.dir);
  PlanRequest r;
  if (is_prepared_model(dir)) {
    const ModelConfig cfg = load_prepared_config(dir);
    const Manifest m = read_manifest(dir / "manifest.json");
    r.model = prepared_footprint(cfg, m, dir / m.spine_file);
  } else {
    r.model = model_footprint(load_model_config(dir), parse_spine_type(o.model.spine_type));
  }
  r.ctx = o.ctx;
  r.prefill_chunk = o.prefill_chunk;
  // KDA state snapshots beside the live state: a drafted block's rollback point, the server's prompt cache.
  r.state_snapshots = (o.draft.spec.empty() ? 0 : 1) + (o.prompt_cache ? 1 : 0);
  r.streaming = o.streaming;
  const StreamingOptions& s = o.model.streaming;
  r.cache_set = o.cache_set;
  r.cache_experts = s.cache_experts;
  r.cache_bytes = s.cache_bytes;
  r.host_pool_set = o.host_pool_set;
  r.host_pool_bytes = s.host_pool_bytes;
  r.scratch_slots = s.stream_slots;
  r.device_scratch = s.device_scratch ? s.device_scratch : 2 * s.upload_streams;
  return r;
}

MemoryPlan plan_engine(const EngineOptions& o, Backend& be) {
  PlanRequest r = plan_request(o);
  const Backend::MemoryInfo gpu = be.device_memory();
  r.gpu = gpu.total > 0;
  r.gpu_free = gpu.free;
  r.host_available = host_memory_available();
  // --gpu-mem / --host-mem: share the machine (or size a smaller one) by planning with less than is free.
  if (o.gpu_mem_cap) r.gpu_free = std::min<uint64_t>(r.gpu_free, o.gpu_mem_cap);
  if (o.host_mem_cap) r.host_available = std::min<uint64_t>(r.host_available, o.host_mem_cap);
  return plan_memory(r);
}

namespace {

// The plan's streaming decision and cache sizes into the options load_model reads.
void apply_plan(const MemoryPlan& p, EngineOptions& o) {
  o.model.ssd_streaming = p.streaming;
  if (!p.streaming) return;
  StreamingOptions& s = o.model.streaming;
  s.cache_experts = p.gpu ? p.device_cache_experts : 0;
  s.cache_bytes = p.gpu ? 0 : p.host_pool_bytes;
  s.host_pool_bytes = p.host_pool_bytes;
}

// Progress bars with rate and ETA on a terminal (stderr), one per load phase; nothing otherwise.
struct LoadProgress {
  std::unique_ptr<Progress> bar;
  std::string phase;
  int64_t last = 0;
  void operator()(const std::string& ph, int64_t done, int64_t total) {
    if (total <= 0) return;
    if (ph != phase || !bar) {
      bar.reset();
      phase = ph;
      last = 0;
      Progress::Options po;
      po.enabled = ::isatty(2) == 1;
      bar = std::make_unique<Progress>("loading " + ph, 0, total, po);
    }
    bar->add(0, done - last);
    last = done;
    if (done >= total) bar.reset();
  }
};

}  // namespace

Engine start_engine(EngineOptions& o, Runtime* rt, const EngineLog& log) {
  auto say = [&](const std::string& s) {
    if (o.quiet) return;
    if (log) log(s);
    else std::fputs(s.c_str(), stderr);
  };
  validate_engine_options(o);
  std::unique_ptr<Backend> be = make_backend(o.model.backend, o.model.threads, o.model.prompt_x_bits);
  Engine e;
  e.plan = plan_engine(o, *be);
  say(format_plan(e.plan));
  if (!e.plan.refusal.empty()) throw UsageError(e.plan.refusal);
  apply_plan(e.plan, o);
  auto progress = std::make_shared<LoadProgress>();
  if (!o.quiet) o.model.progress = [progress](const std::string& ph, int64_t d, int64_t t) { (*progress)(ph, d, t); };
  e.model = load_model(o.model, rt, std::move(be));
  o.model.progress = nullptr;
  e.model.model->set_prefill_chunk(e.plan.prefill_chunk);
  return e;
}

}  // namespace ferry
