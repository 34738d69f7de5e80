#include "actors/streaming/layer_scheduler.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/streaming/read_verifier.hpp"
#include "actors/readers/reader_actor.hpp"
#include "actors/streaming/host_lease.hpp"
#include "actors/streaming/prefetch_queue.hpp"
#include "actors/tracing/trace_emitter.hpp"
#include "io/read_engine/pinned_arena.hpp"
#include "io/store/expert_store.hpp"
#include "messages/trace.pb.h"

namespace ferry {
namespace {

using steady = std::chrono::steady_clock;

struct Call {
  layer_request req;
  expert_sink_actor sink;
  caf::typed_response_promise<layer_summary> promise;
  size_t remaining = 0;
  uint32_t unverified = 0;  // late verification: delivered experts whose hash has not answered yet
  steady::time_point t0;
  layer_summary sum;
  // Experts of this call a prefetch or guess had read (or was reading): a prefetch hit when its bytes
  // are what the call gets, a wasted prefetch when they were gone (the slot reused) and it reads again.
  std::unordered_set<uint32_t> prefetched;
};

// One expert whose bytes are on their way: from the acquire until they land (or fail). A layer runs
// one call at a time, so at most one demand call waits on a fill. The pool's pin taken by the fill's
// acquire is held in `lease`: handed over with expert_ready to the waiting call (the layer call's
// lease releases it after compute or upload), or released here when no call waits or the fill failed.
struct Fill {
  bool prefetch = false;        // started by a prefetch and no demand call has claimed a read yet
  bool warm = false;            // a warm-start read (a prefetch not counted as one)
  bool guess = false;           // a router guess (hint): reads into a guess slot of the host pool
  bool reading = false;         // the grant came: reads issued
  std::vector<uint64_t> calls;  // demand calls waiting
  uint32_t rows = 1, block_rows = 1;
  bool keep = true;             // the host pool may cache it (false: the device cache holds it)
  slot_ref where;
  HostLease lease;              // the pool's pin, from the grant on
  uint32_t outstanding = 0;     // read parts not answered yet
  std::vector<uint32_t> dirs;   // copies still allowed (bad ones removed)
  std::vector<uint32_t> used;   // directories that served this round's parts
  bool whole = false;           // read unsplit: set after a checksum mismatch of a split read
  bool verified = false;        // this round's bytes matched the manifest's xxh64
  uint32_t parts_ok = 0;        // this round's parts the readers checked against the manifest
  int64_t bad_dir = -1;         // a reader found a part of this copy wrong (its directory)
  int32_t bad_part = -1;
  uint32_t hashing = 0;         // part hashes asked of the hashers, not answered yet
  int32_t hash_bad_part = -1;   // the first part whose hasher's xxh64 differed, or -1
  caf::error error;
};

// Late verification: an expert delivered before its hash was known. The pool's pin stays here until
// both the hash has answered and the call has released the bytes (through this scheduler), so no
// other fill can reuse the slot while the hasher reads it.
struct Pending {
  HostLease lease;
  uint64_t call = 0;
  std::vector<uint32_t> used;  // directories that served the bytes
  bool released = false;       // the layer call is done with the slot (it released it here)
  bool checked = false;        // the hash has answered
};

struct sched_state {
  LayerSchedulerConfig cfg;
  TraceEmitter trace;  // tier HOST
  std::unordered_map<uint64_t, Call> calls;
  std::unordered_map<expert_key, Fill> fills;
  std::unordered_map<expert_key, Pending> pending;               // late verification
  std::unordered_map<expert_key, std::vector<uint32_t>> bad_dirs;  // copies a check found bad (later fills skip them)
  std::unordered_set<expert_key> read_whole;                      // fills unsplit from now on (a late mismatch of halves)
  std::unique_ptr<PrefetchQueue> prefetched;
  uint32_t prefetch_inflight = 0;
  uint32_t guess_inflight = 0;   // router guesses not landed yet
  uint32_t prefetch_issued = 0;  // since the last summary
  uint64_t wasted_reported = 0;  // PrefetchQueue's wasted count at the last summary
  uint64_t next_call = 1, next_fetch = 1;
  static inline const char* name = "layer_scheduler";
};

using sched = layer_scheduler_actor::stateful_pointer<sched_state>;

void finish_call(sched self, uint64_t id) {
  auto it = self->state.calls.find(id);
  Call& c = it->second;
  c.sum.wait_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - c.t0).count());
  c.sum.prefetch_issued = std::exchange(self->state.prefetch_issued, 0);
  const uint64_t wasted = self->state.prefetched->counters().wasted;
  c.sum.prefetch_wasted += static_cast<uint32_t>(wasted - std::exchange(self->state.wasted_reported, wasted));
  self->state.trace(trace::LAYER_WAIT, id, {c.req.layer, 0}, {.rows = c.req.block_rows, .dur_ns = c.sum.wait_ns});
  c.promise.deliver(c.sum);
  self->state.calls.erase(it);
}

void fail_call(sched self, uint64_t id, const caf::error& err) {
  auto it = self->state.calls.find(id);
  if (it == self->state.calls.end()) return;
  it->second.promise.deliver(err);
  self->state.calls.erase(it);
}

// The bytes of k are in `where`, pinned by `lease`: the pin goes to call `id` with expert_ready; a call
// that already failed lets the lease give it back.
void deliver_ready(sched self, uint64_t id, const expert_key& k, slot_ref where, HostLease lease) {
  auto it = self->state.calls.find(id);
  if (it == self->state.calls.end()) return;
  Call& c = it->second;
  self->send(c.sink, ready_atom_v, expert_ready{c.req.step, k.layer, k.expert, where});
  lease.handover();
  if (--c.remaining == 0 && c.unverified == 0) finish_call(self, id);
}

// Asks the next hasher for the xxh64 of the expert bytes in `where`.
auto ask_hash(sched self, slot_ref where) {
  const auto& st = self->state;
  const auto* p = st.cfg.arena->slot(where.slot) + where.offset;
  return self->request(st.cfg.verifier->next(), st.cfg.timeout, caf::get_atom_v,
                       uint64_t(reinterpret_cast<uintptr_t>(p)), uint64_t(st.cfg.catalog->file_bytes));
}

// The directories that served a fill's parts, each once (two: it was read in halves).
std::vector<uint32_t> distinct(std::vector<uint32_t> dirs) {
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  return dirs;
}

void on_grant(sched self, const expert_key& k, const host_grant& g);
void on_part(sched self, const expert_key& k, const caf::expected<read_done>& r);

// A prefetch or guess fill stops counting against its bound (landed, failed, refused or claimed).
void end_prefetch(sched_state& st, Fill& f) {
  if (!f.prefetch) return;
  f.prefetch = false;
  --(f.guess ? st.guess_inflight : st.prefetch_inflight);
}

// The pool failed an acquire or guess: the waiting calls fail with it.
void on_acquire_error(sched self, const expert_key& k, const caf::error& e) {
  auto it = self->state.fills.find(k);
  if (it == self->state.fills.end()) return;
  for (uint64_t id : it->second.calls) fail_call(self, id, e);
  end_prefetch(self->state, it->second);
  self->state.fills.erase(it);
}

void acquire(sched self, const expert_key& k, uint32_t rows, uint32_t block_rows, bool keep) {
  self->request(self->state.cfg.pool, self->state.cfg.timeout, acquire_atom_v, k, rows, block_rows, keep)
      .then([=](host_grant& g) { on_grant(self, k, g); }, [=](caf::error& e) { on_acquire_error(self, k, e); });
}

void request_expert(sched self, uint64_t id, const expert_key& k, uint32_t rows, bool keep = true) {
  auto& st = self->state;
  const uint32_t block_rows = st.calls.at(id).req.block_rows;
  if (auto it = st.fills.find(k); it != st.fills.end()) {  // a prefetch is bringing it in: wait for that
    // Before the grant, on_grant counts this call with the fill's others. After it the read is under
    // way: this call's own prefetch is a prefetch hit; anything else (a warm-start read, another
    // call's prefetch or a guess) is a disk read this call waits for, and the trace says so.
    if (it->second.reading) {
      auto& c = st.calls.at(id);
      if (c.prefetched.count(k.expert)) {
        ++c.sum.prefetch_hits;
      } else {
        ++c.sum.disk_reads;
        st.trace(trace::MISS, id, k, {.rows = rows});
      }
    }
    it->second.calls.push_back(id);
    it->second.rows = rows;
    it->second.block_rows = block_rows;
    it->second.keep = keep;
    return;
  }
  Fill f;
  f.calls = {id};
  f.rows = rows;
  f.block_rows = block_rows;
  f.keep = keep;
  st.fills.emplace(k, std::move(f));
  acquire(self, k, rows, block_rows, keep);
}

void issue_reads(sched self, const expert_key& k) {
  auto& st = self->state;
  Fill& f = st.fills.at(k);
  const uint64_t fb = st.cfg.catalog->file_bytes;
  // Late verification hashes after delivery, on the hashers: the readers only copy.
  const auto& part_hashes = st.cfg.verifier && !st.cfg.verify_late ? st.cfg.catalog->part_hashes_of(k)
                                                                     : std::vector<uint64_t>{};
  const uint64_t pb = st.cfg.catalog->part_bytes;
  bool split =
      st.cfg.split_reads && !f.whole && f.block_rows <= 1 && !f.prefetch && f.dirs.size() >= 2 && fb >= 2 * 4096;
  uint64_t half = split ? io::round_up(fb / 2, io::kDirectAlign) : fb;
  if (split && !part_hashes.empty() && pb % io::kDirectAlign == 0) {
    half = std::max<uint64_t>(pb, (fb / 2 + pb / 2) / pb * pb);  // halves on a part boundary: both checkable
    split = half < fb;
    if (!split) half = fb;
  }
  std::vector<std::pair<uint64_t, uint64_t>> parts{{0, half}};
  if (split) parts.push_back({half, fb - half});
  f.outstanding = static_cast<uint32_t>(parts.size());
  f.used.clear();
  f.verified = false;
  f.parts_ok = 0;
  f.bad_dir = -1;
  f.bad_part = -1;
  for (auto [off, len] : parts) {
    fetch_req r{st.next_fetch++, f.dirs, {k, off, len, {f.where.slot, f.where.offset + off}}};
    if (!part_hashes.empty()) {  // readers that copy with a CPU check each part as it lands
      r.range.part_bytes = st.cfg.catalog->part_bytes;
      r.range.file_bytes = fb;
      r.range.part_xxh64 = part_hashes;
    }
    self->request(st.cfg.reads, st.cfg.timeout, fetch_atom_v, std::move(r))
        .then([=](read_done& d) { on_part(self, k, d); }, [=](caf::error& e) { on_part(self, k, e); });
  }
}

void on_grant(sched self, const expert_key& k, const host_grant& g) {
  auto& st = self->state;
  auto it = st.fills.find(k);
  Fill& f = it->second;
  if (g.hit) {  // resident: pinned once for us
    HostLease lease(st.cfg.pool, k);
    auto calls = std::move(f.calls);
    const uint32_t rows = f.rows;
    end_prefetch(st, f);
    st.fills.erase(it);
    if (calls.empty()) return;  // the lease gives the pin back
    if (auto c = st.calls.find(calls[0]); c != st.calls.end()) {
      ++c->second.sum.host_hits;
      if (c->second.prefetched.count(k.expert)) ++c->second.sum.prefetch_hits;
      st.trace(trace::HIT, calls[0], k, {.rows = rows});
    }
    return deliver_ready(self, calls[0], k, g.where, std::move(lease));
  }
  if (g.refused) {  // no slot for a prefetch or guess (nothing pinned): waiting calls ask as demands
    auto calls = std::move(f.calls);
    const uint32_t rows = f.rows;
    const bool keep = f.keep;
    end_prefetch(st, f);
    st.fills.erase(it);
    for (uint64_t id : calls)
      if (st.calls.count(id)) request_expert(self, id, k, rows, keep);
    return;
  }
  if (f.prefetch && !f.calls.empty()) end_prefetch(st, f);  // a demand call came before the grant: a plain miss
  if (f.prefetch && !f.warm) {
    st.prefetched->push(k);
    st.prefetched->pop();  // tracked as issued: a later request for k counts as a prefetch hit
    ++st.prefetch_issued;
    st.trace(trace::PREFETCH, 0, k);
  }
  for (uint64_t id : f.calls)
    if (auto c = st.calls.find(id); c != st.calls.end()) {
      ++c->second.sum.disk_reads;
      if (c->second.prefetched.count(k.expert)) ++c->second.sum.prefetch_wasted;  // read, then lost its slot
      st.trace(trace::MISS, id, k, {.rows = f.rows});
    }
  f.reading = true;
  f.where = g.where;
  f.lease = HostLease(st.cfg.pool, k);  // a cache slot (admitted) or a scratch slot, pinned
  f.dirs = st.cfg.catalog->copies_of(k);
  if (auto b = st.bad_dirs.find(k); b != st.bad_dirs.end())
    for (uint32_t d : b->second) std::erase(f.dirs, d);
  // Sticky: a whole read that comes from the good copy says nothing about the other, so splitting again
  // would find the same bad half every other call (LateVerify.AnExpertWhoseHalvesFailedIsReadWholeFromThenOn).
  f.whole = st.read_whole.count(k) > 0;
  if (f.dirs.empty()) {  // every copy failed a check: fail the fill naming the file
    f.error = caf::make_error(errc::no_replica, st.cfg.catalog->path_of(k, st.bad_dirs.at(k).back()),
                              std::string("checksum mismatch, no other copy"));
    for (uint64_t id : f.calls) fail_call(self, id, f.error);
    f.lease.fail();  // released (and dropped by the pool) with the fill
    end_prefetch(st, f);
    st.fills.erase(it);
    return;
  }
  issue_reads(self, k);
}

void finish_fill(sched self, const expert_key& k);

void on_part(sched self, const expert_key& k, const caf::expected<read_done>& r) {
  auto& st = self->state;
  auto it = st.fills.find(k);
  if (it == st.fills.end()) return;  // cannot happen: a fill lives until its last part answers
  Fill& f = it->second;
  --f.outstanding;
  if (r) {
    f.used.push_back(r->req.dir);
    f.parts_ok += r->parts_ok;
    if (r->bad_part >= 0 && f.bad_dir < 0) {
      f.bad_dir = r->req.dir;
      f.bad_part = r->bad_part;
    }
    if (!f.calls.empty())
      if (auto c = st.calls.find(f.calls[0]); c != st.calls.end()) c->second.sum.disk_bytes += r->req.range.bytes;
  } else if (!f.error) {
    f.error = r.error();
    for (uint64_t id : f.calls) fail_call(self, id, f.error);  // tell the waiting layer now
  }
  if (f.outstanding == 0) finish_fill(self, k);
}

void check_hash(sched self, const expert_key& k, uint64_t got);
void bad_copy(sched self, const expert_key& k, uint32_t dir, const std::string& detail);
void ask_part_hashes(sched self, const expert_key& k);
void hash_mismatch(sched self, const expert_key& k, const std::string& detail);

// Every part has answered. With a verifier the landed bytes are hashed first (on a hasher thread; this
// actor serves other fills meanwhile). A failed fill gives its slot back (ok = false drops the cache
// entry) only now, so no read still in flight can write into a slot someone else got.
void deliver_late(sched self, const expert_key& k);

void finish_fill(sched self, const expert_key& k) {
  auto& st = self->state;
  auto it = st.fills.find(k);
  Fill& f = it->second;
  if (!f.error && st.cfg.verifier && !f.verified) {
    if (st.cfg.verify_late && !f.calls.empty() && st.calls.count(f.calls[0]) && !st.pending.count(k))
      return deliver_late(self, k);  // a waiting call gets the bytes now; the hash follows
    if (f.bad_dir >= 0) {  // a reader found a part of this copy wrong
      st.cfg.verifier->counters().mismatches.fetch_add(1, std::memory_order_relaxed);
      const uint64_t pb = st.cfg.catalog->part_bytes;
      return bad_copy(self, k, uint32_t(f.bad_dir),
                      fmt::format("part {} (bytes {}..{}) differs from the manifest's part xxh64", f.bad_part,
                                  uint64_t(f.bad_part) * pb, (uint64_t(f.bad_part) + 1) * pb));
    }
    const size_t n_parts = st.cfg.catalog->part_hashes_of(k).size();
    if (n_parts > 0 && f.parts_ok == n_parts) {
      f.verified = true;  // every part checked by the reader that copied it: no second pass over the slot
      st.cfg.verifier->counters().in_reader.fetch_add(1, std::memory_order_relaxed);
    } else if (n_parts > 1 && st.cfg.verifier->threads() > 1) {
      return ask_part_hashes(self, k);
    } else {
      ask_hash(self, f.where)
          .then([=](uint64_t got) { check_hash(self, k, got); },
                [=](caf::error& e) {
                  Fill& g = self->state.fills.at(k);
                  g.error = std::move(e);
                  for (uint64_t id : g.calls) fail_call(self, id, g.error);
                  g.verified = true;  // nothing left to check: finish as failed
                  finish_fill(self, k);
                });
      return;
    }
  }
  auto calls = std::move(f.calls);
  HostLease lease = std::move(f.lease);
  const slot_ref where = f.where;
  if (f.error) lease.fail();  // the slot holds garbage: the pool drops the entry
  end_prefetch(st, f);
  const bool failed = static_cast<bool>(f.error);
  st.fills.erase(it);
  if (failed || calls.empty()) return;  // the lease gives the pin back (a landed prefetch stays cached, a guess parked)
  deliver_ready(self, calls[0], k, where, std::move(lease));
}

// Late verification: the call gets the bytes now and its summary waits for their hash. The pool's pin
// moves into a Pending entry; the call releases the slot to this scheduler (LayerCallEnv).
void on_late_hash(sched self, const expert_key& k, bool match);

void deliver_late(sched self, const expert_key& k) {
  auto& st = self->state;
  auto it = st.fills.find(k);
  Fill& f = it->second;
  const uint64_t id = f.calls[0];
  const slot_ref where = f.where;
  Pending p;
  p.lease = std::move(f.lease);
  p.call = id;
  p.used = distinct(f.used);
  end_prefetch(st, f);
  st.fills.erase(it);
  st.pending[k] = std::move(p);
  ++st.calls.at(id).unverified;
  ask_hash(self, where)
      .then([=](uint64_t got) { on_late_hash(self, k, got == self->state.cfg.catalog->hash_of(k)); },
            [=](caf::error&) { on_late_hash(self, k, false); });  // no hash: do not trust the bytes
  deliver_ready(self, id, k, where, HostLease{});  // the call's lease releases to this scheduler
}

// Both the hash and the call's release are in: the pool gets its pin back (dropping bad bytes).
void settle(sched self, const expert_key& k) {
  auto it = self->state.pending.find(k);
  if (it != self->state.pending.end() && it->second.released && it->second.checked) self->state.pending.erase(it);
}

void on_late_hash(sched self, const expert_key& k, bool match) {
  auto& st = self->state;
  Pending& p = st.pending.at(k);
  p.checked = true;
  auto c = st.calls.find(p.call);
  if (!match) {
    p.lease.fail();  // the pool drops the entry when the pin comes back
    st.cfg.verifier->counters().mismatches.fetch_add(1, std::memory_order_relaxed);
    if (p.used.size() == 1) {  // that copy is bad: later fills read another
      const uint32_t dir = p.used[0];
      st.bad_dirs[k].push_back(dir);
      const std::string bad = st.cfg.catalog->path_of(k, dir);
      spdlog::warn("layer scheduler: {}: xxh64 differs from the manifest's (seen after use); the layer runs again", bad);
      st.trace(trace::READ_FAILED, p.call, k, {.detail = bad + ": xxh64 mismatch (late)"});
    } else {  // read in halves: later fills read whole copies (the bad one is barred when one serves it)
      st.read_whole.insert(k);
      spdlog::warn("layer scheduler: {}: xxh64 differs from the manifest's (read in halves, seen after use); "
                   "the layer runs again", expert_file_name(int(k.layer), int(k.expert)));
    }
    if (c != st.calls.end()) c->second.sum.bad.push_back(k.expert);
  }
  settle(self, k);  // a call that failed still releases: its layer call adopts every expert_ready
  if (c != st.calls.end() && --c->second.unverified == 0 && c->second.remaining == 0) finish_call(self, c->first);
}

// The call is done with k's slot (late verification); anything else goes straight to the pool.
void on_release(sched self, const expert_key& k, bool ok) {
  auto it = self->state.pending.find(k);
  if (it == self->state.pending.end()) {
    HostLease lease(self->state.cfg.pool, k);
    if (!ok) lease.fail();
    return;
  }
  it->second.released = true;
  if (!ok) it->second.lease.fail();
  settle(self, k);
}

// A fill no reader checked (io_uring's reads land without a CPU touching them) whose manifest has part
// hashes: every part goes to the next hasher at once, so the layer waits for the hash of one part
// after the last byte lands (a 17.5 MB expert in 2 MiB parts: ~0.4 ms instead of ~3 ms for the whole
// file at ~6 GB/s). The verdict waits for every part's answer: none may still be reading the slot when
// a mismatch sends new reads into it.
void on_part_hash(sched self, const expert_key& k, int32_t part, uint64_t got, caf::error e);

void ask_part_hashes(sched self, const expert_key& k) {
  auto& st = self->state;
  Fill& f = st.fills.at(k);
  const auto& want = st.cfg.catalog->part_hashes_of(k);
  const uint64_t pb = st.cfg.catalog->part_bytes, fb = st.cfg.catalog->file_bytes;
  const auto base = uint64_t(reinterpret_cast<uintptr_t>(st.cfg.arena->slot(f.where.slot) + f.where.offset));
  f.hashing = uint32_t(want.size());
  f.hash_bad_part = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    const uint64_t at = i * pb, n = std::min(pb, fb - at);
    self->request(st.cfg.verifier->next(), st.cfg.timeout, caf::get_atom_v, base + at, n)
        .then([=](uint64_t got) { on_part_hash(self, k, int32_t(i), got, caf::error{}); },
              [=](caf::error& e) { on_part_hash(self, k, int32_t(i), 0, std::move(e)); });
  }
}

void on_part_hash(sched self, const expert_key& k, int32_t part, uint64_t got, caf::error e) {
  auto& st = self->state;
  Fill& f = st.fills.at(k);  // a fill lives until its hashes have answered
  if (e) {
    if (!f.error) {
      f.error = std::move(e);
      for (uint64_t id : f.calls) fail_call(self, id, f.error);
    }
  } else if (got != st.cfg.catalog->part_hashes_of(k)[size_t(part)] && (f.hash_bad_part < 0 || part < f.hash_bad_part)) {
    f.hash_bad_part = part;
  }
  if (--f.hashing > 0) return;
  if (f.error || f.hash_bad_part < 0) {
    f.verified = true;  // checked (or failed: nothing left to check)
    return finish_fill(self, k);
  }
  const uint64_t pb = st.cfg.catalog->part_bytes, bad = uint64_t(f.hash_bad_part);
  hash_mismatch(self, k, fmt::format("part {} (bytes {}..{}) differs from the manifest's part xxh64", bad, bad * pb,
                                     std::min((bad + 1) * pb, st.cfg.catalog->file_bytes)));
}

// A mismatch drops the copy that served the bytes and reads another; with none left the fill fails
// naming the bad file (hash_mismatch).
void check_hash(sched self, const expert_key& k, uint64_t got) {
  auto& st = self->state;
  Fill& f = st.fills.at(k);
  const uint64_t want = st.cfg.catalog->hash_of(k);
  if (got == want) {
    f.verified = true;
    return finish_fill(self, k);
  }
  hash_mismatch(self, k, fmt::format("xxh64 {:016x} != manifest {:016x}", got, want));
}

// A hasher found the landed bytes wrong (`detail` says how): the copy that served them is bad. Halves
// read from two drives are re-read whole to find which copy is bad.
void hash_mismatch(sched self, const expert_key& k, const std::string& detail) {
  auto& st = self->state;
  Fill& f = st.fills.at(k);
  st.cfg.verifier->counters().mismatches.fetch_add(1, std::memory_order_relaxed);
  f.used = distinct(std::move(f.used));
  if (f.used.size() > 1) {
    spdlog::warn("layer scheduler: {}: {} (read in halves); re-reading whole copies", expert_file_name(int(k.layer), int(k.expert)), detail);
    f.whole = true;
    st.read_whole.insert(k);  // and its later fills: another split would read the same bad half again
    return issue_reads(self, k);
  }
  bad_copy(self, k, f.used.at(0), detail);
}

// The copy in `dir` is bad: read another, or fail the fill naming the file when none is left. Later fills
// of k skip it too (bad_dirs, as a late check's mismatch bars it), so they do not read it first and pay a
// second read each time (LateVerify.ACopyAnEarlyCheckFoundBadIsNotReadAgainByLaterFills).
void bad_copy(sched self, const expert_key& k, uint32_t dir, const std::string& detail) {
  auto& st = self->state;
  Fill& f = st.fills.at(k);
  const std::string bad = st.cfg.catalog->path_of(k, dir);
  std::erase(f.dirs, dir);
  auto& barred = st.bad_dirs[k];
  if (std::find(barred.begin(), barred.end(), dir) == barred.end()) barred.push_back(dir);
  spdlog::warn("layer scheduler: {}: {}{}", bad, detail, f.dirs.empty() ? "" : "; reading another copy");
  st.trace(trace::READ_FAILED, 0, k, {.detail = bad + ": " + detail});
  if (!f.dirs.empty()) return issue_reads(self, k);
  f.error = caf::make_error(errc::no_replica, bad, detail + " (checksum mismatch, no other copy)");
  for (uint64_t id : f.calls) fail_call(self, id, f.error);
  f.verified = true;
  finish_fill(self, k);
}

// warm: the warm start, unbounded by prefetch_max (the host pool refuses what it has no room for).
void prefetch(sched self, uint32_t layer, const std::vector<uint32_t>& experts, bool warm = false) {
  auto& st = self->state;
  for (uint32_t e : experts) {
    if (!warm && st.prefetch_inflight >= st.cfg.prefetch_max) break;
    const expert_key k{layer, e};
    if (layer != st.cfg.layer || !st.cfg.catalog->has(k) || st.fills.count(k)) continue;
    Fill f;
    f.prefetch = true;
    f.warm = warm;
    st.fills.emplace(k, std::move(f));
    ++st.prefetch_inflight;
    acquire(self, k, 0, 1, true);  // rows 0: a prefetch (admitted like a plain step, never scratch)
  }
}

// Router guesses for this layer's next call: read into guess slots (the pool refuses what it cannot
// hold); `seen` is the number of calls scheduled when the hint was made: a later call makes it stale.
void guess(sched self, const std::vector<uint32_t>& experts, uint64_t seen) {
  auto& st = self->state;
  if (seen != st.next_call) return;  // the call it was for has been scheduled: too late
  for (uint32_t e : experts) {
    if (st.guess_inflight >= st.cfg.guess_max) break;
    const expert_key k{st.cfg.layer, e};
    if (!st.cfg.catalog->has(k) || st.fills.count(k)) continue;
    Fill f;
    f.prefetch = f.guess = true;
    st.fills.emplace(k, std::move(f));
    ++st.guess_inflight;
    self->request(st.cfg.pool, st.cfg.timeout, guess_atom_v, k)
        .then([=](host_grant& g) { on_grant(self, k, g); }, [=](caf::error& e) { on_acquire_error(self, k, e); });
  }
}

void hint(sched self, uint32_t layer, std::vector<uint32_t> experts) {
  auto& st = self->state;
  if (layer != st.cfg.layer || st.cfg.guess_max == 0 || experts.empty()) return;
  const uint64_t seen = st.next_call;
  if (!st.cfg.dcache) return guess(self, experts, seen);
  self->request(st.cfg.dcache, st.cfg.timeout, peek_atom_v, layer, std::move(experts))
      .then([=](std::vector<uint32_t>& absent) { guess(self, absent, seen); },
            [](caf::error&) {});  // a lost device-cache manager fails the next call, not a guess
}

caf::typed_response_promise<layer_summary> schedule(sched self, layer_request& req, expert_sink_actor& sink) {
  auto& st = self->state;
  auto rp = self->make_response_promise<layer_summary>();
  const uint64_t id = st.next_call++;
  Call c{req, sink, rp, req.experts.size(), 0, steady::now(), {}, {}};
  c.sum.step = req.step;
  c.sum.layer = req.layer;
  st.calls.emplace(id, std::move(c));
  for (const auto& u : req.experts) {
    const expert_key k{req.layer, u.expert};
    if (!st.cfg.catalog->has(k)) {
      fail_call(self, id, caf::make_error(errc::file_missing, expert_file_name(k.layer, k.expert), std::string("not in manifest.json")));
      return rp;
    }
    const auto rows = static_cast<uint32_t>(u.rows.size());
    st.trace(trace::REQUEST, id, k, {.rows = rows});
    if (st.prefetched->claim(k)) st.calls.at(id).prefetched.insert(k.expert);
    request_expert(self, id, k, rows, !u.device_keeps);
  }
  st.prefetched->expire_layer(req.layer);  // unclaimed prefetches of this layer were wasted
  if (req.experts.empty()) finish_call(self, id);
  return rp;
}

layer_scheduler_actor::behavior_type sched_fun(sched self, LayerSchedulerConfig cfg) {
  self->state.cfg = std::move(cfg);
  self->state.trace = TraceEmitter(self->state.cfg.tracer, trace::HOST, self->state.cfg.catalog->file_bytes);
  self->state.prefetched = std::make_unique<PrefetchQueue>(
      std::max({self->state.cfg.prefetch_max, self->state.cfg.guess_max, uint32_t{1}}));
  prefetch(self, self->state.cfg.layer, self->state.cfg.warm, true);
  return {
      [=](schedule_atom, layer_request& req, expert_sink_actor& sink) { return schedule(self, req, sink); },
      [=](prefetch_atom, uint32_t layer, const std::vector<uint32_t>& experts) { prefetch(self, layer, experts); },
      [=](hint_atom, uint32_t layer, std::vector<uint32_t>& experts) { hint(self, layer, std::move(experts)); },
      [=](release_atom, const expert_key& k, bool ok) { on_release(self, k, ok); },
  };
}

}  // namespace

layer_scheduler_actor spawn_layer_scheduler(caf::actor_system& sys, LayerSchedulerConfig cfg) {
  return sys.spawn(sched_fun, std::move(cfg));
}

}  // namespace ferry
