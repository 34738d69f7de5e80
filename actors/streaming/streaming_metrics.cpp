#include "actors/streaming/streaming_metrics.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ferry {

uint64_t StreamingMetrics::disk_bytes() const {
  uint64_t n = 0;
  for (auto& d : drives) n += d.bytes;
  return n;
}

nlohmann::json to_json(const StreamingMetrics& m) {
  nlohmann::json j;
  j["engine"] = m.engine;
  j["o_direct"] = m.direct;
  j["expert_file_bytes"] = m.file_bytes;
  j["layer_calls"] = m.layer_calls;
  j["experts_requested"] = m.requested;
  j["hits"] = {{"device", m.device_hits}, {"host", m.host_hits}, {"prefetch", m.prefetch_hits}};
  j["hit_rate"] = {{"device", m.hit_rate(m.device_hits)}, {"host", m.hit_rate(m.host_hits)}};
  j["disk_reads"] = m.disk_reads;
  j["bytes"] = {{"device", m.device_bytes()}, {"host", m.host_bytes()}, {"disk", m.disk_bytes()},
                {"disk_demand", m.demand_disk_bytes}, {"upload", m.upload_bytes}};
  j["uploads"] = m.uploads;
  j["prefetch"] = {{"issued", m.prefetch_issued}, {"hits", m.prefetch_hits},
                   {"hit_rate", m.prefetch_issued ? double(m.prefetch_hits) / double(m.prefetch_issued) : 0.0},
                   {"wasted", m.prefetch_wasted}, {"wasted_bytes", m.prefetch_wasted * m.file_bytes}};
  j["verify_reads"] = {{"on", m.verify}, {"threads", m.verify_threads}, {"hashes", m.verify_hashes},
                       {"bytes", m.verify_bytes}, {"hash_s", m.verify_s}, {"mismatches", m.verify_mismatches},
                       {"in_reader", m.verify_in_reader}};
  j["layer_wait_s"] = m.layer_wait_s;
  j["max_layer_wait_s"] = m.max_layer_wait_s;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < m.calls_by_layer.size(); ++l)
    if (m.calls_by_layer[l]) layers.push_back({{"layer", l}, {"calls", m.calls_by_layer[l]}, {"wait_s", m.wait_s_by_layer[l]}});
  j["layers"] = layers;
  nlohmann::json drives = nlohmann::json::array();
  for (auto& d : m.drives)
    drives.push_back({{"dir", d.dir < m.dirs.size() ? m.dirs[d.dir] : std::to_string(d.dir)},
                      {"reads", d.reads},
                      {"bytes", d.bytes},
                      {"failures", d.failures},
                      {"restarts", d.restarts},
                      {"rate_bps", d.rate_bps}});
  j["drives"] = drives;
  j["host_pool"] = {{"capacity", m.pool.capacity}, {"resident", m.pool.resident}, {"scratch", m.pool.scratch},
                    {"admissions", m.pool.admissions}, {"refusals", m.pool.refusals},
                    {"evictions", m.pool.evictions}};
  if (m.upload_streams)
    j["device_cache"] = {{"capacity", m.device.capacity}, {"resident", m.device.resident},
                         {"scratch", m.device.scratch}, {"hits", m.device.hits}, {"misses", m.device.misses},
                         {"admissions", m.device.admissions}, {"refusals", m.device.refusals},
                         {"evictions", m.device.evictions}, {"upload_streams", m.upload_streams}};
  return j;
}

std::string format_metrics(const StreamingMetrics& m) {
  constexpr double MB = 1e6;
  std::string s = fmt::format(
      "ferry: experts {} requested in {} layer calls | device hits {} ({:.1f}%) | host hits {} ({:.1f}%) | expert "
      "reads from disk {} | uploads {} ({:.1f} MB) | prefetch {} issued, {} hits, {} wasted ({:.1f} MB)\n",
      m.requested, m.layer_calls, m.device_hits, 100 * m.hit_rate(m.device_hits), m.host_hits,
      100 * m.hit_rate(m.host_hits), m.disk_reads, m.uploads, double(m.upload_bytes) / 1e6, m.prefetch_issued,
      m.prefetch_hits, m.prefetch_wasted, double(m.prefetch_wasted * m.file_bytes) / MB);
  s += fmt::format("ferry: expert bytes: host {:.1f} MB, disk {:.1f} MB ({} engine{}) | layer wait {:.3f} s (max {:.2f} ms)\n",
                   double(m.host_bytes()) / MB, double(m.disk_bytes()) / MB, m.engine, m.direct ? ", O_DIRECT" : "",
                   m.layer_wait_s, m.max_layer_wait_s * 1e3);
  if (m.verify)
    s += fmt::format("ferry: verified reads: {} checked part by part by the readers, {} hashed ({:.1f} MB) on {} "
                     "threads in {:.3f} s ({:.0f} MB/s), {} mismatches\n",
                     m.verify_in_reader, m.verify_hashes, double(m.verify_bytes) / MB, m.verify_threads, m.verify_s,
                     m.verify_s > 0 ? double(m.verify_bytes) / MB / m.verify_s : 0.0, m.verify_mismatches);
  else
    s += "ferry: reads NOT verified (--no-verify-reads)\n";
  for (auto& d : m.drives)
    s += fmt::format("ferry:   drive {}: {} reads (parts), {:.1f} MB, {} failures, {} restarts, est. {:.0f} MB/s\n",
                     d.dir < m.dirs.size() ? m.dirs[d.dir] : std::to_string(d.dir), d.reads, double(d.bytes) / MB,
                     d.failures, d.restarts, d.rate_bps / MB);
  s += fmt::format("ferry: host pool {} of {} slots used (+{} scratch) | admissions {}, refusals {}, evictions {}\n",
                   m.pool.resident, m.pool.capacity, m.pool.scratch, m.pool.admissions, m.pool.refusals,
                   m.pool.evictions);
  if (m.upload_streams)
    s += fmt::format("ferry: device cache {} of {} slots used (+{} scratch, {} upload streams) | admissions {}, "
                     "refusals {}, evictions {}\n",
                     m.device.resident, m.device.capacity, m.device.scratch, m.upload_streams, m.device.admissions,
                     m.device.refusals, m.device.evictions);
  return s;
}

}  // namespace ferry
