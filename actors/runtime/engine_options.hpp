// The ONE option set of every front-end that runs a model (`ferry run`, `ferry faults`, `ferry-server`;
// `ferry bench` runs `ferry run`): the model, the back-end, streaming, caches, io engine, prefetch,
// drafter and trace. The apps register it with apps/engine_cli/engine_cli.hpp add_engine_flags (one
// CLI11 registration, documented once in docs/USAGE.md "Engine options") and start it with
// actors/runtime/engine.hpp start_engine; validate_engine_options is the one check of the values,
// run before anything loads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "actors/runtime/model_loader.hpp"
#include "kernels/decoding/verify.hpp"

namespace ferry {

struct DraftOptions {
  std::string spec;                // "" = off; ngram[:N] | replay:FILE[,opts] | qwen3:DIR
  std::string gate = "adaptive";   // or a fixed threshold in [0, 1]
  int max = 15;                    // drafts per block (1..15)
  bool cost_gate = true;           // draft only when the measured cost model says a block pays
  int deadline_ms = 500;           // per drafter call
  int threads = 1;                 // of a checkpoint drafter
  std::string exe;                 // ferry-drafter binary (default: next to ferry)
};

struct EngineOptions {
  ModelOptions model;              // directory, back-end, threads, streaming options, profile_ops
  int streaming = -1;              // --ssd-streaming 1, --no-ssd-streaming 0, -1: the memory plan decides
  bool cache_set = false;          // --cache-experts given (model.streaming.cache_experts / cache_bytes)
  bool host_pool_set = false;      // --host-pool given (model.streaming.host_pool_bytes)
  int64_t ctx = 4096;              // context per sequence (prompt + reply), tokens
  int64_t prefill_chunk = 0;       // rows per pass of a long prompt, a multiple of 64 (0: the plan chooses)
  DraftOptions draft;
  bool prompt_cache = false;       // ferry-server: keep the last prompt pass and its KDA snapshot
  bool quiet = false;              // no plan / progress lines on stderr
  uint64_t gpu_mem_cap = 0;        // --gpu-mem: plan with at most this much free GPU memory (0 = all)
  uint64_t host_mem_cap = 0;       // --host-mem: plan with at most this much available host memory (0 = all)
};

// Every value and every file the options name, checked before the model loads: thread and queue
// counts, the back-end name, the model directory, the expert files against manifest.json (present,
// right size), the drafter (kind, replay file, checkpoint directory, a vocabulary the model can map).
// Throws UsageError naming the flag.
void validate_engine_options(const EngineOptions& o);

// The verifier's parameters (drafts per block, confidence gate) of checked --draft-max / --draft-gate.
SpecParams draft_spec_params(const DraftOptions& d);

class DrafterClient;
class Runtime;
// The drafter of `--draft` for model m: its sidecar and bridge in rt (which restarts the bridge), up to
// the sidecar's start timeout waited for (*up says whether it came up; a drafter that did not gives
// plain steps until it does). ferry run, ferry chat and ferry-server start theirs here.
std::unique_ptr<DrafterClient> start_drafter(Runtime& rt, const DraftOptions& d, const LoadedModel& m,
                                             bool* up = nullptr);

// Strict checks of the sampling flags of `ferry run` (-n, --temp, --top-p). Throws UsageError.
void validate_sampling(int64_t n_predict, float temp, float top_p);

}  // namespace ferry
