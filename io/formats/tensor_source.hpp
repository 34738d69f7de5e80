// TensorSource: read-only access to named tensors, whatever file format holds them (a safetensors
// checkpoint, sharded or not; a GGUF file). The model builder asks for tensors by their Hugging Face
// name and gets a view into mapped memory; it never learns which file or format served it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

// Storage types. The first group are safetensors dtypes; q8_0 and mxfp4 are ggml block types
// (GGUF). A "ct_mxfp4" tensor is not a dtype: compressed-tensors stores MXFP4 as two U8 tensors
// (weight_packed, weight_scale), joined by io/formats/ct_mxfp4.hpp.
enum class DType : uint8_t { f32, f16, bf16, f64, u8, i8, i16, u16, i32, u32, i64, u64, boolean, q8_0, mxfp4 };

const char* to_string(DType t);
// Bytes per element for plain dtypes; 0 for block types (use row_bytes).
size_t dtype_size(DType t);

struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;   // PyTorch order: shape[0] is the slowest dimension
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;             // the file that holds it, for error messages

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // Throws TensorError naming the tensor (and the source) when it is missing.
  virtual TensorView get(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // A short description for messages, e.g. the directory or file path.
  virtual std::string describe() const = 0;
};

}  // namespace ferry
