#include "kernels/decoding/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace ferry {

int32_t Sampler::argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (greedy()) return argmax(logits);
  const size_t n = logits.size();
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> pr(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += pr[i] = std::exp(static_cast<double>(logits[i] - mx) / p_.temperature);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pr[static_cast<size_t>(a)] > pr[static_cast<size_t>(b)]; });
  // Nucleus: the smallest prefix whose probability reaches top_p (at least one token).
  size_t keep = 0;
  double mass = 0;
  while (keep < n && (keep == 0 || mass < p_.top_p * sum)) mass += pr[static_cast<size_t>(order[keep++])];
  // A uniform draw from 53 random bits: the same on every platform, unlike std::uniform_real_distribution.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * mass;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += pr[static_cast<size_t>(order[i])];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

}  // namespace ferry
