// The non-routed tensors of a synthetic model held in memory as a TensorSource, so `ferry synth
// --prepared` can hand them to the same spine writer `ferry prepare` uses (write_spine_gguf) without
// a temporary checkpoint on disk. Tensors are generated in parallel (each from its own name-seeded
// stream, so the bytes are those synth_checkpoint writes); names() lists them in the order prepare
// reads a synth checkpoint in, which fixes the spine's tensor order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/formats/model_config.hpp"
#include "io/synth/synth.hpp"
#include "io/synth/synth_layout.hpp"
#include "io/formats/tensor_source.hpp"

namespace ferry {

struct SynthUsage;

class SynthSpineSource final : public TensorSource {
 public:
  // `checkpoint_order`: the order names() reports. A sharded checkpoint's index is read back sorted
  // by name (the index JSON is parsed into a sorted map); a single-file one in write order.
  enum class Order : uint8_t { sorted, layout };
  SynthSpineSource(const ModelConfig& c, uint64_t seed, Order order, const SynthUsage* usage);

  size_t size() const { return specs_.size(); }
  const TensorSpec& spec(size_t i) const { return specs_[i]; }
  // Indexes in the order to generate them: largest first, so the embedding and lm_head (the
  // longest single streams) start at once.
  std::vector<size_t> generation_order() const;
  // Fills tensor i; safe to call concurrently for distinct i. With a usage file the router
  // correction biases are left to fit_biases.
  void generate(size_t i);
  // With a usage file: fits every MoE layer's correction bias from its (generated) router weight,
  // `threads` layers at a time. Returns the tracking per layer in layer order.
  std::vector<RouterTracking> fit_biases(int threads);
  // Frees every tensor's bytes (after the spine is written); get() then fails.
  void release();

  bool has(const std::string& name) const override { return index_.count(name) != 0; }
  TensorView get(const std::string& name) const override;
  std::vector<std::string> names() const override { return names_; }
  std::string describe() const override { return "synth spine (in memory)"; }

 private:
  bool fitted(const TensorSpec& t) const;

  const ModelConfig& c_;
  uint64_t seed_;
  const SynthUsage* usage_;
  std::vector<TensorSpec> specs_;                   // layout order
  std::vector<std::unique_ptr<uint8_t[]>> data_;    // stored bytes (BF16 / F32), once generated
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::string> names_;
};

}  // namespace ferry
