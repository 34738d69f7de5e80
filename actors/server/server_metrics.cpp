#include "actors/server/server_metrics.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace ferry {
namespace {

// Prometheus label values escape backslash, double quote and newline.
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string label_key(const MetricLabels& labels) {
  std::string k;
  for (const auto& [n, v] : labels) {
    if (!k.empty()) k += ',';
    k.append(n).append("=").append(v);
  }
  return k;
}

}  // namespace

const char* const kExpertTiers[3] = {"device", "host", "disk"};

void MetricsRegistry::declare(const std::string& name, MetricKind kind, const std::string& help) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    families_.emplace(name, Family{kind, help, {}});
    order_.push_back(name);
  } else if (it->second.kind != kind) {
    throw std::logic_error("metric " + name + " declared twice with different kinds");
  }
}

Metric& MetricsRegistry::ensure(const std::string& name, MetricKind kind, const std::string& help,
                                const MetricLabels& labels) {
  declare(name, kind, help);
  return get(name, labels);
}

Metric& MetricsRegistry::get(const std::string& name, const MetricLabels& labels) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) throw std::logic_error("metric " + name + " used before it was declared");
  for (auto& [l, m] : it->second.series)
    if (l == labels) return *m;
  Metric& m = storage_.emplace_back();
  it->second.series.emplace_back(labels, &m);
  return m;
}

Metric& MetricsRegistry::counter(const std::string& name, const std::string& help, const MetricLabels& labels) {
  return ensure(name, MetricKind::counter, help, labels);
}

Metric& MetricsRegistry::gauge(const std::string& name, const std::string& help, const MetricLabels& labels) {
  return ensure(name, MetricKind::gauge, help, labels);
}

std::string MetricsRegistry::prometheus() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& name : order_) {
    const Family& f = families_.at(name);
    out.append("# HELP ").append(name).append(" ").append(f.help).append("\n");
    out.append("# TYPE ").append(name).append(f.kind == MetricKind::counter ? " counter\n" : " gauge\n");
    for (const auto& [labels, m] : f.series) {
      out += name;
      if (!labels.empty()) {
        out += '{';
        for (size_t i = 0; i < labels.size(); ++i) {
          if (i) out += ',';
          out.append(labels[i].first).append("=\"").append(escape_label(labels[i].second)).append("\"");
        }
        out += '}';
      }
      out.append(" ").append(format_value(m->value())).append("\n");
    }
  }
  return out;
}

nlohmann::json MetricsRegistry::snapshot() const {
  std::lock_guard lock(mu_);
  nlohmann::json j = nlohmann::json::object();
  for (const auto& name : order_) {
    const Family& f = families_.at(name);
    bool labelled = f.series.empty() || !f.series.front().first.empty();
    if (!labelled) {
      j[name] = f.series.front().second->value();
      continue;
    }
    nlohmann::json sub = nlohmann::json::object();
    for (const auto& [labels, m] : f.series) sub[label_key(labels)] = m->value();
    j[name] = std::move(sub);
  }
  return j;
}

EngineMetrics::EngineMetrics(MetricsRegistry& r)
    : registry(r),
      requests(r.counter("ferry_http_requests_total", "HTTP requests answered")),
      request_errors(r.counter("ferry_http_request_errors_total", "HTTP requests answered with status >= 400")),
      rejected_busy(r.counter("ferry_rejected_queue_full_total", "Requests refused with 429 because the queue was full")),
      generations(r.counter("ferry_generations_total", "Generations finished")),
      cancelled(r.counter("ferry_generations_cancelled_total", "Generations stopped because the client disconnected")),
      prompt_tokens(r.counter("ferry_prompt_tokens_total", "Prompt tokens of every generation, cached ones included")),
      prompt_cached_tokens(r.counter("ferry_prompt_cached_tokens_total",
                                     "Prompt tokens the prompt cache held: not passed through the model again")),
      generated_tokens(r.counter("ferry_generated_tokens_total", "Tokens generated")),
      prompt_seconds(r.counter("ferry_prompt_seconds_total", "Time spent in prompt passes (prefill)")),
      decode_seconds(r.counter("ferry_decode_seconds_total", "Time from the end of each prompt pass to its last token")),
      steady_rate(r.gauge("ferry_steady_decode_tokens_per_second",
                          "Steady decode rate of the last generation: (generated-1)/(last-first token time)")),
      live_rate(r.gauge("ferry_live_decode_tokens_per_second", "Decode rate of the generation in progress; 0 when idle")),
      last_prompt_s(r.gauge("ferry_last_prompt_seconds", "Prompt pass duration of the last generation")),
      queue_depth(r.gauge("ferry_queue_depth", "Requests waiting for the engine (not counting the running one)")),
      queue_capacity(r.gauge("ferry_queue_capacity", "Most requests that may wait (--max-queue)")),
      busy(r.gauge("ferry_engine_busy", "1 while a generation runs")),
      layer_wait_seconds(r.counter("ferry_layer_wait_seconds_total", "Time MoE layers waited for their last expert")) {
  r.declare("ferry_expert_hits_total", MetricKind::counter, "Routed-expert lookups served by a tier");
  r.declare("ferry_expert_bytes_read_total", MetricKind::counter, "Routed-expert bytes moved from a tier");
  r.declare("ferry_drive_read_bytes_total", MetricKind::counter, "Expert bytes read per drive (expert directory)");
  r.declare("ferry_drive_reads_total", MetricKind::counter, "Reads per drive; a split read counts one part on each drive");
  r.declare("ferry_drive_rate_bytes_per_second", MetricKind::gauge, "Estimated read rate per drive (EWMA of completions)");
  r.declare("ferry_cache_experts", MetricKind::gauge, "Experts resident in a cache tier, and its capacity");
  r.gauge("ferry_streaming", "1 when routed experts stream from the expert files");
  r.counter("ferry_expert_requests_total", "Routed experts asked for by MoE layer calls");
  r.counter("ferry_expert_reads_total", "Experts read from disk (a split read of a replicated expert counts once)");
  r.counter("ferry_prefetch_issued_total", "Next-layer prefetch reads issued");
  r.counter("ferry_prefetch_hits_total", "Prefetched experts a layer then used");
  r.counter("ferry_prefetch_wasted_total", "Prefetched experts the layer's next call did not use");
  for (const char* t : kExpertTiers) {
    tier_hits(t);
    tier_bytes(t);
  }
  const char* drafter[][2] = {
      {"ferry_drafter_blocks_total", "Verification blocks run"},
      {"ferry_drafter_drafts_total", "Draft tokens proposed"},
      {"ferry_drafter_accepted_total", "Draft tokens accepted"},
      {"ferry_drafter_full_total", "Blocks whose drafts were all accepted"},
      {"ferry_drafter_partial_total", "Blocks with some drafts accepted"},
      {"ferry_drafter_zero_total", "Blocks with no draft accepted"},
      {"ferry_drafter_calls_total", "Drafter calls"},
      {"ferry_drafter_call_seconds_total", "Time in drafter calls"},
      {"ferry_drafter_block_tokens_total", "Tokens emitted by verification blocks"},
      {"ferry_drafter_cost_gated_total", "Plain steps the cost gate chose without asking the drafter"},
  };
  for (auto& d : drafter) r.counter(d[0], d[1]);
}

void EngineMetrics::add_draft(const SpecStats& s) {
  registry.get("ferry_drafter_blocks_total").add(double(s.blocks));
  registry.get("ferry_drafter_drafts_total").add(double(s.drafts));
  registry.get("ferry_drafter_accepted_total").add(double(s.accepted));
  registry.get("ferry_drafter_full_total").add(double(s.full));
  registry.get("ferry_drafter_partial_total").add(double(s.partial));
  registry.get("ferry_drafter_zero_total").add(double(s.zero));
  registry.get("ferry_drafter_calls_total").add(double(s.calls));
  registry.get("ferry_drafter_call_seconds_total").add(s.call_ms / 1e3);
  registry.get("ferry_drafter_block_tokens_total").add(double(s.blk_tokens));
  registry.get("ferry_drafter_cost_gated_total").add(double(s.cost_gated));
}

void EngineMetrics::set_streaming(const StreamingMetrics& m) {
  registry.get("ferry_streaming").set(1);
  registry.get("ferry_expert_requests_total").set(double(m.requested));
  registry.get("ferry_expert_reads_total").set(double(m.disk_reads));
  registry.get("ferry_prefetch_issued_total").set(double(m.prefetch_issued));
  registry.get("ferry_prefetch_hits_total").set(double(m.prefetch_hits));
  registry.get("ferry_prefetch_wasted_total").set(double(m.prefetch_wasted));
  tier_hits("device").set(double(m.device_hits));
  tier_hits("host").set(double(m.host_hits));
  tier_hits("disk").set(double(m.disk_reads));
  tier_bytes("device").set(double(m.device_bytes()));
  tier_bytes("host").set(double(m.host_bytes()));
  tier_bytes("disk").set(double(m.disk_bytes()));
  layer_wait_seconds.set(m.layer_wait_s);
  for (const auto& d : m.drives) {
    const std::string name = d.dir < m.dirs.size() ? m.dirs[d.dir] : std::to_string(d.dir);
    drive_bytes(name).set(double(d.bytes));
    registry.get("ferry_drive_reads_total", {{"drive", name}}).set(double(d.reads));
    registry.get("ferry_drive_rate_bytes_per_second", {{"drive", name}}).set(d.rate_bps);
  }
  registry.get("ferry_cache_experts", {{"tier", "host"}, {"of", "resident"}}).set(m.pool.resident);
  registry.get("ferry_cache_experts", {{"tier", "host"}, {"of", "capacity"}}).set(m.pool.capacity);
  if (m.upload_streams) {
    registry.get("ferry_cache_experts", {{"tier", "device"}, {"of", "resident"}}).set(m.device.resident);
    registry.get("ferry_cache_experts", {{"tier", "device"}, {"of", "capacity"}}).set(m.device.capacity);
  }
}

Metric& EngineMetrics::tier_hits(const std::string& tier) {
  return registry.get("ferry_expert_hits_total", {{"tier", tier}});
}
Metric& EngineMetrics::tier_bytes(const std::string& tier) {
  return registry.get("ferry_expert_bytes_read_total", {{"tier", tier}});
}
Metric& EngineMetrics::drive_bytes(const std::string& drive) {
  return registry.get("ferry_drive_read_bytes_total", {{"drive", drive}});
}

}  // namespace ferry
