#include "kernels/model/tensor_loader.hpp"

#include <cstring>
#include <sstream>

#include "io/formats/convert.hpp"
#include "io/errors.hpp"

namespace ferry {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

[[noreturn]] void bad_shape(const TensorView& v, const std::string& want) {
  throw TensorError("tensor '" + v.name + "' in " + v.file + " has shape " + shape_str(v.shape) + " (" +
                    to_string(v.dtype) + "), expected " + want);
}

}  // namespace

std::vector<float> to_floats(const TensorView& v) {
  const auto n = static_cast<size_t>(v.numel());
  std::vector<float> out(n);
  switch (v.dtype) {
    case DType::f32:
      std::memcpy(out.data(), v.data, n * 4);
      break;
    case DType::bf16:
      bf16_to_f32_n(v.data, out.data(), n);
      break;
    case DType::f16:
      f16_to_f32_n(v.data, out.data(), n);
      break;
    case DType::f64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, v.data + i * 8, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    case DType::q8_0:
      dequant_q8_0(reinterpret_cast<const BlockQ8_0*>(v.data), out.data(), static_cast<int64_t>(n));
      break;
    case DType::mxfp4:
      dequant_mxfp4(reinterpret_cast<const BlockMxfp4*>(v.data), out.data(), static_cast<int64_t>(n));
      break;
    default:
      throw TensorError("tensor '" + v.name + "' in " + v.file + " has dtype " + to_string(v.dtype) +
                        ", expected a floating-point type");
  }
  return out;
}

bool TensorLoader::has(const std::string& name) const {
  return src_.has(prefix_ + name) || src_.has(name);
}

std::string TensorLoader::resolve(const std::string& name) const {
  if (src_.has(prefix_ + name)) return prefix_ + name;
  if (src_.has(name)) return name;
  throw TensorError("tensor '" + prefix_ + name + "' is missing from " + src_.describe());
}

TensorView TensorLoader::view(const std::string& name) const { return src_.get(resolve(name)); }

Weight TensorLoader::upload_weight(WType type, int64_t rows, int64_t cols, const void* host, size_t bytes) {
  Buf b(be_, (bytes + 3) / 4);
  be_.upload(b.get(), host, bytes);
  Weight w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.data = b.get();
  storage_.push_back(std::move(b));
  return w;
}

Buf TensorLoader::upload_floats(const std::vector<float>& v) {
  Buf b(be_, v.size());
  be_.upload(b.get(), v.data(), v.size() * sizeof(float));
  return b;
}

std::vector<float> TensorLoader::host_floats(const std::string& name, int64_t n, bool allow_longer) {
  const TensorView v = view(name);
  if (v.numel() != n && !(allow_longer && v.numel() > n)) bad_shape(v, std::to_string(n) + " values");
  auto f = to_floats(v);
  f.resize(static_cast<size_t>(n));
  return f;
}

Buf TensorLoader::vector(const std::string& name, int64_t n) { return upload_floats(host_floats(name, n)); }

Buf TensorLoader::vector_prefix(const std::string& name, int64_t n) {
  return upload_floats(host_floats(name, n, true));
}

std::vector<float> TensorLoader::host_matrix(const std::string& base, int64_t rows, int64_t cols) {
  if (has(base + ".weight_packed")) {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    const TensorView p = view(base + ".weight_packed");
    const TensorView s = view(base + ".weight_scale");
    if (p.shape != std::vector<int64_t>{rows, cols / 2}) bad_shape(p, shape_str({rows, cols / 2}));
    if (s.shape != std::vector<int64_t>{rows, cols / 32}) bad_shape(s, shape_str({rows, cols / 32}));
    dequant_ct_mxfp4(p.data, s.data, rows, cols, out.data());
    return out;
  }
  const TensorView v = view(base + ".weight");
  if (v.shape.size() != 2 || v.shape[0] != rows || v.shape[1] != cols) bad_shape(v, shape_str({rows, cols}));
  return to_floats(v);
}

Weight TensorLoader::matrix(const std::string& base, int64_t rows, int64_t cols, SpineType as) {
  if (has(base + ".weight_packed")) {  // compressed-tensors MXFP4: keep it MXFP4, exactly
    const TensorView p = view(base + ".weight_packed");
    const TensorView s = view(base + ".weight_scale");
    if (p.dtype != DType::u8 || p.shape != std::vector<int64_t>{rows, cols / 2}) bad_shape(p, "U8 " + shape_str({rows, cols / 2}));
    if (s.dtype != DType::u8 || s.shape != std::vector<int64_t>{rows, cols / 32}) bad_shape(s, "U8 " + shape_str({rows, cols / 32}));
    std::vector<BlockMxfp4> blocks(static_cast<size_t>(rows * cols / kQK));
    ct_mxfp4_to_ggml(p.data, s.data, rows, cols, blocks.data());
    return upload_weight(WType::mxfp4, rows, cols, blocks.data(), blocks.size() * sizeof(BlockMxfp4));
  }
  const TensorView v = view(base + ".weight");
  if (v.shape.size() != 2 || v.shape[0] != rows || v.shape[1] != cols) bad_shape(v, shape_str({rows, cols}));
  if (v.dtype == DType::q8_0) return upload_weight(WType::q8_0, rows, cols, v.data, v.nbytes);
  if (v.dtype == DType::mxfp4) return upload_weight(WType::mxfp4, rows, cols, v.data, v.nbytes);
  std::vector<float> f = to_floats(v);
  if (as == SpineType::q8_0 && cols % kQK == 0) {
    std::vector<BlockQ8_0> q(static_cast<size_t>(rows * cols / kQK));
    quantize_q8_0(f.data(), q.data(), rows * cols);
    return upload_weight(WType::q8_0, rows, cols, q.data(), q.size() * sizeof(BlockQ8_0));
  }
  return upload_weight(WType::f32, rows, cols, f.data(), f.size() * sizeof(float));
}

}  // namespace ferry
