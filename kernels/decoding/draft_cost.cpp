#include "kernels/decoding/draft_cost.hpp"

#include <algorithm>
#include <cmath>

namespace ferry {
namespace {

constexpr double kAlpha = 0.2;  // EWMA weight of the newest measurement
// A block must promise this much more than the plain steps it replaces (block_gain), besides beating
// them on average over the drafter's offers (rate). At break-even the timings' noise decides, and
// on a loaded machine a drafter whose every draft is wrong kept winning that coin toss (33 blocks of 200
// tokens under ctest -j2 with a sanitizer build beside it); drafting that gains under 3 % is not worth
// the variance.
constexpr double kMinGain = 1.03;

double ewma(double old, double x) { return old > 0 ? old + kAlpha * (x - old) : x; }

}  // namespace

DraftCostModel::DraftCostModel(size_t max_drafts)
    : max_(std::max<size_t>(max_drafts, 1)), block_(max_ + 1, 0.0) {}

void DraftCostModel::plain_step(double seconds) {
  plain_ = refreshing_ ? seconds : ewma(plain_, seconds);
  refreshing_ = false;
  since_plain_ = 0;
}

void DraftCostModel::asked(double seconds, bool offered) {
  call_ = ewma(call_, seconds);
  asked_ += 1;
  if (offered) {
    offered_ += 1;
    return;
  }
  if (!probing_) return;
  probing_ = false;  // the probe found nothing to verify: ask again later, less often
  probe_every_ = std::min<size_t>(probe_every_ * 2, 1024);
}

double DraftCostModel::offer_rate() const { return (offered_ + 1) / (asked_ + 1); }

void DraftCostModel::block(size_t drafts, size_t accepted, double seconds, bool cut) {
  const size_t k = std::min(drafts, max_);
  if (k == 0) return;
  block_[k] = ewma(block_[k], seconds);
  accepted_ += double(accepted);
  const bool rejected = accepted < drafts && !cut;
  if (rejected) rejected_ += 1;
  if (!probing_) return;
  probing_ = false;
  if (rejected) {  // back to small probes, further apart
    probe_k_ = 1;
    probe_every_ = std::min<size_t>(probe_every_ * 2, 1024);
  } else {  // every draft held: the next probe tries a longer block (as far apart: a lucky 1-draft probe
            // at 50 % acceptance must not bring probes back every few steps)
    probe_k_ = std::min(probe_k_ * 2, max_);
  }
}

// T(k) as the decisions use it: a block computes at least a plain step's row, so a measured T(k) under
// T0 is noise (a plain step timed while the machine was busy) and must not make drafting look free.
double DraftCostModel::block_cost(size_t k) const { return std::max(block_seconds(k), plain_); }

// Judged by the model, not by a block's own measured tokens: choosing the best of noisy per-k averages
// would keep drafting on a lucky streak (measured on the simulated decodes: 0.79-0.87x plain at 50-90 %).
double DraftCostModel::rate(size_t k) const {
  const double t = block_cost(k);
  if (t <= 0) return 0.0;
  const double q = offer_rate();
  return (q * expected_tokens(k) + (1 - q)) / (call_ + q * t + (1 - q) * plain_);
}

// What a block of k drafts promises over the plain steps it replaces, when the drafter offers them.
double DraftCostModel::block_gain(size_t k) const {
  return plain_ > 0 ? expected_tokens(k) * plain_ / block_cost(k) : 0.0;
}

// A weak prior (half a draft each way): a long run of accepted probes must be able to convince the
// model, since on the CPU only near-certain acceptance pays ((k + 1) / (1 + 0.9 k) is 1.10 at k = 15).
double DraftCostModel::acceptance() const { return (accepted_ + 0.5) / (accepted_ + rejected_ + 1); }

double DraftCostModel::expected_tokens(size_t k) const {
  const double p = acceptance();
  double e = 0, term = 1;
  for (size_t i = 0; i <= k; ++i, term *= p) e += term;
  return e;
}

// Measured T(k), else the least-squares line through (0, T0) and the measured blocks; before any block
// is measured, a row is assumed to cost half a plain step (the probe then measures it).
double DraftCostModel::block_seconds(size_t k) const {
  k = std::min(k, max_);
  if (block_[k] > 0) return block_[k];
  if (plain_ <= 0) return 0;
  double sxy = 0, sxx = 0;
  for (size_t j = 1; j <= max_; ++j)
    if (block_[j] > 0) {
      sxy += double(j) * (block_[j] - plain_);
      sxx += double(j) * double(j);
    }
  const double slope = sxx > 0 ? std::max(0.0, sxy / sxx) : 0.5 * plain_;
  return plain_ + slope * double(k);
}

size_t DraftCostModel::choose(size_t offered) {
  offered = std::min(offered, max_);
  if (offered == 0 || plain_ <= 0) return 0;  // measure a plain step first
  size_t best = 0;
  double best_rate = 1.0 / plain_;
  for (size_t k = 1; k <= offered; ++k)
    if (const double r = rate(k); r > best_rate && block_gain(k) >= kMinGain) {
      best_rate = r;
      best = k;
    }
  if (best > 0) {
    since_probe_ = 0;
    if (++since_plain_ >= kPlainRefresh) {  // re-measure T0 (plain_step resets the count)
      refreshing_ = true;
      return 0;
    }
    return best;
  }
  const bool measured = asked_ > 0 || std::any_of(block_.begin(), block_.end(), [](double t) { return t > 0; });
  if (++since_probe_ < probe_every_ && measured) return 0;
  since_probe_ = 0;
  probing_ = true;
  return std::min(probe_k_, offered);
}

}  // namespace ferry
