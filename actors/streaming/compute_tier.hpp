// Expert byte layout (ExpertGeometry) and the host compute tier. Without a device tier, compute reads
// expert weights straight from the pinned host slot the bytes landed in (HostComputeTier). With one
// (CUDA), the device-cache manager (device_cache.hpp) and DeviceTier (device_tier.hpp) sit above the
// host pool: a device hit touches no host slot, anything else is uploaded into a device slot on an
// upload stream (see docs/ARCHITECTURE.md, "Tiers").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "io/formats/model_config.hpp"
#include "kernels/model/weights.hpp"
#include "messages/messages.hpp"

namespace ferry {

// Byte layout of one expert file (docs/FORMATS.md): gate [inter, in], up [inter, in], down [in, inter],
// MXFP4 ggml blocks back to back.
struct ExpertGeometry {
  int64_t in = 0, inter = 0;
  uint64_t matrix_bytes(int64_t rows, int64_t cols) const;
  uint64_t payload_bytes() const;
  // Weights viewing `bytes` (any memory compute can read: host on the CPU back-end).
  ExpertWeights view(const std::byte* bytes) const;
};
ExpertGeometry expert_geometry(const ModelConfig& cfg);

class ComputeTier {
 public:
  virtual ~ComputeTier() = default;
  virtual std::string name() const = 0;
  // The weights of k, whose file bytes are at `host` (pinned, valid until the host pool release).
  virtual ExpertWeights weights(const expert_key& k, const std::byte* host) = 0;
  // Compute is done with k's weights.
  virtual void done(const expert_key& k) = 0;
};

class HostComputeTier final : public ComputeTier {
 public:
  explicit HostComputeTier(ExpertGeometry g) : g_(g) {}
  std::string name() const override { return "host"; }
  ExpertWeights weights(const expert_key&, const std::byte* host) override { return g_.view(host); }
  void done(const expert_key&) override {}

 private:
  ExpertGeometry g_;
};

}  // namespace ferry
