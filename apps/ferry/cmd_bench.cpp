// `ferry bench --suite FILE.json --out RESULTS.json`: runs a benchmark suite, one fresh `ferry run`
// process per repeat (this very binary, /proc/self/exe), arms interleaved; `ferry bench report
// RESULTS.json [--svg DIR] [--baseline TAG]` prints the table and writes the plots. Method and suite
// format: docs/BENCHMARKS.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "apps/ferry/commands.hpp"
#include "apps/ferry/bench/bench_process.hpp"
#include "apps/ferry/bench/bench_report.hpp"
#include "apps/ferry/bench/bench_runner.hpp"
#include "io/errors.hpp"

namespace ferry::cli {
namespace {

struct BenchArgs {
  std::string suite, out, models_dir, exe;
  int64_t repeats = 0;
  bool dry_run = false, skip_unsupported = false;
  std::vector<std::string> argv;
};

struct ReportArgs {
  std::string results, svg, baseline;
};

int count_failed(const nlohmann::json& results) {
  int failed = 0;
  for (const auto& r : results["runs"]) failed += !r.value("ok", false);
  return failed;
}

void bench_main(const BenchArgs& a) {
  if (a.suite.empty()) throw CLI::RequiredError("--suite");
  if (a.out.empty() && !a.dry_run) throw CLI::RequiredError("--out");
  const bench::Suite s = bench::load_suite(a.suite, a.models_dir);
  bench::RunnerOptions o;
  o.exe = a.exe.empty() ? bench::self_exe() : std::filesystem::path(a.exe);
  o.out = a.out;
  o.repeats = a.repeats;
  o.dry_run = a.dry_run;
  o.skip_unsupported = a.skip_unsupported;
  o.command = bench::command_line("ferry", a.argv);
  o.log = &std::cerr;
  const nlohmann::json results = bench::run_suite(s, o);
  if (a.dry_run) return;
  std::printf("%s\n", bench::render_table(results, bench::summarize(results)).c_str());
  std::fprintf(stderr, "ferry bench: results in %s (evidence in %s.runs/)\n", a.out.c_str(), a.out.c_str());
  if (const int failed = count_failed(results))
    throw Error(std::to_string(failed) + " run(s) failed: see \"error\" in " + a.out);
}

void report_main(const ReportArgs& a) {
  std::ifstream f(a.results);
  if (!f) throw Error("cannot read results file " + a.results);
  nlohmann::json results;
  try {
    results = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(a.results + ": not valid JSON (" + e.what() + ")");
  }
  const auto arms = bench::summarize(results, a.baseline);
  std::printf("%s", bench::render_table(results, arms).c_str());
  if (a.svg.empty()) return;
  for (const auto& p : bench::write_plots(arms, a.svg)) std::fprintf(stderr, "ferry bench report: wrote %s\n", p.c_str());
}

}  // namespace

void add_bench_command(CLI::App& app, int argc, char** argv) {
  auto b = std::make_shared<BenchArgs>();
  for (int i = 1; i < argc; ++i) b->argv.emplace_back(argv[i]);
  CLI::App* c = app.add_subcommand("bench", "Run a benchmark suite: a fresh `ferry run` process per repeat");
  c->add_option("--suite", b->suite, "Suite file (JSON, see config/bench/)");
  c->add_option("--out", b->out, "Results file (JSON); evidence goes to RESULTS.runs/");
  c->add_option("--repeats", b->repeats, "Repeats per arm (overrides the suite)");
  c->add_option("--models-dir", b->models_dir, "Where {models} points (overrides the suite's models_dir)");
  c->add_option("--exe", b->exe, "The ferry binary to run (default: this one)");
  c->add_flag("--dry-run", b->dry_run, "Print the setup steps and the command lines, run nothing");
  c->add_flag("--skip-unsupported", b->skip_unsupported, "Skip arms using flags this ferry run does not have");
  auto r = std::make_shared<ReportArgs>();
  CLI::App* rep = c->add_subcommand("report", "Table (median, min, max, ratio) and SVG plots of a results file");
  rep->add_option("results", r->results, "Results file written by ferry bench")->required();
  rep->add_option("--svg", r->svg, "Write the plots into this directory");
  rep->add_option("--baseline", r->baseline, "Arm tag every ratio is to (default: each group's reference)");
  rep->callback([r] { report_main(*r); });
  c->require_subcommand(0, 1);
  c->callback([b, rep] {
    if (!rep->parsed()) bench_main(*b);
  });
}

}  // namespace ferry::cli
