// The actor vocabulary: THE single CAF type-ID block of the project, every atom, the small inspectable
// structs that travel between actors, and the typed-actor interfaces. Protobuf is only for what leaves
// the process (trace.proto). Kept free of caf/all.hpp: including this costs little compile time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/type_id.hpp>
#include <caf/typed_actor.hpp>

#include "messages/errors.hpp"

// A trace event is the trace file's own record, ferry.trace.Event (messages/trace.proto), inside the
// process too: one definition. Its CAF inspect is in messages/trace_record.hpp, which senders and the
// tracer include (it pulls in the Protobuf headers, which the rest of the actors need not compile).
namespace ferry::trace {
class Event;
}

namespace ferry {

// One routed expert: file L<layer>-E<expert>.bin.
struct expert_key {
  uint32_t layer = 0;
  uint32_t expert = 0;
  friend bool operator==(const expert_key&, const expert_key&) = default;
  friend auto operator<=>(const expert_key&, const expert_key&) = default;
};

// Where a read lands: a slot of the pinned arena and a byte offset inside it (a decode fill split
// across two holders writes two chunks into one slot).
struct slot_ref {
  uint32_t slot = 0;
  uint64_t offset = 0;
  friend bool operator==(const slot_ref&, const slot_ref&) = default;
};

// A byte range [offset, offset+bytes) of one expert's file and where it lands: `dst`. offset and
// dst.offset are multiples of 4096; bytes is rounded up to 4096 for O_DIRECT.
struct expert_range {
  expert_key key;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  slot_ref dst;
  // With verified reads and a manifest that has part hashes: the expected xxh64 of each part_bytes of
  // the file (of file_bytes), for a reader that can check the parts it copies (empty otherwise).
  uint64_t part_bytes = 0;
  uint64_t file_bytes = 0;
  std::vector<uint64_t> part_xxh64;
  friend bool operator==(const expert_range&, const expert_range&) = default;
};

// To the reader supervisor: read `range` from whichever of `dirs` (indices into the storage directory
// list) is expected to finish first.
struct fetch_req {
  uint64_t id = 0;
  std::vector<uint32_t> dirs;
  expert_range range;
  friend bool operator==(const fetch_req&, const fetch_req&) = default;
};

// To one reader (directory `dir`): read `range`.
struct read_req {
  uint64_t id = 0;
  uint32_t dir = 0;
  expert_range range;
  friend bool operator==(const read_req&, const read_req&) = default;
};

// A finished read: the request it answers (its dir: the reader that served it), and how it went.
// service_ns: submission to completion; inflight: reads in flight on that reader when this one was
// submitted (itself included), which lets the chooser turn one read's time into a drive rate.
struct read_done {
  read_req req;
  uint64_t service_ns = 0;
  uint32_t inflight = 1;
  uint32_t parts_ok = 0;  // parts of req.range.part_xxh64 the reader hashed and found right
  int32_t bad_part = -1;  // the first part it found wrong (-1: none)
  friend bool operator==(const read_done&, const read_done&) = default;
};

// Test-only knobs of a reader: an added per-read latency, injected EIO on the next `eio_reads` reads,
// and a simulated O_DIRECT refusal (EINVAL at open, as tmpfs on older kernels answers).
struct reader_knobs {
  uint32_t delay_us = 0;
  uint32_t eio_reads = 0;
  bool refuse_odirect = false;
  friend bool operator==(const reader_knobs&, const reader_knobs&) = default;
};

struct reader_stats {
  uint32_t dir = 0;
  std::string engine;   // "io_uring" or "pread-pool"
  bool registered = false;  // io_uring fixed buffers in use
  bool direct = true;       // O_DIRECT in use (false after a fall back to buffered reads)
  uint64_t reads = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  uint32_t inflight = 0;
  uint32_t queued = 0;
  friend bool operator==(const reader_stats&, const reader_stats&) = default;
};

// Per directory, as the supervisor sees it: reads and bytes served, restarts, the chooser's estimate.
struct dir_stats {
  uint32_t dir = 0;
  uint64_t reads = 0;
  uint64_t bytes = 0;
  uint64_t failures = 0;
  uint32_t restarts = 0;
  double rate_bps = 0;
  uint64_t queued_bytes = 0;
  friend bool operator==(const dir_stats&, const dir_stats&) = default;
};

// One MoE layer call: which rows use each routed expert and with which routing weight.
struct expert_use {
  uint32_t expert = 0;
  std::vector<uint32_t> rows;
  std::vector<float> weights;  // same length as rows
  bool device_keeps = false;   // the device cache admitted it: the host pool need not keep a copy
  friend bool operator==(const expert_use&, const expert_use&) = default;
};
struct layer_request {
  uint64_t step = 0;
  uint32_t layer = 0;
  uint32_t block_rows = 1;
  std::vector<expert_use> experts;  // in routing-rank order (the order sums are taken in)
  friend bool operator==(const layer_request&, const layer_request&) = default;
};

// An expert's bytes are in memory, in a slot of the host arena.
struct expert_ready {
  uint64_t step = 0;
  uint32_t layer = 0;
  uint32_t expert = 0;
  slot_ref where;  // a host-pool slot, pinned: the receiver releases it (HostLease)
  friend bool operator==(const expert_ready&, const expert_ready&) = default;
};
struct layer_summary {
  uint64_t step = 0;
  uint32_t layer = 0;
  uint32_t device_hits = 0, host_hits = 0, disk_reads = 0, prefetch_hits = 0;
  uint64_t wait_ns = 0;  // time from the request to the last expert's arrival
  uint64_t disk_bytes = 0;  // bytes read from drives for this call (prefetched bytes are not counted here)
  uint32_t prefetch_issued = 0;  // prefetch reads this layer's scheduler started since its last summary
  uint32_t prefetch_wasted = 0;  // prefetched experts this call (its layer) did not use
  // Late verification (--verify-late): experts the call computed from bytes whose xxh64 then did not
  // match. The caller must run the layer again (the next reads skip the bad copy).
  std::vector<uint32_t> bad;
  friend bool operator==(const layer_summary&, const layer_summary&) = default;
};

// One cache tier's counters and occupancy (the host pool's and the device-cache manager's): lookups,
// its ExpertCache's admissions and evictions, and the scratch slots experts that were not admitted
// stream through. scratch_free and waiting are the host pool's (the device hands scratch slots out
// round-robin and never waits).
struct tier_stats {
  uint64_t hits = 0, misses = 0, admissions = 0, refusals = 0, evictions = 0;
  uint32_t resident = 0, capacity = 0;  // cached experts / cache slots
  uint64_t resident_bytes = 0;
  uint32_t scratch = 0, scratch_free = 0, waiting = 0;  // scratch slots, free ones, acquires waiting
  friend bool operator==(const tier_stats&, const tier_stats&) = default;
};

// One MoE layer call as the device-cache manager sees it: the experts not yet known to be on the
// device and how many rows of the block use each (block-aware admission).
struct device_request {
  uint64_t step = 0;
  uint32_t layer = 0;
  uint32_t block_rows = 1;
  std::vector<uint32_t> experts;
  std::vector<uint32_t> rows;  // same length as experts
  friend bool operator==(const device_request&, const device_request&) = default;
};
// Where each expert of a device_request computes from: a cache hit (bytes already in `slot`), an
// admitted miss (upload into cache `slot`) or a refused one (upload into scratch `slot`). The call's
// cache slots stay pinned until done(step).
struct device_place {
  uint32_t slot = 0;
  bool hit = false;
  bool admitted = false;
  friend bool operator==(const device_place&, const device_place&) = default;
};
struct device_plan {
  std::vector<device_place> places;  // one per device_request expert, same order
  friend bool operator==(const device_plan&, const device_plan&) = default;
};

// Host pool answers: a hit names the slot; a miss grants a slot to read into when admitted
// (block-aware admission may refuse: then the expert streams through a scratch slot). refused: a
// prefetch or a router guess got no slot (nothing is pinned).
struct host_grant {
  bool hit = false;
  bool admitted = false;
  slot_ref where;
  bool refused = false;
  friend bool operator==(const host_grant&, const host_grant&) = default;
};



// ---- drafter bridge (actors/drafter/drafter_bridge.cpp) -------------------------------------------------------

// To the drafter bridge: propose at most max_tokens tokens after `history` (target vocabulary), answer
// by deadline_ns (steady_clock nanoseconds since its epoch) or not at all.
struct draft_request {
  std::vector<int32_t> history;
  uint32_t max_tokens = 0;
  float gate = 0;
  int64_t deadline_ns = 0;
  friend bool operator==(const draft_request&, const draft_request&) = default;
};
// Checked proposal in the target vocabulary (the bridge rejected anything malformed or out of range).
struct draft_reply {
  std::vector<int32_t> ids;
  std::vector<float> conf;
  friend bool operator==(const draft_reply&, const draft_reply&) = default;
};
// The bridge's counters. fallbacks: calls answered with no proposal because the drafter was down,
// failed or late; restarts: sidecar (re)starts after the first.
struct drafter_status {
  uint64_t calls = 0, ok = 0, fallbacks = 0, restarts = 0;
  uint64_t timeouts = 0, crashes = 0, garbage = 0, start_failures = 0, unavailable = 0;
  int32_t pid = -1;  // the running sidecar, -1 when none
  bool up = false;
  friend bool operator==(const drafter_status&, const drafter_status&) = default;
};

}  // namespace ferry

// clang-format off
CAF_BEGIN_TYPE_ID_BLOCK(ferry, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(ferry, (ferry::expert_key))
  CAF_ADD_TYPE_ID(ferry, (ferry::slot_ref))
  CAF_ADD_TYPE_ID(ferry, (ferry::expert_range))
  CAF_ADD_TYPE_ID(ferry, (ferry::read_req))
  CAF_ADD_TYPE_ID(ferry, (ferry::read_done))
  CAF_ADD_TYPE_ID(ferry, (ferry::fetch_req))
  CAF_ADD_TYPE_ID(ferry, (ferry::reader_knobs))
  CAF_ADD_TYPE_ID(ferry, (ferry::reader_stats))
  CAF_ADD_TYPE_ID(ferry, (ferry::dir_stats))
  CAF_ADD_TYPE_ID(ferry, (ferry::expert_use))
  CAF_ADD_TYPE_ID(ferry, (ferry::layer_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::expert_ready))
  CAF_ADD_TYPE_ID(ferry, (ferry::layer_summary))
  CAF_ADD_TYPE_ID(ferry, (ferry::host_grant))
  CAF_ADD_TYPE_ID(ferry, (ferry::trace::Event))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::dir_stats>))
  CAF_ADD_TYPE_ID(ferry, (ferry::tier_stats))
  CAF_ADD_TYPE_ID(ferry, (ferry::device_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::device_place))
  CAF_ADD_TYPE_ID(ferry, (ferry::device_plan))
  CAF_ADD_ATOM(ferry, ferry::atoms, read_atom, "read")
  CAF_ADD_ATOM(ferry, ferry::atoms, fetch_atom, "fetch")
  CAF_ADD_ATOM(ferry, ferry::atoms, stats_atom, "stats")
  CAF_ADD_ATOM(ferry, ferry::atoms, knobs_atom, "knobs")
  CAF_ADD_ATOM(ferry, ferry::atoms, reader_atom, "reader")
  CAF_ADD_ATOM(ferry, ferry::atoms, retry_atom, "retry")
  CAF_ADD_ATOM(ferry, ferry::atoms, trace_atom, "trace")
  CAF_ADD_ATOM(ferry, ferry::atoms, flush_atom, "flush")
  CAF_ADD_ATOM(ferry, ferry::atoms, acquire_atom, "acquire")
  CAF_ADD_ATOM(ferry, ferry::atoms, release_atom, "release")
  CAF_ADD_ATOM(ferry, ferry::atoms, schedule_atom, "schedule")
  CAF_ADD_ATOM(ferry, ferry::atoms, ready_atom, "ready")
  CAF_ADD_ATOM(ferry, ferry::atoms, prefetch_atom, "prefetch")
  CAF_ADD_ATOM(ferry, ferry::atoms, restart_atom, "restart")
  CAF_ADD_TYPE_ID(ferry, (ferry::draft_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::draft_reply))
  CAF_ADD_TYPE_ID(ferry, (ferry::drafter_status))
  CAF_ADD_ATOM(ferry, ferry::atoms, propose_atom, "propose")
  CAF_ADD_ATOM(ferry, ferry::atoms, kill_atom, "kill")
  CAF_ADD_ATOM(ferry, ferry::atoms, plan_atom, "plan")
  CAF_ADD_ATOM(ferry, ferry::atoms, done_atom, "done")
  CAF_ADD_ATOM(ferry, ferry::atoms, watch_atom, "watch")
  CAF_ADD_ATOM(ferry, ferry::atoms, listen_atom, "listen")
  CAF_ADD_ATOM(ferry, ferry::atoms, hint_atom, "hint")
  CAF_ADD_ATOM(ferry, ferry::atoms, guess_atom, "guess")
  CAF_ADD_ATOM(ferry, ferry::atoms, peek_atom, "peek")
  CAF_ADD_ATOM(ferry, ferry::atoms, drop_atom, "drop")
CAF_END_TYPE_ID_BLOCK(ferry)
// clang-format on

namespace ferry {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_key& x) {
  return f(caf::meta::type_name("expert_key"), x.layer, x.expert);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, slot_ref& x) {
  return f(caf::meta::type_name("slot_ref"), x.slot, x.offset);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_range& x) {
  return f(caf::meta::type_name("expert_range"), x.key, x.offset, x.bytes, x.dst, x.part_bytes, x.file_bytes,
           x.part_xxh64);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fetch_req& x) {
  return f(caf::meta::type_name("fetch_req"), x.id, x.dirs, x.range);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, read_req& x) {
  return f(caf::meta::type_name("read_req"), x.id, x.dir, x.range);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, read_done& x) {
  return f(caf::meta::type_name("read_done"), x.req, x.service_ns, x.inflight, x.parts_ok, x.bad_part);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reader_knobs& x) {
  return f(caf::meta::type_name("reader_knobs"), x.delay_us, x.eio_reads, x.refuse_odirect);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reader_stats& x) {
  return f(caf::meta::type_name("reader_stats"), x.dir, x.engine, x.registered, x.direct, x.reads, x.bytes,
           x.errors, x.inflight, x.queued);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dir_stats& x) {
  return f(caf::meta::type_name("dir_stats"), x.dir, x.reads, x.bytes, x.failures, x.restarts, x.rate_bps,
           x.queued_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_use& x) {
  return f(caf::meta::type_name("expert_use"), x.expert, x.rows, x.weights, x.device_keeps);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_request& x) {
  return f(caf::meta::type_name("layer_request"), x.step, x.layer, x.block_rows, x.experts);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_ready& x) {
  return f(caf::meta::type_name("expert_ready"), x.step, x.layer, x.expert, x.where);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_summary& x) {
  return f(caf::meta::type_name("layer_summary"), x.step, x.layer, x.device_hits, x.host_hits, x.disk_reads,
           x.prefetch_hits, x.wait_ns, x.disk_bytes, x.prefetch_issued, x.prefetch_wasted, x.bad);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tier_stats& x) {
  return f(caf::meta::type_name("tier_stats"), x.hits, x.misses, x.admissions, x.refusals, x.evictions, x.resident,
           x.capacity, x.resident_bytes, x.scratch, x.scratch_free, x.waiting);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_request& x) {
  return f(caf::meta::type_name("device_request"), x.step, x.layer, x.block_rows, x.experts, x.rows);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_place& x) {
  return f(caf::meta::type_name("device_place"), x.slot, x.hit, x.admitted);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_plan& x) {
  return f(caf::meta::type_name("device_plan"), x.places);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, host_grant& x) {
  return f(caf::meta::type_name("host_grant"), x.hit, x.admitted, x.where, x.refused);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_request& x) {
  return f(caf::meta::type_name("draft_request"), x.history, x.max_tokens, x.gate, x.deadline_ns);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_reply& x) {
  return f(caf::meta::type_name("draft_reply"), x.ids, x.conf);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, drafter_status& x) {
  return f(caf::meta::type_name("drafter_status"), x.calls, x.ok, x.fallbacks, x.restarts, x.timeouts, x.crashes,
           x.garbage, x.start_failures, x.unavailable, x.pid, x.up);
}

using namespace atoms;

// ---- typed-actor interfaces -------------------------------------------------------------------------

// One per expert directory (drive): reads into the pinned arena, answers when the bytes are there.
using reader_actor = caf::typed_actor<                       //
    caf::replies_to<read_atom, read_req>::with<read_done>,    //
    caf::replies_to<stats_atom>::with<reader_stats>,          //
    caf::reacts_to<knobs_atom, reader_knobs>>;

// The reader supervisor: picks the copy expected to finish first, retries on other copies, restarts
// dead readers and re-issues their reads.
using read_service_actor = caf::typed_actor<                       //
    caf::replies_to<fetch_atom, fetch_req>::with<read_done>,        //
    caf::replies_to<reader_atom, uint32_t>::with<reader_actor>,     // the current reader of a directory
    caf::replies_to<stats_atom>::with<std::vector<dir_stats>>,      //
    caf::reacts_to<retry_atom, uint64_t>>;                          // internal: re-dispatch after back-off

// Host pool manager: pinned host slots, block-aware admission, eviction; in-use experts are pinned
// between acquire and release. acquire(key, rows, block_rows): a hit pins the cached slot; a miss gets
// a cache slot (admitted) or a scratch slot to stream through, and waits while no slot is free;
// rows == 0 is a prefetch (never waits, never takes scratch, not counted as a hit or miss).
// guess(key): a router guess for the next layer: a scratch slot out of the few guesses may hold (never
// a cache slot, never waits; refused when cached or none is free). Released unused, its bytes stay
// parked in the slot: a demand acquire of the key is then a hit, until a demand needs the slot.
// release(key, ok): done with the bytes; ok == false drops a cache entry whose fill failed.
using host_pool_actor = caf::typed_actor<                                           //
    // key, rows, block rows, keep (false: the device cache holds it, so the pool streams it through scratch
    // and drops a cached copy once released: the tiers hold distinct experts)
    caf::replies_to<acquire_atom, expert_key, uint32_t, uint32_t, bool>::with<host_grant>,
    caf::replies_to<guess_atom, expert_key>::with<host_grant>,
    caf::reacts_to<release_atom, expert_key, bool>,                                  //
    caf::replies_to<stats_atom>::with<tier_stats>>;

// Device-cache manager: which GPU expert slot each expert of a layer call computes from. plan pins the
// call's cached experts (hits and admitted misses) so nothing evicts them while they compute;
// done(step) unpins them. peek(layer, experts): those of the experts it does not hold (no counting,
// no pinning). drop(key): forget a cached expert whose bytes turned out bad (late verification).
// The slots' memory and the uploads belong to the model thread (DeviceTier).
using device_cache_actor = caf::typed_actor<                        //
    caf::replies_to<plan_atom, device_request>::with<device_plan>,  //
    caf::reacts_to<drop_atom, expert_key>,                          //
    caf::replies_to<peek_atom, uint32_t, std::vector<uint32_t>>::with<std::vector<uint32_t>>,
    caf::reacts_to<done_atom, uint64_t>,                            //
    caf::replies_to<stats_atom>::with<tier_stats>>;

// Receives each expert of a layer call as its bytes land (arrival order); the layer sums in rank order.
using expert_sink_actor = caf::typed_actor<caf::reacts_to<ready_atom, expert_ready>>;

// Layer scheduler: one MoE layer call in, one expert_ready per expert to the sink, and a summary once
// the last expert has arrived. prefetch: the likely experts of a coming layer (bounded, shallow).
// hint: the experts the layer's router picks for the previous layer's input (router prefetch): those
// not on the device nor in the host cache are read into guess slots of the host pool.
// release(key, ok): late verification: the layer call is done with an expert's host slot; the
// scheduler gives the pool its pin back once the hash has answered too.
using layer_scheduler_actor = caf::typed_actor<                                         //
    caf::replies_to<schedule_atom, layer_request, expert_sink_actor>::with<layer_summary>,  //
    caf::reacts_to<prefetch_atom, uint32_t, std::vector<uint32_t>>,                        //
    caf::reacts_to<hint_atom, uint32_t, std::vector<uint32_t>>,                            //
    caf::reacts_to<release_atom, expert_key, bool>>;

// Appends trace events to the trace file; flush answers with the number of events written so far.
using tracer_actor = caf::typed_actor<            //
    caf::reacts_to<trace_atom, trace::Event>,      //
    caf::replies_to<flush_atom>::with<uint64_t>>;

// The drafter bridge (supervisor of the ferry-drafter sidecar): a proposal or an error by the request's
// deadline; stats; kill = fault injection (kills the worker actor that owns the sidecar); restart and
// ready (worker up, its sidecar pid) are internal.
using drafter_bridge_actor = caf::typed_actor<                              //
    caf::replies_to<propose_atom, draft_request>::with<draft_reply>,        //
    caf::replies_to<stats_atom>::with<drafter_status>,                      //
    caf::reacts_to<kill_atom>,                                              //
    caf::reacts_to<restart_atom>,                                           //
    caf::reacts_to<ready_atom, int32_t>>;

// The runtime's supervisor (actors/runtime/runtime.hpp): watch monitors an actor the runtime registered
// (restarting it, or failing every listener at once when it cannot be restarted); a listener (the
// model thread's mailbox) gets a caf::error (errc::actor_down, naming the actor) the moment a critical
// actor is lost.
using supervisor_actor = caf::typed_actor<        //
    caf::reacts_to<watch_atom, caf::actor>,        //
    caf::reacts_to<listen_atom, caf::actor>>;

}  // namespace ferry

template <>
struct std::hash<ferry::expert_key> {
  size_t operator()(const ferry::expert_key& k) const noexcept {
    return std::hash<uint64_t>{}((uint64_t{k.layer} << 32) | k.expert);
  }
};
