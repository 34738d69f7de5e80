// `ferry trace FILE [--svg OUT_DIR]`: summary (and plots) of a `ferry run --trace FILE` scheduling trace.
// `ferry trace diff A B`: compares two `--trace-hash` files and names the first differing position;
// exits 1 when they differ.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "actors/streaming/cache_policy.hpp"
#include "actors/tracing/trace_summary.hpp"
#include "io/store/expert_store.hpp"
#include "apps/ferry/commands.hpp"
#include "io/errors.hpp"

namespace ferry::cli {
namespace {

struct HashLine {
  std::string pos, id, hash;
};

std::vector<HashLine> read_hashes(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("trace diff: cannot read " + path);
  std::vector<HashLine> out;
  std::string line;
  for (size_t n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    std::istringstream ss(line);
    HashLine h;
    if (!(ss >> h.pos >> h.id >> h.hash))
      throw FormatError("trace diff: " + path + " line " + std::to_string(n) + " is not 'position token hash'");
    out.push_back(h);
  }
  return out;
}

// Returns true when the two files agree on every position.
bool diff_hashes(const std::string& a, const std::string& b) {
  const auto x = read_hashes(a), y = read_hashes(b);
  const size_t n = std::min(x.size(), y.size());
  for (size_t i = 0; i < n; ++i) {
    if (x[i].pos == y[i].pos && x[i].id == y[i].id && x[i].hash == y[i].hash) continue;
    std::printf("first difference at line %zu (position %s): %s has token %s hash %s, %s has token %s hash %s\n", i + 1,
                x[i].pos.c_str(), a.c_str(), x[i].id.c_str(), x[i].hash.c_str(), b.c_str(), y[i].id.c_str(),
                y[i].hash.c_str());
    return false;
  }
  if (x.size() != y.size()) {
    std::printf("identical over the first %zu positions, but %s has %zu and %s has %zu\n", n, a.c_str(), x.size(),
                b.c_str(), y.size());
    return false;
  }
  std::printf("identical: %zu positions\n", n);
  return true;
}

}  // namespace

void add_trace_command(CLI::App& app) {
  auto args = std::make_shared<std::vector<std::string>>();
  auto svg = std::make_shared<std::string>();
  auto top = std::make_shared<size_t>(10);
  auto usage = std::make_shared<std::string>();
  auto mass = std::make_shared<double>(kDefaultPriorMass);
  CLI::App* c = app.add_subcommand(
      "trace", "Summarise a --trace file (plots with --svg DIR), or compare two --trace-hash files: trace diff A B");
  c->add_option("args", *args, "FILE, or: diff A B")->required()->expected(1, 3);
  c->add_option("--svg", *svg, "Write drive_throughput.svg, layer_wait.svg and hit_rate.svg into DIR");
  c->add_option("--top", *top, "Most-read experts to list")->capture_default_str();
  c->add_option("--usage", *usage,
                "The usage.json the run's caches were seeded with: the policy replay starts from it, as the run did");
  c->add_option("--usage-prior", *mass, "Row-uses per MoE layer the usage counts weigh (the run's --usage-prior)")
      ->capture_default_str();
  c->callback([args, svg, top, usage, mass] {
    if ((*args)[0] == "diff") {
      if (args->size() != 3) throw Error("usage: ferry trace diff A B (two --trace-hash files)");
      if (!diff_hashes((*args)[1], (*args)[2])) throw CLI::RuntimeError(1);
      return;
    }
    if (args->size() != 1) throw Error("usage: ferry trace FILE [--svg DIR]");
    const TraceFile tf = read_trace_file((*args)[0]);
    std::shared_ptr<const ExpertPrior> prior;
    if (!usage->empty()) {
      const UsageCounts counts = load_usage(*usage);
      uint32_t layers = 0, experts = 0;
      for (const auto& [id, n] : counts) {
        layers = std::max(layers, uint32_t(id >> 32) + 1);
        experts = std::max(experts, uint32_t(id & 0xffffffffu) + 1);
      }
      prior = std::make_shared<const ExpertPrior>(prior_from_usage(counts, layers, experts, *mass));
    }
    const TraceSummary s = summarize_trace(tf, (*args)[0], *top, prior);
    std::fputs(format_trace_summary(s).c_str(), stdout);
    if (!svg->empty())
      for (auto& p : write_trace_svgs(tf, s, *svg)) std::printf("wrote %s\n", p.c_str());
  });
}

}  // namespace ferry::cli
