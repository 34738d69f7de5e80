// What a trace file says about a run: per-layer wait, per-drive bytes and throughput, hit rates per
// tier, most-read experts, and time series for the plots (`ferry trace FILE [--svg DIR]`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/tracing/cache_replay.hpp"
#include "actors/tracing/trace_file.hpp"

namespace ferry {

struct LayerWait {
  uint32_t layer = 0;
  uint64_t calls = 0;
  double total_s = 0, mean_ms = 0, p50_ms = 0, p99_ms = 0, max_ms = 0;
};

struct DriveSummary {
  uint32_t dir = 0;
  std::string path;
  uint64_t reads = 0, bytes = 0, failures = 0, restarts = 0;
  double first_s = 0, last_s = 0;  // first read issued, last read completed (trace time)
  double busy_mb_s = 0;            // bytes / (last - first)
  double mean_read_ms = 0;         // mean service time of one read
};

struct TierSummary {
  uint64_t hits = 0, misses = 0;
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
};

struct ExpertReads {
  uint32_t layer = 0, expert = 0;
  uint64_t reads = 0, bytes = 0;
};

// The run's own requests replayed at its capacities (cache_replay.hpp) beside what the engine got.
struct CacheReport {
  bool present = false;  // the trace has LAYER_CALL/USE events (runs since the frequency policy)
  uint32_t device_slots = 0, host_slots = 0;
  uint64_t calls = 0, uses = 0, device_hits = 0, host_hits = 0;
  CacheBounds bounds;
  // The engine's frequency policy replayed offline on the same requests and capacities (exclusive
  // tiers): with a prior (ferry trace --usage), seeded and warm-started as the run was; else cold.
  ReplayHits policy_replay;
  bool replay_has_prior = false;
  double achieved() const { return uses ? double(device_hits + host_hits) / double(uses) : 0.0; }
};

struct TraceSummary {
  std::string path;
  std::vector<std::string> dirs;
  uint64_t events = 0;
  double span_s = 0;
  uint64_t requests = 0, prefetches = 0, admissions = 0, refusals = 0, evictions = 0, uploads = 0;
  // Prefetch reads (PREFETCH events) whose expert the layer's next call (LAYER_CALL / USE) then used,
  // and the bytes of those it did not use.
  uint64_t prefetch_used = 0, prefetch_wasted_bytes = 0;
  std::map<uint32_t, TierSummary> tiers;  // by trace.proto Tier number
  std::vector<LayerWait> layers;
  std::vector<DriveSummary> drives;
  std::vector<ExpertReads> top_experts;    // most bytes read first
  std::vector<double> waits_ms;            // every LAYER_WAIT, in order
  // Reads of every drive together: bytes over the time at least one read was being serviced.
  double read_active_s = 0, read_active_mb_s = 0;
  CacheReport cache;
  uint64_t disk_bytes() const;
};

// prior: the usage counts the run's caches were seeded with (for the policy replay); null = replay cold.
TraceSummary summarize_trace(const TraceFile& tf, const std::string& path, size_t top_n = 10,
                             std::shared_ptr<const ExpertPrior> prior = nullptr);
std::string format_trace_summary(const TraceSummary& s);
std::string format_cache_report(const CacheReport& c);

// Writes drive_throughput.svg, layer_wait.svg and hit_rate.svg into out_dir (created). Returns the
// paths. Throws ferry::Error naming a file that cannot be written.
std::vector<std::string> write_trace_svgs(const TraceFile& tf, const TraceSummary& s, const std::string& out_dir);

}  // namespace ferry
