#include "actors/streaming/streaming_experts.hpp"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/streaming/cache_policy.hpp"
#include "actors/streaming/compute_tier.hpp"
#include "actors/streaming/device_cache.hpp"
#include "actors/streaming/device_tier.hpp"
#include "actors/streaming/expert_catalog.hpp"
#include "actors/streaming/host_pool.hpp"
#include "actors/streaming/layer_scheduler.hpp"
#include "actors/readers/reader_supervisor.hpp"
#include "actors/tracing/tracer_actor.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/read_engine/pinned_arena.hpp"
#include "messages/trace.pb.h"

namespace ferry {

struct StreamingExperts::Impl {
  ModelConfig cfg;
  StreamingOptions opt;
  std::shared_ptr<const ExpertCatalog> catalog;
  std::unique_ptr<HostComputeTier> host_tier;  // no device: compute reads the host slots
  std::unique_ptr<DeviceTier> dev;             // device slots and upload queues (CUDA)
  device_cache_actor dcache;                   // the device-cache manager (with dev)
  caf::actor_system_config sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<caf::scoped_actor> self;  // the calling thread's mailbox: the expert sink
  std::shared_ptr<io::PinnedArena> arena;
  read_service_actor reads;
  host_pool_actor pool;
  tracer_actor tracer;
  std::vector<layer_scheduler_actor> scheds;      // [layer], empty handle for dense layers
  std::vector<std::vector<uint32_t>> last_used;   // [layer]: the last call's experts
  std::vector<std::vector<uint64_t>> uses;        // [layer][expert]: rows routed to it so far
  UsageCounts usage;                              // usage_path's counts at the start (empty without)
  StreamingMetrics m;
  std::mutex m_mu;  // m: written by the model thread after each call, read by metrics() from any thread
  uint64_t calls = 0;
  std::string failed;  // non-empty once an error ended generation

  int next_moe_layer(int layer) const {
    for (int l = layer + 1; l < cfg.n_layers; ++l)
      if (scheds[size_t(l)]) return l;
    return -1;
  }
};

namespace {

uint32_t cache_slots(const StreamingOptions& o, const ExpertCatalog& c) {
  uint64_t n = o.cache_experts;
  n = std::max(n, o.cache_bytes / c.file_bytes);
  n = std::max(n, o.host_pool_bytes / c.file_bytes);
  return static_cast<uint32_t>(std::min<uint64_t>(n, uint64_t{c.n_layers} * c.n_experts));
}

// The next layer's likely experts: the most-used so far, leaving out those its last call used (they
// were admitted then and are probably still resident, so reading them again would be wasted).
std::vector<uint32_t> prefetch_guess(const std::vector<uint64_t>& counts, const std::vector<uint32_t>& recent,
                                     uint32_t n) {
  std::vector<uint32_t> order;
  for (uint32_t e = 0; e < counts.size(); ++e)
    if (counts[e] > 0 && std::find(recent.begin(), recent.end(), e) == recent.end()) order.push_back(e);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return counts[a] > counts[b]; });
  if (order.size() > n) order.resize(n);
  return order;
}

HeatConfig heat_config(const StreamingOptions& o, const ModelConfig& cfg, UsageCounts& usage) {
  HeatConfig h;
  h.half_life = o.heat_half_life;
  if (o.usage_path.empty() || !std::filesystem::exists(o.usage_path)) return h;
  try {
    usage = load_usage(o.usage_path);
  } catch (const Error& e) {  // a damaged file costs warmth, not the run; it is rewritten at the end
    spdlog::warn("expert usage: {}; starting cold", e.what());
    return h;
  }
  h.prior = std::make_shared<const ExpertPrior>(
      prior_from_usage(usage, uint32_t(cfg.n_layers), uint32_t(cfg.moe.n_experts), o.prior_mass));
  spdlog::info("expert usage: {} counts from {} seed the caches ({} row-uses per layer)", usage.size(), o.usage_path,
               o.prior_mass);
  return h;
}

// Adds the run's counts to the usage file. Never throws: a read-only store keeps its old counts.
void save_usage(const StreamingOptions& o, const UsageCounts& old, const std::vector<std::vector<uint64_t>>& run) {
  if (!o.learn_usage || o.usage_path.empty()) return;
  try {
    write_usage(o.usage_path, merge_usage(old, run, o.usage_half_life));
  } catch (const std::exception& e) {
    spdlog::warn("expert usage: not saved: {}", e.what());
  }
}

}  // namespace

StreamingExperts::StreamingExperts(const ModelConfig& cfg, const Manifest& manifest, StreamingOptions opt)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.cfg = cfg;
  s.opt = std::move(opt);
  s.catalog = std::make_shared<const ExpertCatalog>(make_catalog(manifest, s.opt.expert_dirs));
  const ExpertGeometry geo = expert_geometry(cfg);
  if (geo.payload_bytes() != s.catalog->expert_bytes)
    throw FormatError(fmt::format("manifest.json: expert_bytes {} but the model config makes experts of {} bytes",
                                  s.catalog->expert_bytes, geo.payload_bytes()));
  const uint32_t dev_cache = static_cast<uint32_t>(
      std::min<uint64_t>(s.opt.device_cache_experts, uint64_t{s.catalog->n_layers} * s.catalog->n_experts));
  const uint32_t dev_scratch = s.opt.device_scratch ? s.opt.device_scratch : 2 * std::max<uint32_t>(1, s.opt.upload_streams);
  if (s.opt.device)
    s.dev = std::make_unique<DeviceTier>(geo, *s.opt.device, dev_cache + dev_scratch, s.opt.upload_streams);
  else
    s.host_tier = std::make_unique<HostComputeTier>(geo);
  const uint32_t top_k = static_cast<uint32_t>(cfg.moe.top_k);
  const uint32_t cache = cache_slots(s.opt, *s.catalog);
  const uint32_t scratch = s.opt.stream_slots ? s.opt.stream_slots : std::max<uint32_t>(8, 2 * top_k);
  s.arena = std::make_shared<io::PinnedArena>(size_t{cache} + scratch, s.catalog->file_bytes);
  // Uploads from page-locked memory run at the bus's full rate (~55 GB/s vs ~9 GB/s pageable).
  if (s.opt.device) s.opt.device->register_host(s.arena->base(), s.arena->bytes());
  register_ferry_types(s.sys_cfg);
  s.sys = std::make_unique<caf::actor_system>(s.sys_cfg);
  if (!s.opt.trace_path.empty())
    s.tracer = spawn_tracer(*s.sys, s.opt.trace_path, s.catalog->dirs,
                            {s.opt.device ? dev_cache : 0, cache, s.catalog->file_bytes});
  const HeatConfig heat = heat_config(s.opt, cfg, s.usage);

  ReadServiceConfig rc;
  rc.dirs = s.catalog->dirs;
  rc.arena = s.arena;
  rc.engine = s.opt.engine;
  rc.engine_cfg = s.opt.engine_cfg;
  rc.read_timeout = s.opt.read_timeout;
  rc.tracer = s.tracer;
  s.reads = spawn_read_service(*s.sys, rc);

  HostPoolConfig pc;
  pc.cache_slots = cache;
  pc.scratch_slots = scratch;
  pc.expert_bytes = s.catalog->file_bytes;
  pc.policy = s.opt.policy;
  pc.min_rows = s.opt.min_rows;
  pc.heat = heat;
  pc.tracer = s.tracer;
  s.pool = spawn_host_pool(*s.sys, pc);
  if (s.dev) {
    DeviceCacheConfig dc;
    dc.cache_slots = dev_cache;
    dc.scratch_slots = dev_scratch;
    dc.expert_bytes = s.catalog->file_bytes;
    dc.policy = s.opt.policy;
    dc.min_rows = s.opt.min_rows;
    dc.heat = heat;
    dc.tracer = s.tracer;
    s.dcache = spawn_device_cache(*s.sys, dc);
    spdlog::info("device cache: {} cached + {} scratch slots, {} upload streams", dev_cache, dev_scratch,
                 s.opt.upload_streams);
  }

  // Warm start: the host pool's share of the hottest experts, per layer.
  std::vector<std::vector<uint32_t>> warm(size_t(cfg.n_layers));
  if (s.opt.warm_start && heat.prior && s.opt.policy == CachePolicy::frequency)
    for (const auto& k : hottest(*heat.prior, cache))
      if (k.layer < warm.size()) warm[k.layer].push_back(k.expert);
  s.scheds.resize(size_t(cfg.n_layers));
  s.last_used.resize(size_t(cfg.n_layers));
  s.uses.assign(size_t(cfg.n_layers), std::vector<uint64_t>(size_t(cfg.moe.n_experts), 0));
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (cfg.ffn[size_t(l)] != Ffn::moe) continue;
    LayerSchedulerConfig lc;
    lc.layer = uint32_t(l);
    lc.catalog = s.catalog;
    lc.arena = s.arena;
    lc.reads = s.reads;
    lc.pool = s.pool;
    lc.tracer = s.tracer;
    lc.verify_reads = s.opt.verify_reads;
    lc.split_reads = s.opt.split_reads;
    lc.prefetch_max = s.opt.prefetch;
    lc.warm = std::move(warm[size_t(l)]);
    // A request to the read service may try every copy, each within read_timeout.
    lc.timeout = s.opt.read_timeout * 8 + s.opt.layer_timeout;
    s.scheds[size_t(l)] = spawn_layer_scheduler(*s.sys, lc);
  }
  s.self = std::make_unique<caf::scoped_actor>(*s.sys);
  s.m.file_bytes = s.catalog->file_bytes;
  s.m.dirs = s.catalog->dirs;
  s.m.wait_s_by_layer.assign(size_t(cfg.n_layers), 0.0);
  s.m.calls_by_layer.assign(size_t(cfg.n_layers), 0);
  spdlog::info("streaming experts: {} directories, host pool {} cached + {} scratch slots of {} bytes ({}), prefetch {}",
               s.catalog->dirs.size(), cache, scratch, s.catalog->file_bytes,
               s.opt.policy == CachePolicy::lru         ? std::string("LRU")
               : s.opt.policy == CachePolicy::frequency ? std::string("frequency")
                                                        : fmt::format("block-aware, min_rows {}", s.opt.min_rows),
               s.opt.prefetch);
}

StreamingExperts::~StreamingExperts() {
  Impl& s = *impl_;
  if (s.calls > 0 && s.failed.empty()) save_usage(s.opt, s.usage, s.uses);
  if (s.tracer) flush_trace();
  for (auto& h : s.scheds)
    if (h) caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(s.pool, caf::exit_reason::user_shutdown);
  if (s.dcache) caf::anon_send_exit(s.dcache, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(s.reads, caf::exit_reason::user_shutdown);
  if (s.tracer) caf::anon_send_exit(s.tracer, caf::exit_reason::user_shutdown);
  s.self.reset();
  s.dev.reset();  // waits for its uploads (they read the arena), frees the device slots
  if (s.opt.device) s.opt.device->unregister_host(s.arena->base());
  s.scheds.clear();
  s.dcache = nullptr;
  s.reads = nullptr;
  s.pool = nullptr;
  s.tracer = nullptr;
  s.sys.reset();  // waits for every actor (readers drain their rings first)
}

caf::actor_system& StreamingExperts::system() { return *impl_->sys; }
read_service_actor StreamingExperts::read_service() const { return impl_->reads; }

// One MoE layer call. With a device tier: one plan from the device-cache manager classifies every
// expert; the device hits compute at once as one batch; the rest go to the layer scheduler, and each
// arrival is uploaded on the next upload queue and its compute queued behind that upload (the host does
// not wait for the copy). A host slot goes back to the host pool once its upload has completed, polled
// while waiting for arrivals; the call ends after every upload is done and the manager is told so.
void StreamingExperts::fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) {
  Impl& s = *impl_;
  if (!s.failed.empty()) throw Error("streaming experts stopped after an earlier error: " + s.failed);
  if (layer < 0 || layer >= s.cfg.n_layers || !s.scheds[size_t(layer)])
    throw LimitError(fmt::format("streaming experts: layer {} is not a MoE layer", layer));
  auto& self = *s.self;
  layer_request req;
  req.step = ++s.calls;
  req.layer = uint32_t(layer);
  uint32_t block_rows = 0;
  for (const auto& u : uses)
    for (int32_t r : u.rows) block_rows = std::max(block_rows, uint32_t(r) + 1);

  // The device plan: hits compute now, in one batch; misses know their device slot.
  trace_call(req.step, uint32_t(layer), std::max<uint32_t>(block_rows, 1), uses);
  std::vector<uint32_t> dslot(uses.size(), 0);
  std::vector<bool> dkeep(uses.size(), false);  // the device cache admitted it
  std::vector<size_t> hit_idx;
  std::vector<ExpertWeights> hit_w;
  if (s.dev) {
    device_request dr{req.step, req.layer, std::max<uint32_t>(block_rows, 1), {}, {}};
    for (const auto& u : uses) {
      dr.experts.push_back(uint32_t(u.expert));
      dr.rows.push_back(uint32_t(u.rows.size()));
    }
    device_plan plan;
    std::string error;
    self->request(s.dcache, std::chrono::seconds(30), plan_atom_v, std::move(dr))
        .receive([&](device_plan& p) { plan = std::move(p); }, [&](caf::error& e) { error = s.sys->render(e); });
    if (!error.empty() || plan.places.size() != uses.size()) {
      s.failed = "device cache: " + (error.empty() ? std::string("malformed plan") : error);
      throw Error("streaming experts: " + s.failed);
    }
    for (size_t i = 0; i < uses.size(); ++i) {
      dslot[i] = plan.places[i].slot;
      dkeep[i] = plan.places[i].admitted;
      if (plan.places[i].hit) {
        hit_idx.push_back(i);
        hit_w.push_back(s.dev->at(dslot[i]));
      }
    }
  }
  std::unordered_map<uint32_t, size_t> index;
  size_t next_hit = 0;
  for (size_t i = 0; i < uses.size(); ++i) {
    if (next_hit < hit_idx.size() && hit_idx[next_hit] == i) {
      ++next_hit;
      continue;
    }
    expert_use u;
    u.expert = uint32_t(uses[i].expert);
    u.device_keeps = dkeep[i] && s.opt.policy == CachePolicy::frequency;  // exclusive tiers
    for (int32_t r : uses[i].rows) {
      u.rows.push_back(uint32_t(r));
      req.block_rows = std::max(req.block_rows, uint32_t(r) + 1);
    }
    index[u.expert] = i;
    req.experts.push_back(std::move(u));
  }
  if (!req.experts.empty())
    self->send(s.scheds[size_t(layer)], schedule_atom_v, req, caf::actor_cast<expert_sink_actor>(self));
  if (!hit_idx.empty()) {  // device hits: no read, no upload; computed while the reads run
    compute(hit_idx, hit_w);
    for (size_t i : hit_idx) s.dev->computed(dslot[i]);
  }
  size_t computed = hit_idx.size();
  if (int next = s.next_moe_layer(layer); next >= 0 && s.opt.prefetch > 0 && !req.experts.empty()) {
    auto guess = prefetch_guess(s.uses[size_t(next)], s.last_used[size_t(next)], s.opt.prefetch);
    if (!guess.empty()) self->send(s.scheds[size_t(next)], prefetch_atom_v, uint32_t(next), std::move(guess));
  }
  s.last_used[size_t(layer)].clear();
  for (const auto& u : uses) {
    s.last_used[size_t(layer)].push_back(uint32_t(u.expert));
    s.uses[size_t(layer)][size_t(u.expert)] += u.rows.size();
  }
  if (s.opt.after_schedule && !req.experts.empty()) s.opt.after_schedule(uint32_t(layer), req.step);

  // Host slots whose bytes are being uploaded: released to the host pool once the upload is done.
  struct Pending {
    expert_key key;
    uint32_t slot;
  };
  std::vector<Pending> pending;
  auto release_uploaded = [&](bool wait) {
    size_t kept = 0;
    for (const Pending& p : pending) {
      if (wait) s.dev->wait_uploaded(p.slot);
      if (wait || s.dev->uploaded(p.slot))
        self->send(s.pool, release_atom_v, p.key, true);
      else
        pending[kept++] = p;
    }
    pending.resize(kept);
  };

  bool done = req.experts.empty();
  std::string error;
  layer_summary sum;
  const auto deadline = std::chrono::steady_clock::now() + s.opt.layer_timeout;
  while (!done) {
    // With uploads in flight, wake up often to hand their host slots back (the scheduler may be
    // waiting for a free slot to read the next expert into).
    const auto now = std::chrono::steady_clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    const auto wait = pending.empty() ? left : std::min(left, std::chrono::microseconds(200));
    bool timed_out = false;
    self->receive(
        [&](ready_atom, const expert_ready& r) {
          const expert_key k{r.layer, r.expert};
          auto it = index.find(r.expert);
          if (r.step != req.step || it == index.end()) {  // a call that failed earlier: give the slot back
            self->send(s.pool, release_atom_v, k, true);
            return;
          }
          const size_t i = it->second;
          const std::byte* host = s.arena->slot(r.where.slot) + r.where.offset;
          if (s.dev) {
            const ExpertWeights w = s.dev->upload(dslot[i], host);
            if (s.tracer) {  // dir = the upload stream it was queued on
              trace_event e;
              e.kind = trace::UPLOAD;
              e.t_ns = trace_now_ns();
              e.request_id = req.step;
              e.key = k;
              e.tier = trace::DEVICE;
              e.dir = s.dev->last_queue();
              e.bytes = s.dev->expert_bytes();
              e.rows = uint32_t(uses[i].rows.size());
              self->send(s.tracer, trace_atom_v, std::move(e));
            }
            compute(std::span<const size_t>(&i, 1), std::span<const ExpertWeights>(&w, 1));
            s.dev->computed(dslot[i]);
            pending.push_back({k, dslot[i]});
          } else {
            const ExpertWeights w = s.host_tier->weights(k, host);
            compute(std::span<const size_t>(&i, 1), std::span<const ExpertWeights>(&w, 1));
            self->send(s.pool, release_atom_v, k, true);
          }
          ++computed;
        },
        [&](layer_summary& x) {
          sum = x;
          done = true;
        },
        [&](caf::error& e) {
          error = s.sys->render(e);
          done = true;
        },
        caf::after(std::max(wait, std::chrono::microseconds(0))) >> [&] { timed_out = true; });
    if (s.dev) release_uploaded(false);
    if (timed_out && std::chrono::steady_clock::now() >= deadline) {
      error = fmt::format("layer {} waited {} ms for its experts", layer, s.opt.layer_timeout.count());
      done = true;
    }
  }
  if (s.dev) {
    release_uploaded(true);
    self->send(s.dcache, done_atom_v, req.step);
  }
  if (error.empty() && computed != uses.size())
    error = fmt::format("layer {}: {} of {} experts arrived", layer, computed, uses.size());
  if (!error.empty()) {
    s.failed = error;
    throw Error("reading routed experts failed: " + error);
  }
  std::lock_guard lock(s.m_mu);
  s.m.layer_calls += 1;
  s.m.requested += uses.size();
  s.m.device_hits += hit_idx.size();
  s.m.host_hits += sum.host_hits;
  s.m.disk_reads += sum.disk_reads;
  s.m.prefetch_hits += sum.prefetch_hits;
  s.m.prefetch_issued += sum.prefetch_issued;
  s.m.demand_disk_bytes += sum.disk_bytes;
  const double w = double(sum.wait_ns) * 1e-9;
  s.m.layer_wait_s += w;
  s.m.max_layer_wait_s = std::max(s.m.max_layer_wait_s, w);
  s.m.wait_s_by_layer[size_t(layer)] += w;
  s.m.calls_by_layer[size_t(layer)] += 1;
}

// The call's own requests for `ferry trace` (actors/tracing/cache_replay.hpp replays them offline).
void StreamingExperts::trace_call(uint64_t step, uint32_t layer, uint32_t block_rows, std::span<const ExpertUse> uses) {
  Impl& s = *impl_;
  if (!s.tracer) return;
  auto& self = *s.self;
  trace_event c;
  c.kind = trace::LAYER_CALL;
  c.t_ns = trace_now_ns();
  c.request_id = step;
  c.key = {layer, 0};
  c.rows = block_rows;
  c.bytes = uses.size();
  self->send(s.tracer, trace_atom_v, c);
  for (const auto& u : uses) {
    trace_event e;
    e.kind = trace::USE;
    e.t_ns = c.t_ns;
    e.request_id = step;
    e.key = {layer, uint32_t(u.expert)};
    e.rows = uint32_t(u.rows.size());
    self->send(s.tracer, trace_atom_v, std::move(e));
  }
}

StreamingMetrics StreamingExperts::metrics() {
  Impl& s = *impl_;
  StreamingMetrics m;
  {
    std::lock_guard lock(s.m_mu);
    m = s.m;
  }
  // Its own scoped actor: metrics() may be called (the server's /metrics) while the model thread waits
  // in fetch() on s.self's mailbox, and the two must not take each other's answers.
  caf::scoped_actor self{*s.sys};
  const auto t = std::chrono::seconds(10);
  auto err = [&](caf::error& e) { spdlog::warn("streaming metrics: {}", s.sys->render(e)); };
  if (s.dev) {
    m.uploads = s.dev->uploads();
    m.upload_bytes = s.dev->upload_bytes();
    m.upload_streams = s.dev->upload_queues();
    self->request(s.dcache, t, stats_atom_v).receive([&](device_stats& d) { m.device = d; }, err);
  }
  self->request(s.reads, t, stats_atom_v).receive([&](std::vector<dir_stats>& d) { m.drives = d; }, err);
  self->request(s.pool, t, stats_atom_v).receive([&](pool_stats& p) { m.pool = p; }, err);
  reader_actor r;
  self->request(s.reads, t, reader_atom_v, uint32_t{0}).receive([&](reader_actor& x) { r = x; }, err);
  if (r)
    self->request(r, t, stats_atom_v).receive([&](reader_stats& rs) {
      m.engine = rs.engine;
      m.direct = rs.direct;
    }, err);
  return m;
}

uint64_t StreamingExperts::flush_trace() {
  Impl& s = *impl_;
  if (!s.tracer) return 0;
  uint64_t n = 0;
  (*s.self)->request(s.tracer, std::chrono::seconds(30), flush_atom_v)
      .receive([&](uint64_t x) { n = x; }, [&](caf::error& e) { spdlog::warn("trace flush: {}", s.sys->render(e)); });
  return n;
}

}  // namespace ferry
