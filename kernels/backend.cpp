#include "kernels/backend.hpp"

#include <string>

#include "io/errors.hpp"
#include "io/formats/ggml_blocks.hpp"
#include "kernels/cpu/cpu_backend.hpp"

namespace ferry {

size_t Weight::row_bytes() const {
  const auto c = static_cast<size_t>(cols);
  switch (type) {
    case WType::f32:
      return c * sizeof(float);
    case WType::q8_0:
    case WType::mxfp4:
      if (cols % kQK != 0)
        throw TensorError("Weight::row_bytes: a quantized weight needs cols divisible by 32, got cols=" +
                          std::to_string(cols));
      return c / kQK * (type == WType::q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockMxfp4));
  }
  throw TensorError("Weight::row_bytes: unknown WType " + std::to_string(static_cast<int>(type)));
}

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<cpu::CpuBackend>(threads); }

}  // namespace ferry
