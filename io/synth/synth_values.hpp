// Deterministic random values for synthetic tensors. Each tensor's stream is seeded from the run
// seed and the tensor's name, so a value never depends on the order tensors are written in (and a
// reader can regenerate any tensor, e.g. the router weights when fitting correction biases).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/formats/ggml_blocks.hpp"
#include "io/synth/synth_layout.hpp"

namespace ferry {

class SynthRng {
 public:
  SynthRng(uint64_t seed, const std::string& stream);
  uint64_t next();
  double uniform();  // [0, 1)
  float normal();    // N(0,1), Box-Muller
  // Approximately N(0,1) at ~1 ns a value: a 48-bit popcount (binomial, variance 12) smoothed by a
  // uniform. Used for the billions of routed-expert values, whose MXFP4 rounding dwarfs the
  // difference from a true Gaussian.
  float fast_normal();

 private:
  uint64_t s_[4];
  bool have_spare_ = false;
  float spare_ = 0;
};

// The values of a non-routed tensor as F32 (before rounding to its stored dtype).
std::vector<float> synth_values(const TensorSpec& t, const ModelConfig& c, uint64_t seed);
// Writes a non-routed tensor's stored bytes (BF16 / F32) into dst (t.bytes() long).
void synth_fill_plain(const TensorSpec& t, const ModelConfig& c, uint64_t seed, uint8_t* dst);
// One routed expert matrix as ggml MXFP4 blocks [rows, cols/32]: N(0,1)/sqrt(cols), quantized.
// `stream` is the matrix's base name (without .weight_packed).
std::vector<BlockMxfp4> synth_expert_blocks(int64_t rows, int64_t cols, uint64_t seed, const std::string& stream);
// The same blocks written into out (rows * cols / 32 of them), e.g. straight into an expert file buffer.
void synth_expert_blocks(int64_t rows, int64_t cols, uint64_t seed, const std::string& stream, BlockMxfp4* out);

}  // namespace ferry
