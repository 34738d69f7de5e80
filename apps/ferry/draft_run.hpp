// `--draft` for `ferry run`: flags, generation through the drafter bridge, and the stats (DESIGN.md
// "Metrics": blocks, accepted, drafts, full, partial, zero, calls, call_ms, blk_tokens).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "actors/runtime/model_loader.hpp"
#include "kernels/decoding/verify.hpp"
#include "messages/messages.hpp"

namespace CLI {
class App;
}

namespace ferry {
class Runtime;
}

namespace ferry::cli {

struct DraftFlags {
  std::string spec;                // "" = off; ngram[:N] | replay:FILE[,opts] | qwen3:DIR
  std::string gate = "adaptive";   // or a fixed threshold in [0, 1]
  int max = 15;                    // drafts per block (1..15)
  int deadline_ms = 500;           // per drafter call
  int threads = 1;                 // of a checkpoint drafter
  std::string exe;                 // ferry-drafter binary (default: next to ferry)
};

void add_draft_flags(CLI::App* c, DraftFlags& f);
SpecParams spec_params(const DraftFlags& f);  // throws ConfigError on a bad --draft-gate/--draft-max

struct DraftRun {
  SpecStats spec;
  drafter_status bridge;
};

// generate() with the drafter sidecar on (starts it, stops it at the end); the bridge runs in `rt`,
// the process's runtime.
std::vector<GeneratedToken> generate_with_drafter(Runtime& rt, const DraftFlags& f, LoadedModel& m, SeqState& state,
                                                  std::span<const int32_t> prompt, const GenerateParams& gp,
                                                  GenerateMetrics& g, DraftRun& out,
                                                  const std::function<bool(const GeneratedToken&)>& on_token);

nlohmann::json draft_json(const DraftRun& r);
void print_draft_stats(const DraftRun& r);  // one line to stderr

}  // namespace ferry::cli
