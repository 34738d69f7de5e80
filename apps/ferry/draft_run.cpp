#include "apps/ferry/draft_run.hpp"

#include <cstdio>

#include "actors/drafter/drafter_bridge.hpp"
#include "actors/runtime/runtime.hpp"
#include "io/errors.hpp"

namespace ferry::cli {

std::vector<GeneratedToken> generate_with_drafter(Runtime& rt, const DraftOptions& f, LoadedModel& m, SeqState& state,
                                                  std::span<const int32_t> prompt, const GenerateParams& gp,
                                                  GenerateMetrics& g, DraftRun& out,
                                                  const std::function<bool(const GeneratedToken&)>& on_token) {
  const SpecParams sp = draft_spec_params(f);
  // The sidecar gets its start-up time before the clock of the run starts; it may still fail.
  const std::unique_ptr<DrafterClient> client = start_drafter(rt, f, m);
  std::vector<GeneratedToken> toks = generate_speculative(*m.model, state, prompt, gp, sp, client->propose_fn(), g, out.spec, on_token);
  out.bridge = client->status();
  return toks;
}

nlohmann::json draft_json(const DraftRun& r) {
  const SpecStats& s = r.spec;
  nlohmann::json j;
  j["blocks"] = s.blocks;
  j["accepted"] = s.accepted;
  j["drafts"] = s.drafts;
  j["full"] = s.full;
  j["partial"] = s.partial;
  j["zero"] = s.zero;
  j["calls"] = s.calls;
  j["call_ms"] = s.mean_call_ms();
  j["blk_tokens"] = s.blk_tokens;
  j["plain_steps"] = s.plain_steps;
  j["replayed_rows"] = s.replays;
  j["cost_gated"] = s.cost_gated;
  j["acceptance"] = s.acceptance();
  j["fallbacks"] = r.bridge.fallbacks;
  j["restarts"] = r.bridge.restarts;
  return j;
}

void print_draft_stats(const DraftRun& r) {
  const SpecStats& s = r.spec;
  std::fprintf(stderr,
               "ferry: draft | blocks %lld | accepted %lld of %lld drafts (%.1f%%) | full %lld partial %lld zero %lld | "
               "calls %lld, mean %.2f ms | blk_tokens %lld (%.2f per block) | plain steps %lld (%lld by the cost gate) | "
               "fallbacks %llu "
               "restarts %llu\n",
               static_cast<long long>(s.blocks), static_cast<long long>(s.accepted), static_cast<long long>(s.drafts),
               100.0 * s.acceptance(), static_cast<long long>(s.full), static_cast<long long>(s.partial),
               static_cast<long long>(s.zero), static_cast<long long>(s.calls), s.mean_call_ms(),
               static_cast<long long>(s.blk_tokens),
               s.blocks ? static_cast<double>(s.blk_tokens) / static_cast<double>(s.blocks) : 0.0,
               static_cast<long long>(s.plain_steps), static_cast<long long>(s.cost_gated),
               static_cast<unsigned long long>(r.bridge.fallbacks),
               static_cast<unsigned long long>(r.bridge.restarts));
}

}  // namespace ferry::cli
