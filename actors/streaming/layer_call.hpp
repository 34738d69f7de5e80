// One MoE layer call on the model thread, from the device plan to the last host-slot release
// (docs/ARCHITECTURE.md "One decode step"). StreamingExperts::fetch makes one per call and drives it:
//
//   plan_device()          with a device tier: one plan from the device-cache manager classifies every
//                          expert (hit, or a miss with its device slot); hits pin their cache slots
//   schedule_misses()      every expert that is not a device hit goes to the layer's scheduler, with
//                          the model thread's mailbox as the sink
//   compute_device_hits()  the device hits, as one batch, while the reads run (hits are planned on the
//                          model thread: they need no message after the plan)
//   finish()               each arrival (expert_ready) is computed the moment it lands: from the host
//                          slot on the CPU, or uploaded into its device slot and computed behind the
//                          upload's event; ends with the scheduler's layer_summary or an error
//
// The block's row count is computed once here (the largest row index + 1 over every use) and given to
// both the device-cache manager and the scheduler, so both tiers judge admission by the same block.
// A landed expert's host-slot pin is adopted in a HostLease: released right after compute on the CPU,
// or handed to the UploadWatcher, which releases it when the upload's event completes.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/fwd.hpp>

#include "actors/streaming/compute_tier.hpp"
#include "actors/tracing/trace_emitter.hpp"
#include "kernels/model/weights.hpp"
#include "messages/messages.hpp"

namespace ferry::io {
class PinnedArena;
}

namespace ferry {

class DeviceTier;
class Runtime;
class UploadWatcher;

// What a layer call works with; owned by StreamingExperts.
struct LayerCallEnv {
  caf::scoped_actor* self = nullptr;  // the model thread's mailbox: the expert sink
  Runtime* rt = nullptr;
  layer_scheduler_actor sched;
  host_pool_actor pool;
  device_cache_actor dcache;          // with a device tier
  DeviceTier* dev = nullptr;          // null: compute reads the weights in the host slot (geo)
  UploadWatcher* uploads = nullptr;   // with dev
  ExpertGeometry geo;
  const io::PinnedArena* arena = nullptr;
  TraceEmitter trace;                 // UPLOAD events (tier DEVICE)
  std::chrono::milliseconds timeout{300000};  // the whole call, after the plan
  // Exclusive tiers (the frequency policy): an expert the device cache admitted is not kept by the
  // host pool too (expert_use::device_keeps), so the two tiers hold distinct experts.
  bool exclusive_tiers = false;
  // Late verification: host slots go back through the layer's scheduler (it holds the pool's pin until
  // the expert's hash has answered).
  bool release_via_scheduler = false;
};

struct LayerCallResult {
  layer_summary sum;          // from the scheduler (zero when every expert was a device hit)
  uint32_t device_hits = 0;
  std::string error;          // "" on success; else what failed (names the file or the actor)
};

class LayerCall {
 public:
  LayerCall(const LayerCallEnv& env, uint64_t step, uint32_t layer, std::span<const ExpertUse> uses,
            const ExpertCompute& compute);

  std::string plan_device();  // "" or why the plan failed
  void schedule_misses();
  void compute_device_hits();
  bool has_misses() const { return !req_.experts.empty(); }
  uint32_t block_rows() const { return block_rows_; }
  LayerCallResult finish();

 private:
  void on_ready(const expert_ready& r);
  void compute_one(size_t i, const ExpertWeights& w);

  const LayerCallEnv& env_;
  std::span<const ExpertUse> uses_;
  const ExpertCompute& compute_;
  uint32_t block_rows_ = 1;
  layer_request req_;                          // the misses, in rank order
  std::unordered_map<uint32_t, size_t> index_;  // expert -> its position in uses_
  std::vector<uint32_t> dslot_;                 // device slot per use (device tier)
  std::vector<bool> dkeep_;                     // per use: the device cache admitted it
  std::vector<size_t> hits_;                    // uses_ positions that are device hits
  size_t computed_ = 0;
};

}  // namespace ferry
