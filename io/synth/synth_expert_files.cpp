#include "io/synth/synth_expert_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/formats/ggml_blocks.hpp"
#include "io/synth/synth_layout.hpp"
#include "io/synth/synth_values.hpp"

namespace ferry {

namespace {

constexpr size_t kDirectAlign = 4096;

}  // namespace

void AlignedBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

AlignedBuffer::AlignedBuffer(size_t n) : n_(n) {
  void* p = nullptr;
  if (::posix_memalign(&p, kDirectAlign, std::max(n, kDirectAlign)) != 0) throw std::bad_alloc();
  std::memset(p, 0, n);
  p_.reset(static_cast<uint8_t*>(p));
}

void build_synth_expert(const ModelConfig& c, uint64_t seed, int layer, int expert, uint8_t* buf) {
  uint8_t* at = buf;
  for (ExpertMatrix m : {ExpertMatrix::gate, ExpertMatrix::up, ExpertMatrix::down}) {
    const auto [rows, cols] = expert_matrix_shape(c, m);
    synth_expert_blocks(rows, cols, seed, expert_matrix_name(c, layer, expert, m), reinterpret_cast<BlockMxfp4*>(at));
    at += rows * (cols / kQK) * int64_t(sizeof(BlockMxfp4));
  }
}

}  // namespace ferry
