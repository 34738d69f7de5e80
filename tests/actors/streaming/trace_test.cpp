// The trace of a streaming run accounts for every expert byte and hit the metrics report, and its
// summary and plots come out of it.
#include <map>
#include <set>

#include "actors/tracing/trace_file.hpp"
#include "actors/tracing/trace_summary.hpp"
#include "messages/trace.pb.h"
#include "tests/actors/streaming/streaming_support.hpp"

using namespace ferry;
using namespace ferry::test;

TEST(StreamingTrace, TraceAccountsForEveryExpertByteTheMetricsReport) {
  const fs::path trace_path = kRoot / "run.trace";
  auto o = streaming_options(prepared("replicated", 2, true), 6);
  o.streaming.trace_path = trace_path.string();
  auto r = generate_run(o);  // the source's destructor flushes the trace after metrics were taken
  expect_same_output(r, reference());
  const TraceFile tf = read_trace_file(trace_path.string());
  ASSERT_EQ(tf.header.dirs_size(), 3);
  std::map<uint32_t, uint64_t> bytes;
  uint64_t requests = 0, hits = 0, misses = 0, waits = 0;
  for (const auto& e : tf.events) {
    if (e.kind() == trace::READ_COMPLETED) bytes[e.dir()] += e.bytes();
    requests += e.kind() == trace::REQUEST;
    hits += e.kind() == trace::HIT && e.tier() == trace::HOST;
    misses += e.kind() == trace::MISS && e.tier() == trace::HOST;
    waits += e.kind() == trace::LAYER_WAIT;
  }
  uint64_t total = 0;
  for (const auto& d : r.metrics.drives) {
    EXPECT_EQ(bytes[d.dir], d.bytes) << "directory " << d.dir;
    total += bytes[d.dir];
  }
  EXPECT_GT(total, 0u);
  EXPECT_EQ(total, r.metrics.disk_bytes());
  EXPECT_EQ(requests, r.metrics.requested);
  EXPECT_EQ(hits, r.metrics.host_hits);
  EXPECT_EQ(misses, r.metrics.disk_reads);
  EXPECT_EQ(waits, r.metrics.layer_calls);

  const TraceSummary s = summarize_trace(tf, trace_path.string());
  EXPECT_EQ(s.disk_bytes(), total);
  EXPECT_EQ(s.layers.size(), 5u) << "one wait row per MoE layer";
  ASSERT_FALSE(s.top_experts.empty());
  EXPECT_NE(format_trace_summary(s).find("per drive"), std::string::npos);
  // The cache report replays the engine's policy offline on the trace's own requests: bounded by the
  // offline optimum, and what the run achieved sits near it (same policy, same requests).
  ASSERT_TRUE(s.cache.present);
  EXPECT_EQ(s.cache.policy_replay.requests, s.cache.uses);
  EXPECT_LE(s.cache.policy_replay.rate(), s.cache.bounds.belady.rate());
  EXPECT_NE(format_cache_report(s.cache).find("frequency policy replayed (cold"), std::string::npos);
  const auto svgs = write_trace_svgs(tf, s, (kRoot / "svg").string());
  ASSERT_EQ(svgs.size(), 3u);
  for (auto& p : svgs) {
    std::ifstream f(p);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    EXPECT_EQ(text.rfind("<svg", 0), 0u) << p;
    EXPECT_NE(text.find("</svg>"), std::string::npos) << p;
  }
}

// With the device tier (here on the CPU back-end), the device-cache manager traces every device hit
// and miss, and every upload is traced with the stream it went on.
TEST(StreamingTrace, DeviceTierTracesHitsMissesAndEveryUpload) {
  const fs::path trace_path = kRoot / "device.trace";
  auto o = streaming_options(prepared("one", 1, false), 160);
  o.streaming.min_rows = 1;
  o.streaming.device_tier = true;
  o.streaming.upload_streams = 3;
  o.streaming.trace_path = trace_path.string();
  auto r = generate_run(o);
  expect_same_output(r, reference());
  const TraceFile tf = read_trace_file(trace_path.string());
  uint64_t hits = 0, misses = 0, uploads = 0, upload_bytes = 0, requests = 0;
  std::set<uint32_t> streams;
  for (const auto& e : tf.events) {
    hits += e.kind() == trace::HIT && e.tier() == trace::DEVICE;
    misses += e.kind() == trace::MISS && e.tier() == trace::DEVICE;
    requests += e.kind() == trace::REQUEST;
    if (e.kind() == trace::UPLOAD) {
      ++uploads;
      upload_bytes += e.bytes();
      streams.insert(e.dir());
    }
  }
  EXPECT_GT(hits, 0u);
  EXPECT_EQ(hits, r.metrics.device_hits);
  EXPECT_EQ(misses, r.metrics.device.misses);
  EXPECT_EQ(uploads, r.metrics.uploads);
  EXPECT_EQ(upload_bytes, r.metrics.upload_bytes);
  EXPECT_EQ(requests + hits, r.metrics.requested) << "device hits never reach the layer scheduler";
  EXPECT_EQ(streams, (std::set<uint32_t>{0, 1, 2})) << "uploads go round-robin over the streams";
}
