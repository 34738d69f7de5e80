// ferry prepare --checkpoint HF_DIR --out MODEL_DIR --expert-dir DIR [--expert-dir DIR ...]
//               [--spine-type q8_0|bf16|f32] [--replicas USAGE.json --replica-budget DIR=SIZE ...]
#include <fmt/format.h>

#include <memory>

#include "apps/ferry/commands.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store_prepare.hpp"
#include "io/store/sizing.hpp"

namespace ferry {

namespace {

struct PrepareArgs {
  std::string checkpoint, out, spine_type = "q8_0", replicas;
  std::vector<std::string> expert_dirs, budgets;
  bool quiet = false;
};

void run(const PrepareArgs& a) {
  PrepareOptions o;
  o.checkpoint = a.checkpoint;
  o.out = a.out;
  for (const auto& d : a.expert_dirs) o.expert_dirs.emplace_back(d);
  o.spine = parse_spine_type(a.spine_type);
  o.replicas_usage = a.replicas;
  for (const auto& b : a.budgets) {
    const auto eq = b.rfind('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(fmt::format("--replica-budget '{}': expected DIR=SIZE, e.g. /nvme1/k31=2T", b));
    o.replica_budgets.emplace_back(b.substr(0, eq), int64_t(parse_size(b.substr(eq + 1), "--replica-budget")));
  }
  o.progress = !a.quiet;
  const auto r = prepare_model(o);
  fmt::print("prepared {}: {} experts, {} copies written ({}), {} already done; spine {}; manifest {}\n", a.out, r.experts,
             r.copies_written, format_bytes(r.bytes_written), r.copies_skipped,
             r.spine_written ? fmt::format("written ({} tensors)", r.spine_tensors) : std::string("already done"),
             r.manifest.string());
}

}  // namespace

void add_prepare_command(CLI::App& app) {
  auto a = std::make_shared<PrepareArgs>();
  auto* c = app.add_subcommand("prepare", "lay a checkpoint out for streaming: spine.gguf, expert files, manifest");
  c->add_option("--checkpoint", a->checkpoint, "Hugging Face checkpoint directory")->required()->check(CLI::ExistingDirectory);
  c->add_option("--out", a->out, "prepared model directory (spine.gguf, manifest.json)")->required();
  c->add_option("--expert-dir", a->expert_dirs, "directory for expert files; several split one full copy between them")->required();
  c->add_option("--spine-type", a->spine_type, "q8_0 | bf16 | f32 for spine matrices")->capture_default_str();
  c->add_option("--replicas", a->replicas, "usage counts JSON (\"L<l>-E<e>.bin\": n) ordering replicas")->check(CLI::ExistingFile);
  c->add_option("--replica-budget", a->budgets, "DIR=SIZE: DIR holds replicas of the most-used experts up to SIZE in all");
  c->add_flag("--quiet", a->quiet, "no progress bar");
  c->callback([a] { run(*a); });
}

}  // namespace ferry
