// The engine's metrics as a registry: named counters and gauges (with optional labels) that the engine
// and, later, the expert-streaming actors and the drafter bridge update, and that /metrics (Prometheus
// text) and the dashboard (/events, JSON) read. Names follow DESIGN.md "Metrics".
//
// Values are atomics, so updating one is lock-free from any thread; registering a new series takes a
// lock and returns a reference that stays valid for the registry's lifetime.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "actors/streaming/streaming_metrics.hpp"
#include "kernels/decoding/verify.hpp"

namespace ferry {

enum class MetricKind { counter, gauge };

// One time series: a family name plus one label set.
class Metric {
 public:
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  // Declares a family (once; later calls with the same name must agree on the kind) without any series,
  // so Prometheus still lists its HELP/TYPE when nothing has been measured yet (e.g. no drives).
  void declare(const std::string& name, MetricKind kind, const std::string& help);
  // The series `name{labels}`, created at 0 on first use. Throws std::logic_error for an undeclared
  // family or a kind mismatch (a programming error, not bad input).
  Metric& get(const std::string& name, const MetricLabels& labels = {});
  Metric& counter(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Metric& gauge(const std::string& name, const std::string& help, const MetricLabels& labels = {});

  // Prometheus text exposition format 0.0.4.
  std::string prometheus() const;
  // {"name": value} for unlabelled series, {"name": {"label=value,...": value}} for labelled ones.
  nlohmann::json snapshot() const;

 private:
  struct Family {
    MetricKind kind;
    std::string help;
    std::vector<std::pair<MetricLabels, Metric*>> series;  // registration order
  };
  Metric& ensure(const std::string& name, MetricKind kind, const std::string& help, const MetricLabels& labels);

  mutable std::mutex mu_;
  std::vector<std::string> order_;  // family names in declaration order
  std::map<std::string, Family> families_;
  std::deque<Metric> storage_;  // deque: references stay valid as it grows
};

// The series the server and engine know about today, plus the names the streaming and drafter work
// will fill (declared now so dashboards and scrapers see them at zero).
struct EngineMetrics {
  explicit EngineMetrics(MetricsRegistry& r);

  MetricsRegistry& registry;
  Metric& requests;           // HTTP requests answered (any status)
  Metric& request_errors;     // answered with status >= 400
  Metric& rejected_busy;      // 429: queue full
  Metric& generations;        // generations finished (any finish reason)
  Metric& cancelled;          // generations stopped because the client went away
  Metric& prompt_tokens;      // prompt tokens of every generation (cached ones included)
  Metric& prompt_cached_tokens;  // of which the prompt cache held (not passed through the model again)
  Metric& generated_tokens;   // tokens generated
  Metric& prompt_seconds;     // time in prompt passes
  Metric& decode_seconds;     // time from end of prompt pass to last token
  Metric& steady_rate;        // steady decode rate of the last generation (tok/s)
  Metric& live_rate;          // decode rate of the generation in progress (tok/s), 0 when idle
  Metric& last_prompt_s;      // prompt pass of the last generation
  Metric& queue_depth;        // requests waiting (not counting the one running)
  Metric& queue_capacity;
  Metric& busy;               // 1 while a generation runs
  Metric& layer_wait_seconds; // time waiting for the last expert of a layer (streaming; 0 for now)
  // Per tier ("device", "host", "disk"): hits and bytes read.
  Metric& tier_hits(const std::string& tier);
  Metric& tier_bytes(const std::string& tier);
  // Per drive (expert directory): bytes read; the dashboard derives the throughput.
  Metric& drive_bytes(const std::string& drive);

  // Mirrors the streaming runtime's counters (totals since start) into the registry; the meaning of
  // each is the run summary's (docs/USAGE.md "Counters"): an expert read is one per expert fetched from
  // disk, a split read of a replicated expert included; per drive, reads count the parts.
  void set_streaming(const StreamingMetrics& m);
  // Adds one generation's drafter counters (ferry_drafter_*: blocks, drafts, accepted, ...).
  void add_draft(const SpecStats& s);
};

extern const char* const kExpertTiers[3];

}  // namespace ferry
