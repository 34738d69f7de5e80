// The streaming runtime's metrics at the end of `ferry run`: into the --json object, or as lines on
// stderr (the same counters /metrics and `ferry trace` report; docs/USAGE.md "Counters").
#pragma once

#include <nlohmann/json_fwd.hpp>

namespace ferry {
struct LoadedModel;
}

namespace ferry::cli {

// With streaming: adds "streaming" to j (when given) or prints the metrics lines to stderr.
void report_streaming(const LoadedModel& m, nlohmann::json* j);

}  // namespace ferry::cli
