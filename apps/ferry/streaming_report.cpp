#include "apps/ferry/streaming_report.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "actors/runtime/model_loader.hpp"

namespace ferry::cli {

void report_streaming(const LoadedModel& m, nlohmann::json* j) {
  if (!m.streaming) return;
  const StreamingMetrics sm = m.streaming->metrics();
  if (j)
    (*j)["streaming"] = to_json(sm);
  else
    std::fputs(format_metrics(sm).c_str(), stderr);
}

}  // namespace ferry::cli
