// The memory plan: how a run or the server divides GPU and host memory, computed ONCE by plan_memory()
// for `ferry inspect --gpu-mem/--host-mem`, `ferry run` and `ferry-server` alike (docs/USAGE.md
// "Memory plan"). First what the model needs whatever happens: the spine, the KV cache and the KDA /
// convolution state for the context, activations of a prompt pass (over the whole context, or in passes
// of fewer rows when that does not fit: the prefill chunk, same logits either way), scratch
// slots for experts that stream through, a safety margin. What is left becomes the device expert
// cache (CUDA) and the pinned host pool. A request that cannot fit is refused before anything loads,
// with the flag to change named (MemoryPlan::refusal).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/formats/model_config.hpp"
#include "io/store/sizing.hpp"

namespace ferry {

// What the model needs, as the engine holds it (f32 state and KV, the spine as loaded).
struct ModelFootprint {
  bool prepared = false;           // a `ferry prepare` directory (experts can stream)
  int64_t spine_bytes = 0;         // resident spine
  int64_t expert_file_bytes = 0;   // one expert slot
  int64_t expert_files = 0;        // routed experts in all
  int64_t experts_bytes = 0;       // all routed experts held in memory (payload)
  int64_t kv_bytes_per_token = 0;  // f32 latent / K+V per token, all layers
  int64_t state_bytes = 0;         // KDA + convolution state per sequence (f32)
  int64_t act_bytes_per_row = 0;   // activations of one row of a forward pass
  int64_t act_bytes_per_ctx = 0;   // per context token in a prompt pass (expanded K/V of one layer)
  int64_t top_k = 0;
};

struct Manifest;
// A checkpoint (or config.json) whose spine would be loaded as `spine`; its experts stay in memory.
ModelFootprint model_footprint(const ModelConfig& cfg, SpineType spine);
// A prepared model: the spine as spine.gguf holds it, the experts as the manifest lists them.
ModelFootprint prepared_footprint(const ModelConfig& cfg, const Manifest& m, const std::filesystem::path& spine_gguf);

struct PlanRequest {
  ModelFootprint model;
  int64_t ctx = 4096;             // tokens per sequence (prompt + reply)
  int64_t prefill_chunk = 0;      // --prefill-chunk: rows per prompt pass (0: the plan chooses)
  int state_snapshots = 0;        // copies of the KDA state beside the live one (drafter blocks, prompt cache)
  bool gpu = false;               // CUDA: spine, state, activations and the device cache on the GPU
  uint64_t gpu_free = 0;          // bytes free on the GPU (0: unknown)
  uint64_t host_available = 0;    // bytes of host memory available (0: unknown)
  int streaming = -1;             // -1: stream when the experts do not fit in memory; 0: never; 1: always
  bool cache_set = false;         // --cache-experts given (else the plan sizes the compute-tier cache)
  uint64_t cache_experts = 0;     // --cache-experts N
  uint64_t cache_bytes = 0;       // --cache-experts SIZE
  bool host_pool_set = false;     // --host-pool given (else the plan sizes the host pool)
  uint64_t host_pool_bytes = 0;   // --host-pool SIZE
  uint32_t scratch_slots = 0;     // host slots for experts streaming through (0: 2 x top-k, >= 8)
  uint32_t device_scratch = 16;   // device slots for refused misses (2 x upload streams)
};

struct MemoryBudget {
  uint64_t total = 0;   // free (GPU) or available (host); 0 = unknown
  uint64_t spine = 0, kv = 0, state = 0, activations = 0, scratch = 0, margin = 0;
  uint64_t experts = 0;  // every routed expert, when they do not stream
  uint64_t needed() const { return spine + kv + state + activations + scratch + experts + margin; }
  uint64_t left() const { return total > needed() ? total - needed() : 0; }
};

struct MemoryPlan {
  bool streaming = false;
  bool gpu = false;
  int64_t ctx = 0;
  int64_t prefill_chunk = 0;      // rows per pass of a long prompt (0: a prompt of any length in one pass)
  MemoryBudget device, host;      // device: only with gpu
  uint64_t experts_in_memory = 0; // not streaming: bytes of all experts (on the GPU with gpu)
  uint64_t device_cache_experts = 0;
  uint64_t host_pool_bytes = 0;
  uint64_t host_pool_experts = 0;
  int64_t expert_files = 0;
  std::string refusal;            // empty: fits; else why not and which flag to change
  std::vector<std::string> flags; // the flags that reproduce this plan
};

MemoryPlan plan_memory(const PlanRequest& r);

// Several lines for stderr / `ferry inspect`, the flags last.
std::string format_plan(const MemoryPlan& p);
nlohmann::json plan_json(const MemoryPlan& p);

// /proc/meminfo MemAvailable in bytes (0 when it cannot be read).
uint64_t host_memory_available();

}  // namespace ferry
