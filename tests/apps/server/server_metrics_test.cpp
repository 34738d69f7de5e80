// MetricsRegistry: Prometheus text and the JSON snapshot the dashboard reads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "actors/server/server_metrics.hpp"

namespace ferry {
namespace {

TEST(MetricsRegistry, PrometheusTextListsHelpTypeAndLabelledSeries) {
  MetricsRegistry r;
  EngineMetrics m(r);
  m.generated_tokens.add(3);
  m.generated_tokens.add(2);
  m.queue_depth.set(4);
  m.drive_bytes("nvme0 \"a\"").add(4096);
  const std::string text = r.prometheus();
  EXPECT_NE(text.find("# TYPE ferry_generated_tokens_total counter\nferry_generated_tokens_total 5\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE ferry_queue_depth gauge\nferry_queue_depth 4\n"), std::string::npos);
  EXPECT_NE(text.find("ferry_expert_hits_total{tier=\"disk\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("ferry_drive_read_bytes_total{drive=\"nvme0 \\\"a\\\"\"} 4096\n"), std::string::npos);
  EXPECT_NE(text.find("ferry_drafter_accepted_total 0\n"), std::string::npos);
  EXPECT_NE(text.find("ferry_layer_wait_seconds_total 0\n"), std::string::npos);
}

TEST(MetricsRegistry, SnapshotGroupsLabelledSeriesAndKeepsReferencesStable) {
  MetricsRegistry r;
  EngineMetrics m(r);
  Metric& hits = m.tier_hits("host");
  for (int i = 0; i < 100; ++i) r.counter("extra_" + std::to_string(i) + "_total", "x");  // storage grows
  hits.add(7);
  const nlohmann::json j = r.snapshot();
  EXPECT_EQ(j["ferry_expert_hits_total"]["tier=host"], 7.0);
  EXPECT_EQ(j["ferry_drive_read_bytes_total"], nlohmann::json::object());
  EXPECT_EQ(j["ferry_queue_capacity"], 0.0);
}

TEST(MetricsRegistry, KindMismatchAndUndeclaredUseAreProgrammingErrors) {
  MetricsRegistry r;
  r.counter("a_total", "a");
  EXPECT_THROW(r.gauge("a_total", "a"), std::logic_error);
  EXPECT_THROW(r.get("nope"), std::logic_error);
}

}  // namespace
}  // namespace ferry
