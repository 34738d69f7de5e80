// Expert files for `ferry synth --prepared`: one routed expert generated straight into an
// O_DIRECT-aligned buffer in the expert file layout (docs/FORMATS.md). The files are written with
// write_file_atomic (io/store/expert_store.hpp) through O_DIRECT where the filesystem allows it (47 GB
// of experts would otherwise sit in dirty pages and be written back behind the generator's back).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "io/formats/model_config.hpp"

namespace ferry {

// A zeroed buffer aligned to 4096 bytes (O_DIRECT needs aligned memory, offsets and lengths).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t n);
  uint8_t* data() { return p_.get(); }
  const uint8_t* data() const { return p_.get(); }
  size_t size() const { return n_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> p_;
  size_t n_ = 0;
};

// Fills buf (expert_file_bytes(c) long; the padding must already be zero) with expert (layer,
// expert)'s gate, up and down matrices as ggml MXFP4 blocks: the values synth_checkpoint writes as
// compressed-tensors, which `ferry prepare` repacks exactly into these bytes.
void build_synth_expert(const ModelConfig& c, uint64_t seed, int layer, int expert, uint8_t* buf);


}  // namespace ferry
