// The --ssd-streaming flags of `ferry run` (and anything else that loads models through
// actors/model_loader): they fill ModelOptions::streaming directly, so a command adds them with one
// call and prints the runtime's metrics with another.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace CLI {
class App;
}

namespace ferry {
struct ModelOptions;
struct LoadedModel;
}  // namespace ferry

namespace ferry::cli {

void add_streaming_flags(CLI::App* c, ModelOptions& o);

// "12" -> 12 experts; "2GB" / "1.5GiB" / "512M" -> bytes. Throws ferry::ConfigError naming the flag.
void parse_capacity(const std::string& flag, const std::string& text, uint64_t& experts, uint64_t& bytes);
uint64_t parse_bytes(const std::string& flag, const std::string& text);

// With streaming: adds "streaming" to j (when given) or prints the metrics lines to stderr.
void report_streaming(const LoadedModel& m, nlohmann::json* j);

}  // namespace ferry::cli
