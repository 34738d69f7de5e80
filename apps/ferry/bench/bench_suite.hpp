// Benchmark suites (`ferry bench --suite FILE.json`): what to run, parsed and checked before anything
// runs. A suite is a list of arms; each arm becomes one `ferry run ... --json` command line, run as a
// fresh process once per repeat. Format and fields: docs/BENCHMARKS.md "Suite files".
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ferry::bench {

struct Arm {
  std::string tag, group;  // group: arms whose outputs must be identical (default: the tag)
  bool reference = false;  // the run others of the group are compared with (default: the group's first arm)
  std::string model;
  std::string prompt, prompt_file, prompt_ids;  // exactly one
  std::string mode = "raw";                     // raw | chat (prompt wrapped in the chat template)
  std::string system;                           // chat mode: system message ("" = the template's default)
  int64_t n = 0, ctx = 0;                       // ctx 0 = `ferry run`'s default
  std::optional<double> temp, top_p;
  std::optional<uint64_t> seed;
  int64_t threads = 0;
  bool ignore_eos = true;  // fixed-length runs: generated == n, so rates compare
  // Expert streaming (the --ssd-streaming flags).
  bool ssd_streaming = false;
  bool prefetch_router = false;  // --prefetch-router
  std::string cache_experts, host_pool;
  std::vector<std::string> expert_dirs;
  // Drafting (the --draft flags). "{reference}" in draft names the group reference's token file.
  std::string draft, draft_gate;
  int64_t draft_max = 0;
  std::string draft_cost_gate;    // "" = the default (on); "on" / "off"
  std::vector<std::string> args;  // appended verbatim
  int64_t repeats = 0;            // 0 = the suite's
  double timeout_s = 0;           // 0 = none
  std::string series;             // plot series (default: "plain" or "drafted")

  bool drafted() const { return !draft.empty(); }
  bool uses_reference_file() const { return draft.find("{reference}") != std::string::npos; }
};

// A suite-level step that makes a model before the runs: `ferry <run...>` once, skipped when `creates`
// exists already.
struct SetupStep {
  std::string creates;
  std::vector<std::string> run;
};

struct Suite {
  std::filesystem::path file;
  std::string name, description;
  int64_t repeats = 3;
  std::string models_dir = "bench-models";
  std::vector<SetupStep> setup;
  std::vector<Arm> arms;

  int64_t repeats_of(const Arm& a, int64_t override_repeats) const;
  // Index of the arm a group's runs are compared with.
  size_t reference_of(const std::string& group) const;
};

// Reads and checks a suite. Every mistake throws ConfigError naming the file and the field
// ("suite.json: field 'arms[2].n': missing required field"). `{models}` in paths and setup arguments
// becomes models_dir (models_dir_override when given), `{suite_dir}` the suite file's folder.
Suite load_suite(const std::filesystem::path& file, const std::string& models_dir_override = "");
Suite parse_suite(const nlohmann::json& j, const std::filesystem::path& file,
                  const std::string& models_dir_override = "");

// One planned run: which arm, which repeat (0-based), in the order they run.
struct Slot {
  size_t arm = 0;
  int64_t repeat = 0;
};
// Arms interleaved to spread machine drift over all of them: round r runs every arm that has an r-th
// repeat, in suite order (A B C A B C ...).
std::vector<Slot> interleave(const Suite& s, int64_t override_repeats = 0);

// The `ferry run` arguments (without the program name) of one run of `a`. trace_hash: where the run
// writes its per-position logit hashes; reference_file replaces "{reference}" in the draft spec.
std::vector<std::string> run_args(const Arm& a, const std::string& trace_hash, const std::string& reference_file);

}  // namespace ferry::bench
