// Subcommands of the `ferry` CLI, one file each (apps/ferry/cmd_<name>.cpp). Each registers itself
// (options and callback) on the top-level CLI11 app; main.cpp calls these. A callback reports bad input
// by throwing ferry::Error, which main prints.
#pragma once

#include <CLI/CLI.hpp>

namespace ferry::cli {

void add_run_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_trace_command(CLI::App& app);  // apps/ferry/cmd_trace.cpp

}  // namespace ferry::cli

namespace ferry {

void add_synth_command(CLI::App& app);    // apps/ferry/cmd_synth.cpp
void add_prepare_command(CLI::App& app);  // apps/ferry/cmd_prepare.cpp
void add_verify_command(CLI::App& app);   // apps/ferry/cmd_verify.cpp
void add_inspect_command(CLI::App& app);  // apps/ferry/cmd_inspect.cpp

}  // namespace ferry
