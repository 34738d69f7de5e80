// The streaming ExpertSource: routed experts of a prepared model come from the expert files through
// the actor system (docs/ARCHITECTURE.md). Per MoE layer call, fetch() hands the layer's scheduler the
// experts in routing-rank order, then waits on its own mailbox for arrivals and runs compute for each
// expert as its bytes land (resident ones first, since they need no read). The MoE layer sums in rank
// order, so results are bit-identical to the all-in-RAM engine whatever the arrival order.
// An error (every copy unreadable, a checksum mismatch with no good copy, a timeout) throws
// ferry::Error naming the file; the source then refuses further calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/streaming/expert_cache.hpp"
#include "actors/streaming/streaming_metrics.hpp"
#include "io/formats/model_config.hpp"
#include "io/read_engine/uring_reader.hpp"
#include "kernels/backend.hpp"
#include "kernels/model/weights.hpp"
#include "messages/messages.hpp"

namespace ferry {

struct Manifest;
class Runtime;

struct StreamingOptions {
  std::vector<std::string> expert_dirs;  // replaces manifest.json's directories, in order (same count)
  // The compute-tier cache. On the CPU back-end that is the host pool: its size is the larger of
  // cache (experts, or bytes) and host_pool_bytes. 0 everywhere = no cache, every expert streams.
  uint64_t cache_experts = 0, cache_bytes = 0, host_pool_bytes = 0;
  CachePolicy policy = CachePolicy::frequency;
  uint32_t min_rows = 2;  // block_aware only
  // The frequency policy's memory (cache_policy.hpp): usage counts (the store's usage.json; the model
  // loader sets the path) seed it, weighing prior_mass row-uses per MoE layer; live counts halve every
  // heat_half_life row-uses (0 = never). With learn_usage the run's counts are added to usage_path when
  // the source closes (atomically; the old counts halve every usage_half_life row-uses of the run), so
  // the next start is warm.
  std::string usage_path;
  double prior_mass = kDefaultPriorMass;
  double heat_half_life = 0;
  bool learn_usage = true;
  bool warm_start = true;  // with usage counts: read the hottest experts into the host pool at start
  double usage_half_life = 262144;
  uint32_t stream_slots = 0;  // scratch slots for experts that are not admitted; 0 = 2 x top_k (>= 8)
  // Next-layer prefetch: up to this many of the next MoE layer's most-used experts that its last call did
  // not use (those are probably still cached), read into the host pool while this layer computes. 0 = off.
  uint32_t prefetch = 0;
  // Router prefetch: while a decode step's MoE layer reads and computes, the next MoE layer's router
  // applied to this layer's input predicts that layer's experts, and those on neither the device nor in
  // the host cache are read into top_k extra scratch slots ("guess slots") of the host pool.
  bool prefetch_router = false;
  io::EngineKind engine = io::EngineKind::automatic;
  io::EngineConfig engine_cfg;
  // xxh64 of every read against the manifest (on hash_threads hasher threads, 0 = half of the
  // cores); a mismatch is a bad copy: another is read, or the fetch fails naming the file.
  // On by default; --no-verify-reads turns it off.
  bool verify_reads = true;
  uint32_t hash_threads = 0;
  // Late verification (with verify_reads): compute each expert as soon as its bytes land and hash them
  // meanwhile; a layer whose expert then fails its hash runs again from another copy (the layer's
  // output is rewritten whole, so the result is exact), or fails naming the file.
  bool verify_late = false;
  bool split_reads = true;    // decode fills of experts with two copies read half from each
  std::string trace_path;     // --trace FILE
  // CUDA: the back-end whose memory holds a device cache of this many experts above the host pool
  // (device-cache manager + DeviceTier); the host pool is then host_pool_bytes (or cache_experts when
  // 0). Any back-end works here (on the CPU the "device" slots are host memory: tests use that).
  Backend* device = nullptr;
  uint64_t device_cache_experts = 0;
  bool device_tier = false;      // model loader: put the device tier on any back-end (CUDA always has it)
  uint32_t upload_streams = 8;   // upload queues copying host slots to device slots
  uint32_t device_scratch = 0;   // device slots for experts that are not admitted; 0 = 2 x upload_streams
  std::chrono::milliseconds read_timeout{30000};
  std::chrono::milliseconds layer_timeout{300000};
  // Test hook: runs right after a layer's request went out (its reads are being issued).
  std::function<void(uint32_t layer, uint64_t call)> after_schedule;
};

class StreamingExperts final : public ExpertSource {
 public:
  // Spawns, in the runtime's actor system and under its supervisor, the read service with its readers
  // (one per directory), the host pool, one scheduler per MoE layer, the device-cache manager with a
  // device tier and, with a trace path, starts the runtime's tracer. `rt` outlives this source.
  // Throws ferry::Error subclasses on bad options.
  StreamingExperts(Runtime& rt, const ModelConfig& cfg, const Manifest& manifest, StreamingOptions opt);
  ~StreamingExperts() override;
  StreamingExperts(const StreamingExperts&) = delete;
  StreamingExperts& operator=(const StreamingExperts&) = delete;

  void fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) override;
  bool wants_hints() const override;
  void hint_next(int next_layer, ExpertPredictor predict) override;

  // Counters so far, with per-drive bytes and the host pool's occupancy (asks the actors).
  StreamingMetrics metrics();
  // Flushes the trace file (if any); returns the events written so far.
  uint64_t flush_trace();

  // For tests: the runtime, its actor system and the read service (to kill actors, inject errors).
  Runtime& runtime();
  caf::actor_system& system();
  read_service_actor read_service() const;

 private:
  void trace_call(uint64_t step, uint32_t layer, uint32_t block_rows, std::span<const ExpertUse> uses);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
