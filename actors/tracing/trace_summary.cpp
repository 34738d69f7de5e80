#include "actors/tracing/trace_summary.hpp"

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace ferry {

namespace {

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * double(v.size() - 1) + 0.5))];
}

DriveSummary& drive(TraceSummary& s, uint32_t d) {
  while (s.drives.size() <= d) {
    DriveSummary x;
    x.dir = static_cast<uint32_t>(s.drives.size());
    x.path = x.dir < s.dirs.size() ? s.dirs[x.dir] : std::to_string(x.dir);
    x.first_s = -1;
    s.drives.push_back(x);
  }
  return s.drives[d];
}

void summarize_layers(TraceSummary& s, const std::map<uint32_t, std::vector<double>>& waits) {
  for (auto& [layer, w] : waits) {
    LayerWait lw;
    lw.layer = layer;
    lw.calls = w.size();
    for (double x : w) lw.total_s += x / 1e3;
    lw.mean_ms = lw.total_s * 1e3 / double(w.size());
    lw.p50_ms = pct(w, 0.5);
    lw.p99_ms = pct(w, 0.99);
    lw.max_ms = *std::max_element(w.begin(), w.end());
    s.layers.push_back(lw);
  }
}

// Length of the union of [start, end] intervals.
double union_length(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0, lo = 0, hi = -1;
  for (const auto& [a, b] : v) {
    if (a > hi) {
      if (hi > lo) total += hi - lo;
      lo = a;
      hi = b;
    } else {
      hi = std::max(hi, b);
    }
  }
  if (hi > lo) total += hi - lo;
  return total;
}

// The model's layer calls (LAYER_CALL, then one USE per expert) in order.
std::vector<LayerCall> layer_calls(const TraceFile& tf) {
  std::vector<LayerCall> calls;
  std::vector<uint64_t> ids;
  for (const auto& e : tf.events) {
    if (e.kind() == trace::LAYER_CALL) {
      calls.push_back({e.layer(), std::max(e.rows(), 1u), {}});
      ids.push_back(e.request_id());
    } else if (e.kind() == trace::USE) {
      for (size_t i = calls.size(); i-- > 0;)
        if (ids[i] == e.request_id() && calls[i].layer == e.layer()) {
          calls[i].uses.push_back({{e.layer(), e.expert()}, std::max(e.rows(), 1u)});
          break;
        }
    }
  }
  return calls;
}

CacheReport cache_report(const TraceFile& tf, const TraceSummary& s, const std::shared_ptr<const ExpertPrior>& prior) {
  CacheReport r;
  const auto calls = layer_calls(tf);
  if (calls.empty()) return r;
  r.present = true;
  r.device_slots = tf.header.device_slots();
  r.host_slots = tf.header.host_slots();
  r.calls = calls.size();
  r.uses = count_requests(calls);
  if (auto it = s.tiers.find(trace::DEVICE); it != s.tiers.end()) r.device_hits = it->second.hits;
  if (auto it = s.tiers.find(trace::HOST); it != s.tiers.end()) r.host_hits = it->second.hits;
  r.bounds = cache_bounds(calls, uint64_t(r.device_slots) + r.host_slots, nullptr);
  CacheConfig cc{.policy = CachePolicy::frequency};
  cc.heat.prior = prior;
  r.replay_has_prior = prior != nullptr;
  r.policy_replay = replay_tiers(calls, {r.device_slots, r.host_slots, cc, true, r.replay_has_prior});
  return r;
}

}  // namespace

uint64_t TraceSummary::disk_bytes() const {
  uint64_t n = 0;
  for (auto& d : drives) n += d.bytes;
  return n;
}

TraceSummary summarize_trace(const TraceFile& tf, const std::string& path, size_t top_n,
                             std::shared_ptr<const ExpertPrior> prior) {
  TraceSummary s;
  s.path = path;
  s.dirs.assign(tf.header.dirs().begin(), tf.header.dirs().end());
  s.events = tf.events.size();
  std::map<uint32_t, std::vector<double>> waits;
  std::unordered_map<uint64_t, ExpertReads> per_expert;
  std::vector<double> service_ms_sum;
  std::vector<std::pair<double, double>> reading;  // [start, end] of every read's service
  std::map<uint32_t, std::vector<std::pair<double, uint64_t>>> calls_of_layer;  // layer -> (time, call)
  std::unordered_map<uint64_t, std::unordered_set<uint32_t>> used_by_call;       // call -> experts it used
  std::vector<const trace::Event*> prefetch_events;
  for (const auto& e : tf.events) {
    const double t = double(e.t_ns()) * 1e-9;
    s.span_s = std::max(s.span_s, t);
    switch (e.kind()) {
      case trace::REQUEST: ++s.requests; break;
      case trace::HIT: ++s.tiers[e.tier()].hits; break;
      case trace::MISS: {
        ++s.tiers[e.tier()].misses;
        // An expert read counts once per expert (a split read of a replicated expert is one read in two
        // parts; the drives count the parts).
        if (e.tier() == trace::HOST) {  // a host-pool miss is the read from disk
          auto& x = per_expert[(uint64_t{e.layer()} << 32) | e.expert()];
          x.layer = e.layer();
          x.expert = e.expert();
          ++x.reads;
        }
        break;
      }
      case trace::PREFETCH:
        ++s.prefetches;
        prefetch_events.push_back(&e);
        break;
      case trace::LAYER_CALL: calls_of_layer[e.layer()].push_back({t, e.request_id()}); break;
      case trace::USE: used_by_call[e.request_id()].insert(e.expert()); break;
      case trace::ADMISSION: e.detail() == "refused" ? ++s.refusals : ++s.admissions; break;
      case trace::EVICTION: ++s.evictions; break;
      case trace::UPLOAD: ++s.uploads; break;
      case trace::READ_ISSUED: {
        auto& d = drive(s, e.dir());
        if (d.first_s < 0) d.first_s = t;
        break;
      }
      case trace::READ_COMPLETED: {
        auto& d = drive(s, e.dir());
        ++d.reads;
        d.bytes += e.bytes();
        d.last_s = std::max(d.last_s, t);
        d.mean_read_ms += double(e.dur_ns()) * 1e-6;  // summed here, divided below
        reading.push_back({t - double(e.dur_ns()) * 1e-9, t});
        auto& x = per_expert[(uint64_t{e.layer()} << 32) | e.expert()];
        x.layer = e.layer();
        x.expert = e.expert();
        x.bytes += e.bytes();
        break;
      }
      case trace::READ_FAILED: ++drive(s, e.dir()).failures; break;
      case trace::READER_RESTART: ++drive(s, e.dir()).restarts; break;
      case trace::LAYER_WAIT: {
        const double ms = double(e.dur_ns()) * 1e-6;
        waits[e.layer()].push_back(ms);
        s.waits_ms.push_back(ms);
        break;
      }
      default: break;
    }
  }
  for (auto& d : s.drives) {
    if (d.first_s < 0) d.first_s = 0;
    if (d.reads) d.mean_read_ms /= double(d.reads);
    if (d.last_s > d.first_s) d.busy_mb_s = double(d.bytes) / (d.last_s - d.first_s) / 1e6;
  }
  // A prefetch was used when the first call of its layer after it asked for its expert.
  for (const trace::Event* p : prefetch_events) {
    const auto& calls = calls_of_layer[p->layer()];
    const double t = double(p->t_ns()) * 1e-9;
    auto next = std::lower_bound(calls.begin(), calls.end(), std::make_pair(t, uint64_t{0}));
    if (next != calls.end() && used_by_call[next->second].count(p->expert()))
      ++s.prefetch_used;
    else
      s.prefetch_wasted_bytes += p->bytes();
  }
  summarize_layers(s, waits);
  s.read_active_s = union_length(std::move(reading));
  if (s.read_active_s > 0) s.read_active_mb_s = double(s.disk_bytes()) / s.read_active_s / 1e6;
  s.cache = cache_report(tf, s, prior);
  for (auto& [k, x] : per_expert) s.top_experts.push_back(x);
  std::sort(s.top_experts.begin(), s.top_experts.end(), [](const ExpertReads& a, const ExpertReads& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : std::tie(a.layer, a.expert) < std::tie(b.layer, b.expert);
  });
  if (s.top_experts.size() > top_n) s.top_experts.resize(top_n);
  return s;
}

std::string format_cache_report(const CacheReport& c) {
  if (!c.present) return "cache vs offline bounds: no LAYER_CALL events in this trace\n";
  const auto& b = c.bounds;
  auto line = [&](const char* what, double rate) {
    return fmt::format("  {:<44} {:6.2f}%  ({:.3f} of the best static set)\n", what, 100 * rate,
                       b.best_static.rate() > 0 ? rate / b.best_static.rate() : 0.0);
  };
  std::string o = fmt::format(
      "cache vs offline bounds ({} layer calls, {} expert requests; capacity {} = device {} + host {} experts):\n",
      c.calls, c.uses, b.capacity, c.device_slots, c.host_slots);
  o += line(fmt::format("achieved (device {} + host {} hits)", c.device_hits, c.host_hits).c_str(), c.achieved());
  o += line("best static set in hindsight", b.best_static.rate());
  o += line("offline optimum (Belady, with bypass)", b.belady.rate());
  o += line("LRU", b.lru.rate());
  o += line(c.replay_has_prior ? "frequency policy replayed (usage prior, warm)" : "frequency policy replayed (cold; --usage)",
            c.policy_replay.rate());
  return o;
}

std::string format_trace_summary(const TraceSummary& s) {
  std::string o = fmt::format("trace {}: {} events over {:.3f} s; {} expert requests, {} prefetches\n", s.path,
                              s.events, s.span_s, s.requests, s.prefetches);
  if (s.prefetches)
    o += fmt::format("prefetch reads: {}; used by their layer's next call: {} ({:.1f}%); not used: {} ({:.2f} MB)\n",
                     s.prefetches, s.prefetch_used, 100.0 * double(s.prefetch_used) / double(s.prefetches),
                     s.prefetches - s.prefetch_used, double(s.prefetch_wasted_bytes) / 1e6);
  o += "hit rates per tier:\n";
  static const char* names[] = {"?", "device", "host", "disk"};
  for (auto& [t, x] : s.tiers)
    o += fmt::format("  {:<7} {:>8} hits {:>8} misses  {:6.1f}%\n", t < 4 ? names[t] : "?", x.hits, x.misses,
                     100 * x.hit_rate());
  o += fmt::format("  admissions {}, refused {}, evictions {}, uploads {}\n", s.admissions, s.refusals, s.evictions,
                   s.uploads);
  const auto host = s.tiers.find(trace::HOST);
  o += fmt::format("expert reads from disk: {} (host-pool misses; a split read counts once, the drives count its "
                   "parts)\n", host == s.tiers.end() ? 0 : host->second.misses);
  o += "per drive (reads = parts):\n";
  for (auto& d : s.drives)
    o += fmt::format("  [{}] {}: {} reads, {:.2f} MB, {:.1f} MB/s while active, mean read {:.3f} ms, {} failures, {} "
                     "restarts\n",
                     d.dir, d.path, d.reads, double(d.bytes) / 1e6, d.busy_mb_s, d.mean_read_ms, d.failures, d.restarts);
  o += fmt::format("  all drives: {:.2f} MB in {:.3f} s with a read in flight: {:.1f} MB/s aggregate while reading\n",
                   double(s.disk_bytes()) / 1e6, s.read_active_s, s.read_active_mb_s);
  o += format_cache_report(s.cache);
  o += "layer wait (time waiting for the last expert):\n";
  for (auto& l : s.layers)
    o += fmt::format("  layer {:>3}: {:>6} calls, total {:.3f} s, mean {:.3f} ms, p50 {:.3f} ms, p99 {:.3f} ms, max "
                     "{:.3f} ms\n",
                     l.layer, l.calls, l.total_s, l.mean_ms, l.p50_ms, l.p99_ms, l.max_ms);
  o += "most-read experts:\n";
  for (auto& x : s.top_experts)
    o += fmt::format("  L{}-E{}: {} reads, {:.2f} MB\n", x.layer, x.expert, x.reads, double(x.bytes) / 1e6);
  return o;
}

}  // namespace ferry
