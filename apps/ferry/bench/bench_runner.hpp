// `ferry bench`: runs a suite (apps/ferry/bench/bench_suite.hpp), one fresh `ferry run ... --json` process per
// repeat, arms interleaved, and writes the results file: every repeat with the published fields
// (DESIGN.md "Metrics"), the bench's own wall time, and the identity check against its group's
// reference run. Evidence (stdout, stderr, --trace-hash files) stays in RESULTS.runs/.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "apps/ferry/bench/bench_suite.hpp"

namespace ferry::bench {

struct RunnerOptions {
  std::filesystem::path exe;  // the ferry binary to run (ferry bench passes its own)
  std::filesystem::path out;  // RESULTS.json
  int64_t repeats = 0;        // > 0 overrides the suite's
  bool dry_run = false;       // print the plan, run nothing
  bool skip_unsupported = false;  // arms using flags `ferry run --help` does not list are skipped
  std::string command;        // the bench command line, recorded in the results
  std::ostream* log = nullptr;  // progress lines (stderr in the app)
};

// Runs the suite. Returns the results (also written to opts.out, after every run so an interrupted
// suite leaves what it measured). A run that fails is recorded with its error, never thrown.
nlohmann::json run_suite(const Suite& s, const RunnerOptions& opts);

// The long flags (--name) a help text lists.
std::set<std::string> help_flags(const std::string& help);
// The long flags of `args` missing from `known` (empty `known` means "could not tell": none missing).
std::vector<std::string> missing_flags(const std::vector<std::string>& args, const std::set<std::string>& known);

// One run's record from the `ferry run --json` object it printed: the published fields, looked up
// at the top level or in nested objects (drafter stats under "draft", tiers under "streaming"), so
// fields new to `ferry run` flow through; the whole object is kept under "run".
nlohmann::json run_record(const Arm& a, const nlohmann::json& run_json);

// Fills "identity" of every run in results["runs"] from the trace-hash files.
void check_identity(const Suite& s, nlohmann::json& results);

}  // namespace ferry::bench
