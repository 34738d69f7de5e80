// The layer scheduler alone, between a fake host pool (grants slots, remembers what it cached, counts
// every release) and a fake read service (answers each fetch, fails it with EIO, or dies holding it):
// hits are ready at once, misses after their read; every pin the pool granted is released exactly
// once, by the scheduler or (handed over with expert_ready) by the sink; a failed or lost read fails
// the call naming the file and drops the slot; a landed prefetch is counted as a hit.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "actors/runtime/runtime.hpp"
#include "actors/streaming/host_lease.hpp"
#include "actors/streaming/layer_scheduler.hpp"
#include "io/read_engine/pinned_arena.hpp"
#include "io/store/expert_store.hpp"

using namespace ferry;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kLayer = 1;

// What the fake pool saw, shared with the test.
struct PoolLog {
  std::mutex mu;
  std::set<uint32_t> cached;                 // experts "in the cache" (hits)
  std::map<uint32_t, int> releases, failed;  // per expert: release(ok) / release(!ok) count
  int grants = 0;
};

host_pool_actor::behavior_type fake_pool(host_pool_actor::pointer self, std::shared_ptr<PoolLog> log) {
  return {
      [=](acquire_atom, const expert_key& k, uint32_t rows, uint32_t, bool) {
        std::lock_guard lk(log->mu);
        ++log->grants;
        if (log->cached.count(k.expert)) return host_grant{true, true, {k.expert, 0}};
        (void)rows;
        log->cached.insert(k.expert);  // admitted (a prefetch too)
        return host_grant{false, true, {k.expert, 0}};
      },
      [=](guess_atom, const expert_key& k) {  // a guess slot unless cached; its bytes then stay ("parked")
        std::lock_guard lk(log->mu);
        ++log->grants;
        if (log->cached.count(k.expert)) return host_grant{false, false, {}, true};
        log->cached.insert(k.expert);
        return host_grant{false, false, {k.expert, 0}};
      },
      [=](release_atom, const expert_key& k, bool ok) {
        std::lock_guard lk(log->mu);
        ++(ok ? log->releases : log->failed)[k.expert];
        if (!ok) log->cached.erase(k.expert);
      },
      [=](stats_atom) { return tier_stats{}; },
  };
}

enum class ReadMode { ok, eio, die };

read_service_actor::behavior_type fake_reads(read_service_actor::pointer self, ReadMode mode) {
  return {
      [=](fetch_atom, fetch_req& r) -> caf::typed_response_promise<read_done> {
        auto rp = self->make_response_promise<read_done>();
        const std::string file = "/fake0/" + expert_file_name(int(r.range.key.layer), int(r.range.key.expert));
        if (mode == ReadMode::eio) rp.deliver(caf::make_error(errc::io_error, file, std::string("Input/output error")));
        else if (mode == ReadMode::die) self->quit(caf::exit_reason::kill);  // dies holding it: no answer
        else rp.deliver(read_done{{r.id, r.dirs.at(0), r.range}, 1000, 1});
        return rp;
      },
      [=](reader_atom, uint32_t) -> caf::result<reader_actor> { return caf::make_error(errc::bad_request); },
      [=](stats_atom) { return std::vector<dir_stats>{}; },
      [=](retry_atom, uint64_t) {},
  };
}

std::shared_ptr<const ExpertCatalog> catalog() {
  auto c = std::make_shared<ExpertCatalog>();
  c->n_layers = 2;
  c->n_experts = 8;
  c->expert_bytes = c->file_bytes = 4096;
  c->dirs = {"/fake0"};
  c->copies.assign(16, {0});
  c->xxh64.assign(16, 0);
  return c;
}

// A device-cache manager that holds `held` (for hints: peek answers the others, after `delay`).
device_cache_actor::behavior_type fake_dcache(device_cache_actor::pointer, std::set<uint32_t> held,
                                              std::chrono::milliseconds delay) {
  return {
      [=](plan_atom, const device_request&) { return device_plan{}; },
      [=](drop_atom, const expert_key&) {},
      [=](peek_atom, uint32_t, const std::vector<uint32_t>& experts) {
        std::this_thread::sleep_for(delay);
        std::vector<uint32_t> absent;
        for (uint32_t e : experts)
          if (!held.count(e)) absent.push_back(e);
        return absent;
      },
      [=](done_atom, uint64_t) {},
      [=](stats_atom) { return tier_stats{}; },
  };
}

struct Harness {
  explicit Harness(ReadMode mode, std::chrono::milliseconds timeout = 5000ms, std::set<uint32_t> device = {},
                   std::chrono::milliseconds peek_delay = 0ms) {
    LayerSchedulerConfig c;
    c.layer = kLayer;
    c.catalog = catalog();
    c.arena = std::make_shared<io::PinnedArena>(8, 4096);
    c.pool = pool = rt.system().spawn(fake_pool, log);
    c.reads = reads = rt.system().spawn(fake_reads, mode);
    c.split_reads = false;
    c.prefetch_max = 2;
    c.guess_max = 3;
    if (!device.empty()) c.dcache = dcache = rt.system().spawn(fake_dcache, device, peek_delay);
    c.timeout = timeout;
    sched = spawn_layer_scheduler(rt.system(), c);
  }
  ~Harness() {  // nothing else stops these actors (the runtime's system waits for them)
    for (const caf::actor& a : {caf::actor_cast<caf::actor>(sched), caf::actor_cast<caf::actor>(pool),
                                caf::actor_cast<caf::actor>(reads)})
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    if (dcache) caf::anon_send_exit(dcache, caf::exit_reason::user_shutdown);
  }
  // Schedules one call; returns the experts made ready (adopting each pin in a lease, as the layer
  // call does) and the summary or the error text.
  std::vector<uint32_t> call(uint64_t step, std::vector<uint32_t> experts, layer_summary& sum, std::string& error) {
    layer_request req{step, kLayer, 1, {}};
    for (uint32_t e : experts) req.experts.push_back({e, {0}, {1.0f}});
    self->send(sched, schedule_atom_v, req, caf::actor_cast<expert_sink_actor>(self));
    std::vector<uint32_t> ready;
    for (bool done = false; !done;)
      self->receive([&](ready_atom, const expert_ready& r) {
                      HostLease lease(pool, {r.layer, r.expert});  // computed and released at once
                      ready.push_back(r.expert);
                    },
                    [&](layer_summary& s) { sum = s, done = true; },
                    [&](caf::error& e) { error = caf::to_string(e), done = true; },
                    caf::after(10s) >> [&] { error = "no answer in 10 s", done = true; });
    return ready;
  }
  std::shared_ptr<PoolLog> log = std::make_shared<PoolLog>();
  Runtime rt;
  caf::scoped_actor self{rt.system()};
  host_pool_actor pool;
  read_service_actor reads;
  layer_scheduler_actor sched;
  device_cache_actor dcache;
};

// Waits (briefly) until the pool has seen `n` releases in all, then returns the per-expert counts.
std::map<uint32_t, int> releases(Harness& h, int n) {
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lk(h.log->mu);
      int all = 0;
      for (auto& [e, c] : h.log->releases) all += c;
      for (auto& [e, c] : h.log->failed) all += c;
      if (all >= n) return h.log->releases;
    }
    std::this_thread::sleep_for(5ms);
  }
  std::lock_guard lk(h.log->mu);
  return h.log->releases;
}

}  // namespace

TEST(LayerScheduler, HitsAndReadMissesAreAllReadyAndEveryPinIsReleasedOnce) {
  Harness h(ReadMode::ok);
  h.log->cached = {1};
  layer_summary sum;
  std::string error;
  auto ready = h.call(1, {0, 1, 2}, sum, error);
  ASSERT_EQ(error, "");
  std::sort(ready.begin(), ready.end());
  EXPECT_EQ(ready, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(sum.host_hits, 1u);
  EXPECT_EQ(sum.disk_reads, 2u);
  EXPECT_EQ(sum.disk_bytes, 2u * 4096);
  const auto rel = releases(h, 3);
  EXPECT_EQ(rel, (std::map<uint32_t, int>{{0, 1}, {1, 1}, {2, 1}})) << "one release per pin, by the sink alone";
}

TEST(LayerScheduler, ReadErrorFailsTheCallNamingTheFileAndDropsTheSlot) {
  Harness h(ReadMode::eio);
  layer_summary sum;
  std::string error;
  h.call(1, {3}, sum, error);
  EXPECT_NE(error.find("L1-E3.bin"), std::string::npos) << error;
  releases(h, 1);
  std::lock_guard lk(h.log->mu);
  EXPECT_EQ(h.log->failed[3], 1) << "the slot's bytes are garbage: released with ok = false";
  EXPECT_EQ(h.log->releases.count(3), 0u);
}

TEST(LayerScheduler, ReadServiceDyingMidReadFailsTheCallWithinItsTimeout) {
  Harness h(ReadMode::die, 300ms);
  layer_summary sum;
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  h.call(1, {4}, sum, error);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(error, "");
  EXPECT_LT(s, 2.0) << error;
  releases(h, 1);
  std::lock_guard lk(h.log->mu);
  EXPECT_EQ(h.log->failed[4], 1) << "the slot a lost read may still write is dropped, not leaked";
}

TEST(LayerScheduler, LandedPrefetchIsAHitOfTheNextCall) {
  Harness h(ReadMode::ok);
  h.self->send(h.sched, prefetch_atom_v, kLayer, std::vector<uint32_t>{5});
  releases(h, 1);  // the prefetch landed and its pin went back: cached, unpinned
  layer_summary sum;
  std::string error;
  auto ready = h.call(1, {5}, sum, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(ready, std::vector<uint32_t>{5});
  EXPECT_EQ(sum.prefetch_hits, 1u);
  EXPECT_EQ(sum.host_hits, 1u);
  EXPECT_EQ(sum.disk_reads, 0u);
  EXPECT_EQ(releases(h, 2)[5], 2) << "once by the scheduler (the prefetch), once by the sink";
}

// Router prefetch: a hint reads the guessed experts (at most guess_max, here 3) into guess slots; the
// next call finds the ones it uses in host memory (prefetch hits, no disk read) and the rest are
// counted wasted.
TEST(LayerScheduler, HintedExpertsTheNextCallUsesAreHitsAndTheOthersWasted) {
  Harness h(ReadMode::ok);
  h.self->send(h.sched, hint_atom_v, kLayer, std::vector<uint32_t>{1, 2, 3, 4});
  releases(h, 3);  // three guesses landed (the fourth was over guess_max) and were parked
  {
    std::lock_guard lk(h.log->mu);
    EXPECT_EQ(h.log->grants, 3);
  }
  layer_summary sum;
  std::string error;
  auto ready = h.call(1, {2, 5}, sum, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(ready.size(), 2u);
  EXPECT_EQ(sum.prefetch_issued, 3u);
  EXPECT_EQ(sum.prefetch_hits, 1u);
  EXPECT_EQ(sum.prefetch_wasted, 2u) << "experts 1 and 3 were guessed and not used";
  EXPECT_EQ(sum.disk_reads, 1u) << "only expert 5 was read for the call";
  EXPECT_EQ(sum.host_hits, 1u);
}

// A hint for another layer reads nothing; experts on the device are never guessed.
TEST(LayerScheduler, HintSkipsDeviceResidentExpertsAndOtherLayers) {
  Harness h(ReadMode::ok, 5000ms, {1, 2});
  h.self->send(h.sched, hint_atom_v, kLayer + 1, std::vector<uint32_t>{5, 6});
  h.self->send(h.sched, hint_atom_v, kLayer, std::vector<uint32_t>{1, 2, 3});
  releases(h, 1);
  std::this_thread::sleep_for(50ms);
  {
    std::lock_guard lk(h.log->mu);
    EXPECT_EQ(h.log->grants, 1) << "only expert 3 is neither on the device nor for another layer";
    EXPECT_EQ(h.log->cached, std::set<uint32_t>{3});
  }
}

// A hint whose device check answers after the call it was made for has been scheduled is stale: it
// reads nothing.
TEST(LayerScheduler, HintOvertakenByItsCallReadsNothing) {
  Harness h(ReadMode::ok, 5000ms, {7}, 100ms);
  h.self->send(h.sched, hint_atom_v, kLayer, std::vector<uint32_t>{1, 2});
  layer_summary sum;
  std::string error;
  h.call(1, {5}, sum, error);  // scheduled while the peek is still out
  ASSERT_EQ(error, "");
  std::this_thread::sleep_for(200ms);
  std::lock_guard lk(h.log->mu);
  EXPECT_EQ(h.log->grants, 1) << "only the call's own expert 5";
}
