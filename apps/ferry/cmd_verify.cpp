// ferry verify MODEL_DIR [--full | --sample N]
#include <fmt/format.h>

#include <memory>

#include "apps/ferry/commands.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/progress.hpp"
#include "io/store/sizing.hpp"

namespace ferry {

namespace {

struct VerifyArgs {
  std::string dir;
  bool full = false, quiet = false;
  int64_t sample = -1;
  uint64_t seed = 0;
};

void run(const VerifyArgs& a) {
  VerifyOptions opt;
  if (a.full) opt.mode = VerifyMode::full;
  else if (a.sample >= 0) {
    opt.mode = VerifyMode::sample;
    opt.sample = a.sample;
  }
  opt.seed = a.seed;
  const auto m = read_manifest(std::filesystem::path(a.dir) / "manifest.json");
  int64_t copies = 0;
  for (const auto& e : m.experts) copies += int64_t(e.dirs.size());
  const int64_t hashed = opt.mode == VerifyMode::full ? copies * m.file_bytes
                         : opt.mode == VerifyMode::sample ? std::min<int64_t>(opt.sample, int64_t(m.experts.size())) * m.file_bytes
                                                          : 0;
  Progress progress("verify", int64_t(m.experts.size()), hashed, Progress::Options{!a.quiet, -1, 5.0, stderr});
  const auto r = verify_store(a.dir, opt, &progress);
  progress.finish();
  for (const auto& b : r.bad)
    fmt::print("BAD {}: {}; {}\n", b.file, b.problem, b.good_copy.empty() ? "no good copy" : "good copy: " + b.good_copy);
  const std::string how = r.files_hashed == 0                  ? ""
                          : r.hashed_direct == r.files_hashed ? ", read with O_DIRECT as the engine reads"
                          : fmt::format(", {} of them through the page cache (the filesystem refuses O_DIRECT)",
                                        r.files_hashed - r.hashed_direct);
  fmt::print("{}: {} copies checked, {} hashed ({}{}), {} bad\n", r.ok() ? "OK" : "FAILED", r.files_checked,
             r.files_hashed, format_bytes(r.bytes_hashed), how, r.bad.size());
  if (!r.ok()) throw Error(fmt::format("verify: {} bad file(s) in {}", r.bad.size(), a.dir));
}

}  // namespace

void add_verify_command(CLI::App& app) {
  auto a = std::make_shared<VerifyArgs>();
  auto* c = app.add_subcommand("verify", "check a prepared model's files against its manifest");
  c->add_option("model_dir", a->dir, "prepared model directory")->required();
  auto* full = c->add_flag("--full", a->full, "checksum every copy");
  c->add_option("--sample", a->sample, "checksum N random experts (all their copies)")->excludes(full);
  c->add_option("--seed", a->seed, "sample selection seed");
  c->add_flag("--quiet", a->quiet, "no progress bar");
  c->callback([a] { run(*a); });
}

}  // namespace ferry
