// `--draft` for `ferry run`: generation through the drafter bridge, and the stats (DESIGN.md
// "Metrics": blocks, accepted, drafts, full, partial, zero, calls, call_ms, blk_tokens).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "actors/runtime/engine_options.hpp"
#include "actors/runtime/model_loader.hpp"
#include "kernels/decoding/verify.hpp"
#include "messages/messages.hpp"

namespace ferry {
class Runtime;
}

namespace ferry::cli {

struct DraftRun {
  SpecStats spec;
  drafter_status bridge;
};

// generate() with the drafter sidecar on (starts it, stops it at the end); the bridge runs in `rt`,
// the process's runtime.
std::vector<GeneratedToken> generate_with_drafter(Runtime& rt, const DraftOptions& f, LoadedModel& m, SeqState& state,
                                                  std::span<const int32_t> prompt, const GenerateParams& gp,
                                                  GenerateMetrics& g, DraftRun& out,
                                                  const std::function<bool(const GeneratedToken&)>& on_token);

nlohmann::json draft_json(const DraftRun& r);
void print_draft_stats(const DraftRun& r);  // one line to stderr

}  // namespace ferry::cli
