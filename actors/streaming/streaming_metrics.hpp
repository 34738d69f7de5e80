// What the streaming runtime reports at exit (DESIGN.md "Metrics"): expert bytes per tier and per
// drive, hits per tier, prefetch hit rate, layer wait time. Filled by StreamingExperts::metrics().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "messages/messages.hpp"

namespace ferry {

struct StreamingMetrics {
  std::string engine;           // "io_uring" or "pread-pool"
  bool direct = true;           // O_DIRECT in use
  uint64_t file_bytes = 0;      // bytes per expert read
  uint64_t layer_calls = 0;
  uint64_t requested = 0;       // experts asked for, over all calls
  uint64_t device_hits = 0, host_hits = 0, disk_reads = 0, prefetch_hits = 0, prefetch_issued = 0;
  uint64_t prefetch_wasted = 0;    // prefetched experts the layer's next call did not use
  uint64_t uploads = 0, upload_bytes = 0;  // CUDA: host slot -> device slot copies
  uint64_t demand_disk_bytes = 0;  // bytes read for requests (the rest of the drive bytes is prefetch)
  double layer_wait_s = 0;         // total time layers waited for their last expert
  double max_layer_wait_s = 0;
  std::vector<double> wait_s_by_layer;     // [layer]
  std::vector<uint64_t> calls_by_layer;    // [layer]
  std::vector<std::string> dirs;
  std::vector<dir_stats> drives;           // per directory: reads, bytes, failures, restarts, rate
  tier_stats pool;                 // the host pool's counters
  tier_stats device;               // the device-cache manager's counters (CUDA)
  uint32_t upload_streams = 0;     // 0 = no device tier
  // Verified reads (on by default): xxh64 of every landed read, summed over the hasher threads. The
  // hashing runs beside the reads and compute, so verify_s is CPU time spent, not time added to decode.
  bool verify = false;
  uint32_t verify_threads = 0;
  uint64_t verify_hashes = 0, verify_bytes = 0, verify_mismatches = 0;
  uint64_t verify_in_reader = 0;  // reads verified part by part by the pread workers that copied them
  double verify_s = 0;

  uint64_t disk_bytes() const;  // sum over drives (demand + prefetch)
  uint64_t host_bytes() const { return host_hits * file_bytes; }  // served from the host pool
  uint64_t device_bytes() const { return device_hits * file_bytes; }  // served from the device cache
  double hit_rate(uint64_t hits) const { return requested ? double(hits) / double(requested) : 0.0; }
};

nlohmann::json to_json(const StreamingMetrics& m);
// A few human-readable lines (for stderr at the end of `ferry run`).
std::string format_metrics(const StreamingMetrics& m);

}  // namespace ferry
