// Next-token choice from one row of logits: greedy, or temperature + top-p with a seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace ferry {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  // Greedy ties go to the lowest id, so greedy decoding is a pure function of the logits.
  static int32_t argmax(std::span<const float> logits);
  int32_t sample(std::span<const float> logits);
  bool greedy() const { return p_.temperature <= 0.0f; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace ferry
