// Starting the engine every front-end shares: options checked (validate_engine_options), the back-end
// made, the memory plan computed from what the back-end and the host have free (or refused, before any
// weight loads), the plan applied to the streaming options, then the model loaded with progress.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "actors/runtime/engine_options.hpp"
#include "actors/runtime/model_loader.hpp"
#include "io/store/memory_plan.hpp"

namespace ferry {

// What plan_memory needs to know about o's model (footprint from spine.gguf + manifest.json, or the
// checkpoint's config), the context and the explicit cache flags; memory left unknown (0).
PlanRequest plan_request(const EngineOptions& o);

// The plan for o on `be`: GPU memory from the back-end (cudaMemGetInfo), host memory from
// /proc/meminfo MemAvailable.
MemoryPlan plan_engine(const EngineOptions& o, Backend& be);

struct Engine {
  LoadedModel model;
  MemoryPlan plan;
};

// Lines of progress ("plan", "loading") go to `log` (stderr by default, nothing when o.quiet).
using EngineLog = std::function<void(const std::string&)>;

// validate_engine_options, back-end, plan (throws UsageError with the plan's refusal), then
// load_model with the plan applied. o.model is updated to what was loaded (streaming on/off, caches).
// rt: the process's runtime root (actors/runtime/runtime.hpp), which must outlive the Engine; the
// streaming actors run in it (may be null only when the plan does not stream).
Engine start_engine(EngineOptions& o, Runtime* rt, const EngineLog& log = {});

}  // namespace ferry
