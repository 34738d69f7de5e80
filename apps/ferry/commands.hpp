// The ferry subcommands, one file each (apps/ferry/cmd_<name>.cpp). Each registers itself (options and
// callback) on the top-level CLI11 app; main.cpp calls these. A callback reports bad input by throwing
// ferry::Error, which main prints.
#pragma once

#include <CLI/CLI.hpp>

namespace ferry {

void add_synth_command(CLI::App& app);    // apps/ferry/cmd_synth.cpp
void add_prepare_command(CLI::App& app);  // apps/ferry/cmd_prepare.cpp
void add_verify_command(CLI::App& app);   // apps/ferry/cmd_verify.cpp
void add_inspect_command(CLI::App& app);  // apps/ferry/cmd_inspect.cpp

namespace cli {
void add_run_command(CLI::App& app);   // apps/ferry/cmd_run.cpp
void add_chat_command(CLI::App& app);  // apps/ferry/cmd_chat.cpp
void add_eval_command(CLI::App& app);  // apps/ferry/cmd_run.cpp
void add_demo_command(CLI::App& app);  // apps/ferry/cmd_demo.cpp
void add_faults_command(CLI::App& app);  // apps/ferry/cmd_faults.cpp
void add_trace_command(CLI::App& app); // apps/ferry/cmd_trace.cpp
void add_bench_command(CLI::App& app, int argc, char** argv);  // apps/ferry/cmd_bench.cpp (argv: recorded)
}  // namespace cli

}  // namespace ferry
