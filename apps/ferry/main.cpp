// ferry: run trillion-parameter MoE models on one GPU. `ferry --help-all` lists every subcommand.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "apps/engine_cli/engine_cli.hpp"
#include "apps/ferry/commands.hpp"

int main(int argc, char** argv) {
  // Logs (reader engine choice, fall-backs, retries) go to stderr: stdout carries the text or --json.
  spdlog::set_default_logger(spdlog::stderr_color_mt("ferry"));
  CLI::App app{"ferry: run mixture-of-experts models with experts streamed from NVMe"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  ferry::cli::add_run_command(app);
  ferry::cli::add_chat_command(app);
  ferry::cli::add_eval_command(app);
  ferry::cli::add_demo_command(app);
  ferry::cli::add_trace_command(app);
  ferry::cli::add_bench_command(app, argc, argv);
  ferry::add_synth_command(app);
  ferry::add_prepare_command(app);
  ferry::add_verify_command(app);
  ferry::add_inspect_command(app);
  ferry::cli::add_faults_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry: error: %s\n", e.what());
    return ferry::cli::exit_status(e);  // 2: refused before loading (bad flag, misfit)
  }
  return 0;
}
