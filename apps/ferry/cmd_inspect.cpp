// ferry inspect HF_DIR|MODEL_DIR|config.json [--json] [--spine-type T] [--gpu-mem 96GiB --host-mem 256GB -c N]
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "apps/ferry/commands.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/formats/model_config.hpp"
#include "io/store/memory_plan.hpp"
#include "io/store/sizing.hpp"
#include "actors/runtime/engine.hpp"

namespace fs = std::filesystem;

namespace ferry {

namespace {

struct InspectArgs {
  std::string path, gpu_mem, host_mem, spine_type = "q8_0";
  int64_t ctx = 4096;
  int64_t prefill_chunk = 0;
  bool json = false;
};

// The plan a run would compute on a machine with these memories (actors/runtime/engine.hpp, the same
// function `ferry run` and `ferry-server` call with the memory they find free).
MemoryPlan inspect_plan(const InspectArgs& a, const FitInput& in, const fs::path& cfg) {
  PlanRequest r;
  if (fs::is_directory(a.path) && fs::exists(fs::path(a.path) / "manifest.json")) {
    EngineOptions eo;
    eo.model.dir = a.path;
    eo.ctx = a.ctx;
    eo.prefill_chunk = a.prefill_chunk;
    r = plan_request(eo);
  } else {
    // A checkpoint or config is planned as its prepared form would run (spine of --spine-type, experts
    // streamable): that is the question inspect answers before `ferry prepare`.
    r.model = model_footprint(load_model_config(cfg), in.spine);
    r.model.prepared = true;
    r.ctx = a.ctx;
    r.prefill_chunk = a.prefill_chunk;
  }
  r.gpu = in.gpu_mem > 0;
  r.gpu_free = uint64_t(in.gpu_mem);
  r.host_available = uint64_t(in.host_mem);
  return plan_memory(r);
}

// A prepared MODEL_DIR also carries config.json (copied by prepare) and a manifest.
nlohmann::json store_summary(const fs::path& dir) {
  nlohmann::json j;
  const auto m = read_manifest(dir / "manifest.json");
  std::vector<int64_t> copies(m.dirs.size(), 0);
  int64_t total = 0;
  for (const auto& e : m.experts)
    for (auto d : e.dirs) {
      ++copies[d];
      ++total;
    }
  j["experts"] = m.experts.size();
  j["copies"] = total;
  for (size_t d = 0; d < m.dirs.size(); ++d)
    j["dirs"].push_back({{"path", m.dirs[d]}, {"files", copies[d]}, {"bytes", copies[d] * m.file_bytes}});
  return j;
}

void run(const InspectArgs& a) {
  const fs::path p = a.path;
  const fs::path cfg = fs::is_directory(p) ? p / "config.json" : p;
  if (!fs::exists(cfg)) throw ConfigError(fmt::format("{}: no config.json (give an HF directory, a prepared model or a config file)", p.string()));
  const auto s = size_model(load_model_config(cfg));
  check_prefill_chunk(a.prefill_chunk);
  FitInput in;
  in.spine = parse_spine_type(a.spine_type);
  if (!a.gpu_mem.empty()) in.gpu_mem = int64_t(parse_size(a.gpu_mem, "--gpu-mem"));
  if (!a.host_mem.empty()) in.host_mem = int64_t(parse_size(a.host_mem, "--host-mem"));
  const bool prepared = fs::is_directory(p) && fs::exists(p / "manifest.json");
  const bool plan = in.gpu_mem > 0 || in.host_mem > 0;
  if (a.json) {
    auto j = sizing_json(s, in);
    j["source"] = cfg.string();
    if (prepared) j["store"] = store_summary(p);
    if (plan) j["plan"] = plan_json(inspect_plan(a, in, cfg));
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("source         {}\n{}", cfg.string(), sizing_report(s, in));
  if (plan) fmt::print("\n{}", format_plan(inspect_plan(a, in, cfg)));
  if (prepared) {
    const auto j = store_summary(p);
    fmt::print("prepared store {} experts, {} copies\n", j["experts"].get<int64_t>(), j["copies"].get<int64_t>());
    for (const auto& d : j["dirs"])
      fmt::print("  {}  {} files  {}\n", d["path"].get<std::string>(), d["files"].get<int64_t>(), format_bytes(d["bytes"].get<int64_t>()));
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  auto* c = app.add_subcommand("inspect", "what a checkpoint needs: layers, parameters, experts, caches, memory");
  c->add_option("path", a->path, "HF checkpoint dir, prepared model dir, or config.json")->required();
  c->add_flag("--json", a->json, "print JSON");
  c->add_option("--spine-type", a->spine_type, "spine type for the memory table: q8_0 | bf16 | f32")->capture_default_str();
  c->add_option("--gpu-mem", a->gpu_mem, "GPU memory free for ferry, e.g. 96GiB (binary) or 96GB (decimal)");
  c->add_option("--host-mem", a->host_mem, "host memory available to ferry, e.g. 256GB");
  c->add_option("-c,--ctx-size,--ctx", a->ctx, "context of the memory plan in tokens")->capture_default_str();
  c->add_option("--prefill-chunk", a->prefill_chunk, "tokens per prompt pass (0 = the plan chooses)")
      ->capture_default_str();
  c->callback([a] { run(*a); });
}

}  // namespace ferry
