#include "actors/streaming/streaming_experts.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/readers/reader_supervisor.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/streaming/cache_policy.hpp"
#include "actors/streaming/compute_tier.hpp"
#include "actors/streaming/device_cache.hpp"
#include "actors/streaming/device_tier.hpp"
#include "actors/streaming/expert_catalog.hpp"
#include "actors/streaming/host_pool.hpp"
#include "actors/streaming/layer_call.hpp"
#include "actors/streaming/layer_scheduler.hpp"
#include "actors/streaming/read_verifier.hpp"
#include "actors/streaming/upload_watcher.hpp"
#include "io/errors.hpp"
#include "io/read_engine/pinned_arena.hpp"
#include "io/store/expert_store.hpp"
#include "messages/trace.pb.h"

namespace ferry {

struct StreamingExperts::Impl {
  Runtime* rt = nullptr;  // the process's runtime root: actor system, tracer, supervisor
  ModelConfig cfg;
  StreamingOptions opt;
  std::shared_ptr<const ExpertCatalog> catalog;
  std::unique_ptr<DeviceTier> dev;          // device slots and upload queues (CUDA)
  std::unique_ptr<UploadWatcher> uploads;   // with dev: releases host slots as their uploads land
  device_cache_actor dcache;                // the device-cache manager (with dev)
  std::unique_ptr<caf::scoped_actor> self;  // the calling thread's mailbox: the expert sink
  std::shared_ptr<io::PinnedArena> arena;
  read_service_actor reads;
  host_pool_actor pool;
  tracer_actor tracer;
  TraceEmitter call_trace;                        // LAYER_CALL / USE events (no tier)
  std::shared_ptr<ReadVerifier> verifier;         // null with --no-verify-reads
  std::vector<layer_scheduler_actor> scheds;      // [layer], empty handle for dense layers
  LayerCallEnv env;                               // every call's, but for the scheduler
  std::vector<std::vector<uint32_t>> last_used;   // [layer]: the last call's experts
  std::vector<std::vector<uint64_t>> uses;        // [layer][expert]: rows routed to it so far
  UsageCounts usage;                              // usage_path's counts at the start (empty without)
  HeatConfig heat;                                // the frequency policy's prior and decay
  uint32_t host_cache = 0;                        // host pool cache slots
  uint32_t guess_slots = 0;                       // router prefetch: top_k extra scratch slots (0 = off)
  bool verify_late = false;                       // --verify-late with verified reads
  StreamingMetrics m;
  std::mutex m_mu;  // m: written by the model thread after each call, read by metrics() from any thread
  uint64_t calls = 0;
  int hint_layer = -1;              // router prefetch: the next MoE layer and its predictor, for the
  ExpertPredictor predict;          // fetch that follows (hint_next)
  std::string failed;  // non-empty once an error ended generation

  int next_moe_layer(int layer) const {
    for (int l = layer + 1; l < cfg.n_layers; ++l)
      if (scheds[size_t(l)]) return l;
    return -1;
  }
  void start_tiers(const ExpertGeometry& geo);
  void spawn_schedulers();
  void prefetch_next(int layer);
  void send_hint();
  void note_uses(int layer, std::span<const ExpertUse> used);
  void account(int layer, size_t requested, const LayerCallResult& r);
  [[noreturn]] void fail(const std::string& why, const std::string& prefix);
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

// The arena, the read service, the host pool and, with a device, the device tier and its manager.
void StreamingExperts::Impl::start_tiers(const ExpertGeometry& geo) {
  const uint32_t dev_cache = static_cast<uint32_t>(
      std::min<uint64_t>(opt.device_cache_experts, uint64_t{catalog->n_layers} * catalog->n_experts));
  const uint32_t dev_scratch = opt.device_scratch ? opt.device_scratch : 2 * std::max<uint32_t>(1, opt.upload_streams);
  if (opt.device) dev = std::make_unique<DeviceTier>(geo, *opt.device, dev_cache + dev_scratch, opt.upload_streams);
  const uint32_t cache = cache_slots(opt, *catalog);
  // Router prefetch adds top_k guess slots, so guesses never take the slots demands stream through.
  guess_slots = opt.prefetch_router ? uint32_t(std::max<int64_t>(1, cfg.moe.top_k)) : 0;
  const uint32_t scratch =
      (opt.stream_slots ? opt.stream_slots : std::max<uint32_t>(8, 2 * uint32_t(cfg.moe.top_k))) + guess_slots;
  arena = std::make_shared<io::PinnedArena>(size_t{cache} + scratch, catalog->file_bytes);
  // Uploads from page-locked memory run at the bus's full rate (~55 GB/s vs ~9 GB/s pageable).
  if (opt.device) opt.device->register_host(arena->base(), arena->bytes());
  if (!opt.trace_path.empty())
    tracer = rt->start_tracer(opt.trace_path, catalog->dirs, {opt.device ? dev_cache : 0, cache, catalog->file_bytes});
  call_trace = TraceEmitter(tracer, 0, 0);
  heat = heat_config(opt, cfg, usage);
  host_cache = cache;
  caf::actor_system& sys = rt->system();

  ReadServiceConfig rc;
  rc.dirs = catalog->dirs;
  rc.arena = arena;
  rc.engine = opt.engine;
  rc.engine_cfg = opt.engine_cfg;
  rc.read_timeout = opt.read_timeout;
  rc.tracer = tracer;
  reads = spawn_read_service(sys, rc);
  rt->watch(reads, "read service");

  pool = spawn_host_pool(sys, {cache, scratch, catalog->file_bytes, opt.policy, opt.min_rows, heat, tracer, guess_slots});
  rt->watch(pool, "host pool");
  if (dev) {
    uploads = std::make_unique<UploadWatcher>(*dev);
    dcache = spawn_device_cache(sys, {dev_cache, dev_scratch, catalog->file_bytes, opt.policy, opt.min_rows, heat, tracer});
    rt->watch(dcache, "device-cache manager");
    spdlog::info("device cache: {} cached + {} scratch slots, {} upload streams", dev_cache, dev_scratch,
                 opt.upload_streams);
  }
  spdlog::info("streaming experts: {} directories, host pool {} cached + {} scratch slots of {} bytes ({}), prefetch {}{}",
               catalog->dirs.size(), cache, scratch, catalog->file_bytes,
               opt.policy == CachePolicy::lru         ? std::string("LRU")
               : opt.policy == CachePolicy::frequency ? std::string("frequency")
                                                      : fmt::format("block-aware, min_rows {}", opt.min_rows),
               opt.prefetch, opt.prefetch_router ? fmt::format(", router prefetch into {} guess slots", guess_slots) : "");
}

void StreamingExperts::Impl::spawn_schedulers() {
  if (opt.verify_reads)
    verifier = std::make_shared<ReadVerifier>(rt->system(), opt.hash_threads ? opt.hash_threads : ReadVerifier::default_threads());
  // Warm start: the host pool's share of the hottest experts, per layer.
  std::vector<std::vector<uint32_t>> warm(size_t(cfg.n_layers));
  if (opt.warm_start && heat.prior && opt.policy == CachePolicy::frequency)
    for (const auto& k : hottest(*heat.prior, host_cache))
      if (k.layer < warm.size()) warm[k.layer].push_back(k.expert);
  scheds.resize(size_t(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (cfg.ffn[size_t(l)] != Ffn::moe) continue;
    LayerSchedulerConfig lc;
    lc.layer = uint32_t(l);
    lc.catalog = catalog;
    lc.arena = arena;
    lc.reads = reads;
    lc.pool = pool;
    lc.tracer = tracer;
    lc.verifier = verifier;
    lc.verify_late = verify_late;
    lc.split_reads = opt.split_reads;
    lc.prefetch_max = opt.prefetch;
    lc.guess_max = guess_slots;
    lc.dcache = dcache;  // hints skip what the device holds
    lc.warm = std::move(warm[size_t(l)]);
    // A request to the read service may try every copy, each within read_timeout.
    lc.timeout = opt.read_timeout * 8 + opt.layer_timeout;
    scheds[size_t(l)] = spawn_layer_scheduler(rt->system(), lc);
    rt->watch(scheds[size_t(l)], fmt::format("layer scheduler {}", l));
  }
}

StreamingExperts::StreamingExperts(Runtime& rt, const ModelConfig& cfg, const Manifest& manifest, StreamingOptions opt)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.rt = &rt;
  s.cfg = cfg;
  s.opt = std::move(opt);
  s.verify_late = s.opt.verify_late && s.opt.verify_reads;
  s.catalog = std::make_shared<const ExpertCatalog>(make_catalog(manifest, s.opt.expert_dirs));
  const ExpertGeometry geo = expert_geometry(cfg);
  if (geo.payload_bytes() != s.catalog->expert_bytes)
    throw FormatError(fmt::format("manifest.json: expert_bytes {} but the model config makes experts of {} bytes",
                                  s.catalog->expert_bytes, geo.payload_bytes()));
  s.start_tiers(geo);
  s.spawn_schedulers();
  s.self = std::make_unique<caf::scoped_actor>(rt.system());
  rt.listen(caf::actor_cast<caf::actor>(*s.self));  // a lost actor fails the waiting call at once
  s.env = {s.self.get(), &rt, {}, s.pool, s.dcache, s.dev.get(), s.uploads.get(), geo, s.arena.get(),
           TraceEmitter(s.tracer, trace::DEVICE, s.catalog->file_bytes), s.opt.layer_timeout,
           s.opt.policy == CachePolicy::frequency, s.verify_late};
  s.last_used.resize(size_t(cfg.n_layers));
  s.uses.assign(size_t(cfg.n_layers), std::vector<uint64_t>(size_t(cfg.moe.n_experts), 0));
  s.m.file_bytes = s.catalog->file_bytes;
  s.m.dirs = s.catalog->dirs;
  s.m.wait_s_by_layer.assign(size_t(cfg.n_layers), 0.0);
  s.m.calls_by_layer.assign(size_t(cfg.n_layers), 0);
}

StreamingExperts::~StreamingExperts() {
  Impl& s = *impl_;
  if (s.calls > 0 && s.failed.empty()) save_usage(s.opt, s.usage, s.uses);
  if (s.tracer) s.rt->flush_trace();
  std::vector<caf::actor> mine;
  for (auto& h : s.scheds)
    if (h) mine.push_back(caf::actor_cast<caf::actor>(h));
  mine.push_back(caf::actor_cast<caf::actor>(s.pool));
  if (s.dcache) mine.push_back(caf::actor_cast<caf::actor>(s.dcache));
  mine.push_back(caf::actor_cast<caf::actor>(s.reads));
  for (auto& a : mine) (*s.self)->send_exit(a, caf::exit_reason::user_shutdown);
  (*s.self)->wait_for(mine);  // the tracer is the runtime's: it outlives this source
  // The hashers quit; the schedulers that held the verifier are gone, so this is the last handle.
  if (s.verifier) s.verifier->stop();
  s.verifier.reset();
  s.uploads.reset();          // its last leases end (the pool is gone: their releases go nowhere)
  s.self.reset();
  s.dev.reset();  // waits for its uploads (they read the arena), frees the device slots
  if (s.opt.device) s.opt.device->unregister_host(s.arena->base());
}

caf::actor_system& StreamingExperts::system() { return impl_->rt->system(); }
Runtime& StreamingExperts::runtime() { return *impl_->rt; }
read_service_actor StreamingExperts::read_service() const { return impl_->reads; }

// Prefetch for the next MoE layer: its most-used experts so far, minus those its last call used.
void StreamingExperts::Impl::prefetch_next(int layer) {
  const int next = next_moe_layer(layer);
  if (next < 0 || opt.prefetch == 0) return;
  auto guess = prefetch_guess(uses[size_t(next)], last_used[size_t(next)], opt.prefetch);
  if (!guess.empty()) (*self)->send(scheds[size_t(next)], prefetch_atom_v, uint32_t(next), std::move(guess));
}

bool StreamingExperts::wants_hints() const { return impl_->opt.prefetch_router; }

void StreamingExperts::hint_next(int next_layer, ExpertPredictor predict) {
  impl_->hint_layer = next_layer;
  impl_->predict = std::move(predict);
}

// The pending router hint goes to its layer's scheduler (called once this layer's reads are out).
void StreamingExperts::Impl::send_hint() {
  const int next = std::exchange(hint_layer, -1);
  ExpertPredictor p = std::exchange(predict, nullptr);
  if (next < 0 || next >= cfg.n_layers || !scheds[size_t(next)] || !p) return;
  std::vector<uint32_t> experts;
  for (int32_t e : p())
    if (e >= 0) experts.push_back(uint32_t(e));
  if (!experts.empty()) (*self)->send(scheds[size_t(next)], hint_atom_v, uint32_t(next), std::move(experts));
}

void StreamingExperts::Impl::note_uses(int layer, std::span<const ExpertUse> used) {
  last_used[size_t(layer)].clear();
  for (const auto& u : used) {
    last_used[size_t(layer)].push_back(uint32_t(u.expert));
    uses[size_t(layer)][size_t(u.expert)] += u.rows.size();
  }
}

void StreamingExperts::Impl::account(int layer, size_t requested, const LayerCallResult& r) {
  std::lock_guard lock(m_mu);
  m.layer_calls += 1;
  m.requested += requested;
  m.device_hits += r.device_hits;
  m.host_hits += r.sum.host_hits;
  m.disk_reads += r.sum.disk_reads;
  m.prefetch_hits += r.sum.prefetch_hits;
  m.prefetch_issued += r.sum.prefetch_issued;
  m.prefetch_wasted += r.sum.prefetch_wasted;
  m.demand_disk_bytes += r.sum.disk_bytes;
  const double w = double(r.sum.wait_ns) * 1e-9;
  m.layer_wait_s += w;
  m.max_layer_wait_s = std::max(m.max_layer_wait_s, w);
  m.wait_s_by_layer[size_t(layer)] += w;
  m.calls_by_layer[size_t(layer)] += 1;
}

void StreamingExperts::Impl::fail(const std::string& why, const std::string& prefix) {
  failed = why;
  throw Error(prefix + why);
}

// One MoE layer call: a LayerCall (actors/streaming/layer_call.hpp) does the work; this adds the
// next layer's prefetch and the bookkeeping.
void StreamingExperts::fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) {
  Impl& s = *impl_;
  if (!s.failed.empty()) throw Error("streaming experts stopped after an earlier error: " + s.failed);
  if (layer < 0 || layer >= s.cfg.n_layers || !s.scheds[size_t(layer)])
    throw LimitError(fmt::format("streaming experts: layer {} is not a MoE layer", layer));
  LayerCallEnv env = s.env;
  env.sched = s.scheds[size_t(layer)];
  // Late verification may find, after compute, that an expert's bytes were bad: the layer then runs
  // again (every expert rewrites its own output slots, so the second pass leaves exactly its result).
  // Each mismatch bars that copy of that expert (or makes its reads whole from then on), so the passes end: an
  // expert found bad more than twice per copy fails the call.
  std::map<uint32_t, size_t> strikes;
  for (int pass = 1;; ++pass) {
    LayerCall call(env, ++s.calls, uint32_t(layer), uses, compute);
    trace_call(s.calls, uint32_t(layer), call.block_rows(), uses);
    if (auto e = call.plan_device(); !e.empty()) s.fail(e, "streaming experts: ");
    call.schedule_misses();
    if (pass == 1) {
      s.send_hint();
      if (call.has_misses()) s.prefetch_next(layer);
      s.note_uses(layer, uses);
    }
    call.compute_device_hits();
    if (s.opt.after_schedule && call.has_misses()) s.opt.after_schedule(uint32_t(layer), s.calls);
    const LayerCallResult r = call.finish();
    if (!r.error.empty()) s.fail(r.error, "reading routed experts failed: ");
    s.account(layer, uses.size(), r);
    if (r.sum.bad.empty()) return;
    for (uint32_t e : r.sum.bad)  // after the call's done(step): the entry is no longer pinned
      if (s.dcache) (*s.self)->send(s.dcache, drop_atom_v, expert_key{uint32_t(layer), e});
    for (uint32_t e : r.sum.bad)
      if (++strikes[e] > 2 * s.catalog->copies_of({uint32_t(layer), e}).size())
        s.fail(fmt::format("layer {}: expert {} failed its xxh64 check {} times", layer, e, strikes[e]),
               "reading routed experts failed: ");
    spdlog::warn("streaming experts: layer {}: {} expert(s) failed the late xxh64 check; computing the layer again",
                 layer, r.sum.bad.size());
  }
}

// The call's own requests for `ferry trace` (actors/tracing/cache_replay.hpp replays them offline).
void StreamingExperts::trace_call(uint64_t step, uint32_t layer, uint32_t block_rows, std::span<const ExpertUse> uses) {
  Impl& s = *impl_;
  if (!s.call_trace) return;
  s.call_trace(trace::LAYER_CALL, step, {layer, 0}, {.rows = block_rows, .bytes = uses.size()});
  for (const auto& u : uses)
    s.call_trace(trace::USE, step, {layer, uint32_t(u.expert)}, {.rows = uint32_t(u.rows.size()), .bytes = 0});
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
  caf::scoped_actor self{s.rt->system()};
  const auto t = std::chrono::seconds(10);
  auto err = [&](caf::error& e) { spdlog::warn("streaming metrics: {}", describe_error(self->system(), e)); };
  if (s.dev) {
    m.uploads = s.dev->uploads();
    m.upload_bytes = s.dev->upload_bytes();
    m.upload_streams = s.dev->upload_queues();
    self->request(s.dcache, t, stats_atom_v).receive([&](tier_stats& d) { m.device = d; }, err);
  }
  if (s.verifier) {
    const VerifyCounters& v = s.verifier->counters();
    m.verify = true;
    m.verify_threads = s.verifier->threads();
    m.verify_hashes = v.hashes.load();
    m.verify_bytes = v.bytes.load();
    m.verify_s = double(v.ns.load()) * 1e-9;
    m.verify_mismatches = v.mismatches.load();
    m.verify_in_reader = v.in_reader.load();
  }
  self->request(s.reads, t, stats_atom_v).receive([&](std::vector<dir_stats>& d) { m.drives = d; }, err);
  self->request(s.pool, t, stats_atom_v).receive([&](tier_stats& p) { m.pool = p; }, err);
  reader_actor r;
  self->request(s.reads, t, reader_atom_v, uint32_t{0}).receive([&](reader_actor& x) { r = x; }, err);
  if (r)
    self->request(r, t, stats_atom_v).receive([&](reader_stats& rs) {
      m.engine = rs.engine;
      m.direct = rs.direct;
    }, err);
  return m;
}

uint64_t StreamingExperts::flush_trace() { return impl_->rt->flush_trace(); }

}  // namespace ferry
