// `ferry bench report`: per-arm statistics of a results file (median, min, max over the repeats; the
// ratio to a baseline arm), a Markdown table, and SVG plots (apps/ferry/bench/bench_svg.cpp).
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ferry::bench {

struct Stat {
  double median = 0, min = 0, max = 0;
  int count = 0;
};
Stat stat_of(std::vector<double> v);

struct ArmSummary {
  std::string tag, group, series, mode, draft, cache_experts;
  int64_t n = 0;
  bool drafted = false, reference = false;
  int ok = 0, failed = 0;
  std::string error;                    // the first failure, or why the arm was skipped
  Stat steady, wall, generated, prompt_s;
  std::optional<double> acceptance;     // Σ accepted / Σ drafts over the repeats
  std::map<std::string, double> bytes_per_token;  // tier -> median
  std::optional<double> layer_wait_s;   // median
  std::string identity;                 // "identical over N" (all repeats) or the first difference
  bool identical = true;
  std::optional<double> ratio;          // median steady / the baseline's median steady
  std::string baseline;                 // the arm the ratio is to
};

// baseline: an arm tag (every ratio is to it) or "" (each arm's ratio is to its group's reference).
// Throws ConfigError when the tag names no arm of the results.
std::vector<ArmSummary> summarize(const nlohmann::json& results, const std::string& baseline = "");

// A Markdown table, with a header line naming the suite, date and host.
std::string render_table(const nlohmann::json& results, const std::vector<ArmSummary>& arms);

// Writes steady_by_length.svg, drafter.svg, bytes_per_token.svg (and acceptance.svg when drafted arms
// report acceptance) into dir; returns the paths written.
std::vector<std::filesystem::path> write_plots(const std::vector<ArmSummary>& arms, const std::filesystem::path& dir);

}  // namespace ferry::bench
