// ferry inspect HF_DIR|MODEL_DIR|config.json [--json] [--spine-type T] [--gpu-mem 96G --host-mem 256G]
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "apps/ferry/commands.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/formats/model_config.hpp"
#include "io/store/sizing.hpp"

namespace fs = std::filesystem;

namespace ferry {

namespace {

struct InspectArgs {
  std::string path, gpu_mem, host_mem, spine_type = "q8_0";
  bool json = false;
};

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
  FitInput in;
  in.spine = parse_spine_type(a.spine_type);
  if (!a.gpu_mem.empty()) in.gpu_mem = parse_size(a.gpu_mem);
  if (!a.host_mem.empty()) in.host_mem = parse_size(a.host_mem);
  const bool prepared = fs::is_directory(p) && fs::exists(p / "manifest.json");
  if (a.json) {
    auto j = sizing_json(s, in);
    j["source"] = cfg.string();
    if (prepared) j["store"] = store_summary(p);
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("source         {}\n{}", cfg.string(), sizing_report(s, in));
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
  c->add_option("--gpu-mem", a->gpu_mem, "GPU memory, e.g. 96G (binary) or 96GB (decimal)");
  c->add_option("--host-mem", a->host_mem, "host memory for the pinned expert pool, e.g. 256G");
  c->callback([a] { run(*a); });
}

}  // namespace ferry
