// Subcommands of the `ferry` CLI, one file each (apps/ferry/cmd_<name>.cpp).
#pragma once

namespace CLI {
class App;
}

namespace ferry::cli {

void add_run_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_faults_command(CLI::App& app);  // cmd_faults.cpp

}  // namespace ferry::cli
