// The one CLI11 registration of the engine option set (actors/runtime/engine_options.hpp), shared by
// `ferry run`, `ferry faults` and `ferry-server`; docs/USAGE.md "Engine options" documents it once.
// Sizes use the one syntax of io/units.hpp (GB = 10^9, GiB = 2^30; a bare number is refused);
// --cache-experts also takes a count.
#pragma once

#include "actors/runtime/engine_options.hpp"

namespace CLI {
class App;
}

namespace ferry::cli {

// Registers every engine flag on `c`, writing into `o` (which must outlive parsing).
void add_engine_flags(CLI::App* c, EngineOptions& o);

// "12" -> 12 experts; "2GB" / "1.5GiB" -> bytes. Throws UsageError naming the flag.
void parse_capacity(const std::string& flag, const std::string& text, uint64_t& experts, uint64_t& bytes);

// Exit status of a front-end for an exception: 2 for UsageError (refused before loading), else 1.
int exit_status(const std::exception& e);

}  // namespace ferry::cli
