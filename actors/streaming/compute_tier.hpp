// Expert byte layout (ExpertGeometry): where compute finds an expert's weights in its bytes. Without a
// device tier, compute reads the weights straight from the pinned host slot the bytes landed in
// (ExpertGeometry::view of the slot). With one (CUDA), the device-cache manager (device_cache.hpp) and
// DeviceTier (device_tier.hpp) sit above the host pool: a device hit touches no host slot, anything
// else is uploaded into a device slot on an upload stream (see docs/ARCHITECTURE.md, "Tiers").
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

}  // namespace ferry
