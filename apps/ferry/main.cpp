// TEMPORARY (store branch): the lead owns main.cpp; this one only wires the store subcommands so the
// store tests can run the real binary. The lead's main calls the same add_*_command functions.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "apps/ferry/commands.hpp"
#include "io/errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ferry: trillion-parameter MoE inference from NVMe"};
  app.require_subcommand(1);
  ferry::add_synth_command(app);
  ferry::add_prepare_command(app);
  ferry::add_verify_command(app);
  ferry::add_inspect_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ferry::Error& e) {
    fmt::print(stderr, "ferry: {}\n", e.what());
    return 1;
  }
  return 0;
}
