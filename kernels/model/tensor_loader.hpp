// Turns checkpoint tensors (TensorView) into back-end weights, checking names, dtypes and shapes so
// that a wrong checkpoint fails with the tensor's name instead of computing garbage.
#pragma once

#include <string>
#include <vector>

#include "io/formats/tensor_source.hpp"
#include "kernels/backend.hpp"
#include "kernels/model/weights.hpp"

namespace ferry {

class TensorLoader {
 public:
  TensorLoader(const TensorSource& src, Backend& be, std::string prefix, std::vector<Buf>& storage)
      : src_(src), be_(be), prefix_(std::move(prefix)), storage_(storage) {}

  // Resolves `name` (given without the wrapper prefix, e.g. "model.norm.weight") to the name the
  // source holds: with the prefix (HF checkpoints) or without it (prepared spine.gguf).
  bool has(const std::string& name) const;
  std::string resolve(const std::string& name) const;

  // A matrix [rows, cols]: BF16/F16/F32 (stored as `as`), Q8_0 (kept), compressed-tensors MXFP4
  // (name + ".weight_packed"/".weight_scale", kept as MXFP4) or ggml MXFP4.
  Weight matrix(const std::string& base, int64_t rows, int64_t cols, SpineType as);
  // A vector of n floats (any float dtype; shape may be [n] or [1, n] or [1,1,n,1] ...).
  Buf vector(const std::string& name, int64_t n);
  // Same, but only the first n of a longer vector (K3's A_log stores head_dim entries for H heads).
  Buf vector_prefix(const std::string& name, int64_t n);
  // The whole tensor as host floats, shape-checked to numel == n.
  std::vector<float> host_floats(const std::string& name, int64_t n, bool allow_longer = false);
  // A matrix dequantized to host floats [rows, cols].
  std::vector<float> host_matrix(const std::string& base, int64_t rows, int64_t cols);

  Weight upload_weight(WType type, int64_t rows, int64_t cols, const void* host, size_t bytes);
  Buf upload_floats(const std::vector<float>& v);

 private:
  TensorView view(const std::string& name) const;
  const TensorSource& src_;
  Backend& be_;
  std::string prefix_;
  std::vector<Buf>& storage_;
};

// Float conversion of a plain-dtype tensor view (f32/f16/bf16/f64).
std::vector<float> to_floats(const TensorView& v);

}  // namespace ferry
