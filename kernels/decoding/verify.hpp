// Exact speculative decoding (DESIGN.md "Speculative decoding", "Exactness"): a drafter proposes the
// next tokens, the model runs the current token plus the drafts as one decode-mode block (2-16 rows,
// each routed expert fetched once for the block), keeps the drafts up to the first one its own choice
// disagrees with, and rolls the sequence state back to the last accepted row. Every emitted token and
// its logits are the ones plain decoding (generate.hpp) gives, bit for bit, whatever the drafter says.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "kernels/decoding/generate.hpp"

namespace ferry {

// Up to 15 proposed tokens, each with the drafter's confidence in [0, 1].
struct DraftProposal {
  std::vector<int32_t> ids;
  std::vector<float> conf;  // same length as ids
};

// Asks the drafter for at most max_tokens tokens following `history` (prompt + every emitted token;
// the last one is the token the next block starts with). nullopt = no proposal (drafter off, failed,
// or past its deadline): the engine takes a plain step. The function must never change `history`.
using ProposeFn = std::function<std::optional<DraftProposal>(std::span<const int32_t> history, int max_tokens,
                                                             float gate)>;

// The confidence gate: a proposal is cut at its first token under the threshold. Adaptive: starts at
// 0.9; a fully accepted proposal lowers it by 0.05 (floor 0.5), a proposal whose first draft fails
// raises it by 0.05 (ceiling 0.99), a partial one moves it 0.02 toward whichever side it fared.
struct GateOptions {
  bool adaptive = true;
  float fixed = 0.9f;  // the threshold when not adaptive
};

class DraftGate {
 public:
  explicit DraftGate(const GateOptions& o) : o_(o), t_(o.adaptive ? 0.9f : o.fixed) {}
  float threshold() const { return t_; }
  // How many leading drafts are at or above the threshold.
  size_t cut(const DraftProposal& p) const;
  void update(size_t proposed, size_t accepted);

 private:
  GateOptions o_;
  float t_;
};

// Counters of one run (the fields of the published results, DESIGN.md "Metrics").
struct SpecStats {
  int64_t blocks = 0;      // verification blocks run (2+ rows)
  int64_t accepted = 0;    // drafts accepted
  int64_t drafts = 0;      // drafts verified (after the gate)
  int64_t full = 0;        // blocks whose every draft was accepted
  int64_t partial = 0;     // blocks with some but not all drafts accepted
  int64_t zero = 0;        // blocks with no draft accepted
  int64_t calls = 0;       // drafter calls
  double call_ms = 0;      // total time spent in drafter calls
  int64_t blk_tokens = 0;  // tokens emitted by blocks (accepted drafts + one per block)
  int64_t plain_steps = 0; // single-row steps (no proposal, or everything under the gate)
  int64_t replays = 0;     // rows re-run to roll KDA state back after a partial/zero block
  int64_t cost_gated = 0;  // plain steps the cost gate chose without asking the drafter (SpecParams::cost_gate)
  double mean_call_ms() const { return calls > 0 ? call_ms / static_cast<double>(calls) : 0.0; }
  double acceptance() const { return drafts > 0 ? static_cast<double>(accepted) / static_cast<double>(drafts) : 0.0; }
};

struct SpecParams {
  int draft_max = 15;  // drafts per block (block rows = 1 + drafts <= 16)
  GateOptions gate;
  // Draft only when a block is expected to emit tokens faster than plain steps, by the cost model of
  // this run's own measured step and block times and acceptance (draft_cost.hpp); off = draft whenever
  // the drafter proposes. The engine's option (`--draft-cost-gate`) defaults to on.
  bool cost_gate = false;
};

// The tokens one verification block emitted and how many drafts it accepted.
struct BlockOutcome {
  size_t accepted = 0;
  bool stopped = false;  // a stop id was emitted (generation ends there)
  std::vector<GeneratedToken> emitted;
};

// Runs [cur, drafts...] as one decode-mode block at positions s.len..s.len+k, then emits row after row
// (sampler's choice, FNV-1a hash of the row's logits) until a row's choice differs from the next draft,
// a stop id is emitted, or `limit` tokens are out. Afterwards `s` holds exactly cur and the accepted
// drafts, as if they had been run one plain step at a time (KDA state, conv history, KV/latent/indexer
// rows, length). drafts.size() must be 1..15. logprobs: as GenerateParams::logprobs.
BlockOutcome verify_block(Model& model, SeqState& s, int32_t cur, std::span<const int32_t> drafts, Sampler& sampler,
                          std::span<const int32_t> stop_ids, int64_t limit, SpecStats& st, int logprobs = -1);

// generate() with a drafter: the same tokens, hashes and early-stop rules, in fewer model passes when
// the drafter guesses well. A null `propose` is plain generation.
std::vector<GeneratedToken> generate_speculative(Model& model, SeqState& state, std::span<const int32_t> prompt,
                                                 const GenerateParams& p, const SpecParams& sp,
                                                 const ProposeFn& propose, GenerateMetrics& m, SpecStats& st,
                                                 const std::function<bool(const GeneratedToken&)>& on_token = {});

}  // namespace ferry
