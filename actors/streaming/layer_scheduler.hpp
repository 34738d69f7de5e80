// The layer scheduler: one per MoE layer. A schedule request names the experts one step (or block)
// of its layer needs, in routing-rank order, and the sink that computes them. For each expert it asks
// the host pool (hit: ready at once; miss: a cache slot when admitted, else a scratch slot), sends a
// miss to the read service (which picks the copy expected to finish first), optionally checks the
// bytes against the manifest's xxh64 (a mismatch is a bad copy: read another), and tells the sink
// `ready` for each expert as its bytes land (arrival order). The response, after the last expert,
// is the call's layer_summary, or an error naming the file. prefetch(layer, experts) reads likely
// experts of this layer into the host pool ahead of its next call (bounded; hits are counted).
// hint(layer, experts): router prefetch, the experts this layer's router picks for the previous MoE
// layer's input. Those the device cache and the host cache do not hold are read into guess slots of
// the host pool (bounded by guess_max in flight), so the call that follows finds them in host memory;
// a hint that arrives after the call it was made for is dropped.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "actors/streaming/expert_catalog.hpp"
#include "messages/messages.hpp"

namespace ferry::io {
class PinnedArena;
}

namespace ferry {

class ReadVerifier;

struct LayerSchedulerConfig {
  uint32_t layer = 0;
  std::shared_ptr<const ExpertCatalog> catalog;
  std::shared_ptr<io::PinnedArena> arena;  // to checksum landed bytes
  read_service_actor reads;
  host_pool_actor pool;
  tracer_actor tracer;                     // optional
  // xxh64 of every landed read against the manifest on the verifier's hasher threads; a mismatch is a
  // bad copy (read another). nullptr: reads are not verified (--no-verify-reads).
  std::shared_ptr<ReadVerifier> verifier;
  // With a verifier: deliver each expert when its bytes land and hash them meanwhile (off the critical
  // path). The call's summary waits for every hash; a mismatch puts the expert in layer_summary::bad
  // (the caller runs the layer again), drops the bytes from the pool and bars that copy from later
  // fills (bytes read in halves from two copies: the expert's later fills read whole copies, until the bad
  // one serves one and is barred). The layer call must release host slots through this scheduler (release_atom).
  bool verify_late = false;
  // A plain decode step (one row) reads an expert with copies on two drives as two halves, one per
  // drive, so both drives work on it (DESIGN.md "One decode step" 3). Prompt-pass fills read whole files.
  bool split_reads = true;
  uint32_t prefetch_max = 4;                     // experts in flight from one prefetch (0 = off)
  uint32_t guess_max = 0;                        // router guesses in flight (0 = hints are ignored)
  device_cache_actor dcache;                     // optional: hints skip the experts it holds
  std::chrono::milliseconds timeout{120000};     // per request to the pool / read service
  // Warm start: experts read into the host pool's cache at spawn (the hottest by the usage counts),
  // so the first calls find the hot set instead of paying a miss for each of its experts.
  std::vector<uint32_t> warm;
};

layer_scheduler_actor spawn_layer_scheduler(caf::actor_system& sys, LayerSchedulerConfig cfg);

}  // namespace ferry
