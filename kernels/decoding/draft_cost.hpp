// The drafter's cost gate: draft only when a verification block is expected to emit tokens faster than
// plain steps, from what this run measured (DESIGN.md "Speculative decoding").
//
// Why: a block of 1 + k rows costs T(k) (compute per row, expert bytes, the KDA snapshot and the
// replay of kept rows after a rejection) and emits E(k) = 1 + p + p^2 + ... + p^k tokens on average when
// each draft is accepted with probability p (a chain: the first rejection ends it). A plain step costs
// T0 and emits one. Drafting k pays when E(k) / T(k) > 1 / T0. Both sides differ by back-end and tier
// (on the CPU rows cost nearly linearly; streaming pays per expert byte, so rows are almost free), so
// they are measured online: T0 and T(k) as moving averages of this run's own steps and blocks (an
// unmeasured T(k) from a line through the measured ones), p from the blocks' outcomes. When drafting does
// not pay, a rare probe block keeps the numbers fresh: 1 draft at first, twice as many after a probe whose
// drafts were all accepted, back to 1 and twice the spacing after one that was not, so a drafter that
// never helps costs almost nothing and one that always does is found. While drafting pays, every
// kPlainRefresh-th choice is a plain step anyway, whose time replaces T0's average: T0 stays a
// measurement of now (one taken while the machine was busy, never repeated since blocks won, would
// otherwise keep a losing drafter on).
//
// Asking costs too: a drafter call (c seconds, on the critical path) may offer nothing usable (an
// n-gram drafter with no match). With q the share of calls that offered drafts, asking for k drafts
// emits q E(k) + (1 - q) tokens in c + q T(k) + (1 - q) T0 seconds; a drafter that is cheap to ask
// (c << T0, the streaming tier) is asked every step even when it rarely offers, one that costs a
// third of a CPU step and never offers is asked only at the probes.
#pragma once

#include <cstddef>
#include <vector>

namespace ferry {

class DraftCostModel {
 public:
  static constexpr size_t kPlainRefresh = 32;  // while drafting, one plain step in this many choices

  explicit DraftCostModel(size_t max_drafts = 15);

  void plain_step(double seconds);
  // One drafter call took `seconds`; `offered`: it proposed drafts the block could use (else the step
  // runs plain; a probe that got nothing backs off like a rejected one).
  void asked(double seconds, bool offered);
  // A block of 1 + drafts rows (verify + rollback) that accepted `accepted` drafts; `cut` = it ended
  // early for another reason (the generation limit or a stop token), so a shortfall is no rejection.
  void block(size_t drafts, size_t accepted, double seconds, bool cut = false);

  // How many of `offered` drafts to verify now (0 = a plain step is expected to be faster). Counts
  // a decision; a probe (1 draft) comes when plain steps have won `probe_every` times in a row.
  size_t choose(size_t offered);

  double acceptance() const;           // per-draft acceptance estimate (Laplace-smoothed)
  double expected_tokens(size_t k) const;  // E(k) at the current acceptance
  double block_seconds(size_t k) const;    // measured or estimated T(k); 0 when nothing is measured
  double plain_seconds() const { return plain_; }
  double offer_rate() const;               // q: share of calls that offered drafts (1 before any call)
  double block_gain(size_t k) const;       // E(k) T0 / max(T(k), T0): a block's promise when drafts come

 private:
  double rate(size_t k) const;  // expected tokens per second of a block of k drafts
  double block_cost(size_t k) const;  // T(k), never under T0

  size_t max_;
  double plain_ = 0;             // EWMA of plain step seconds (0 = none yet)
  std::vector<double> block_;    // [k]: EWMA of the seconds of blocks with k drafts (0 = none)
  double accepted_ = 0, rejected_ = 0;
  double call_ = 0;              // EWMA of a drafter call's seconds
  double asked_ = 0, offered_ = 0;
  size_t since_probe_ = 0, probe_every_ = 32, probe_k_ = 1;
  size_t since_plain_ = 0;       // choices since the last measured plain step
  bool refreshing_ = false;      // the next plain step re-measures T0 after a stretch of blocks
  bool probing_ = false;
};

}  // namespace ferry
