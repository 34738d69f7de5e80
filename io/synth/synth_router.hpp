// Fitting a MoE layer's e_score_correction_bias so that the router's expert selection frequencies
// follow a target popularity (real usage counts), and measuring how well they do. The router is
// simulated exactly as the engine runs it (MODEL_SPEC §6: sigmoid scores, + bias for selection only,
// optional group-limited top-k) on random N(0,1) inputs; the fit is the aux-loss-free balancing
// update run in reverse: b_e += eta * (log target_e - log observed_e).
#pragma once

#include <cstdint>
#include <vector>

#include "io/synth/synth.hpp"

namespace ferry {

struct RouterSim {
  int64_t n_experts = 0, hidden = 0, top_k = 0, n_group = 1, topk_group = 1;
  std::vector<float> gate;  // [n_experts, hidden], as stored (BF16-rounded)
};

// sigmoid(x @ gate^T) for `rows` random inputs drawn from (seed, stream).
std::vector<float> router_scores(const RouterSim& r, int64_t rows, uint64_t seed, const char* stream);
// Selection counts per expert for the given scores and bias.
std::vector<int64_t> router_select_counts(const RouterSim& r, const std::vector<float>& scores, const std::vector<float>& bias);

// The experts each of `rows` random inputs from (seed, stream) selects (top-k of scores + bias): the
// request sequence a synthetic model's router makes, for replaying caches offline.
std::vector<std::vector<int>> router_route(const RouterSim& r, const std::vector<float>& bias, int64_t rows,
                                           uint64_t seed, const char* stream);

// Target shares (sum 1) from counts, smoothed by +0.5 so no expert is never chosen.
std::vector<double> usage_shares(const std::vector<int64_t>& counts);

struct BiasFit {
  std::vector<float> bias;
  RouterTracking tracking;  // measured on fresh inputs (layer fields left 0)
};

BiasFit fit_router_bias(const RouterSim& r, const std::vector<double>& target_share, uint64_t seed);

}  // namespace ferry
