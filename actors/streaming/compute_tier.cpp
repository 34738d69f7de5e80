#include "actors/streaming/compute_tier.hpp"

#include "io/formats/ggml_blocks.hpp"

namespace ferry {

uint64_t ExpertGeometry::matrix_bytes(int64_t rows, int64_t cols) const {
  return uint64_t(rows * cols / kQK) * sizeof(BlockMxfp4);
}

uint64_t ExpertGeometry::payload_bytes() const { return 2 * matrix_bytes(inter, in) + matrix_bytes(in, inter); }

ExpertWeights ExpertGeometry::view(const std::byte* bytes) const {
  const uint64_t gb = matrix_bytes(inter, in);
  ExpertWeights w;
  w.gate = Weight{WType::mxfp4, inter, in, bytes};
  w.up = Weight{WType::mxfp4, inter, in, bytes + gb};
  w.down = Weight{WType::mxfp4, in, inter, bytes + 2 * gb};
  return w;
}

ExpertGeometry expert_geometry(const ModelConfig& cfg) {
  ExpertGeometry g;
  g.in = cfg.moe.latent_dim > 0 ? cfg.moe.latent_dim : cfg.hidden;
  g.inter = cfg.moe.moe_inter;
  return g;
}

}  // namespace ferry
