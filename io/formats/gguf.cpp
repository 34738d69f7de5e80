// GgufFile: the GGUF v3 reader. Every length read from the file (strings, arrays, counts) is checked
// against the bytes that remain before anything is allocated, so a corrupt or hostile file fails
// with a FormatError naming the file and the offset instead of allocating or reading out of bounds.
#include "io/formats/gguf.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/errors.hpp"
#include "io/formats/size_limits.hpp"

namespace ferry {

const char* to_string(GgufType t) {
  static const char* const kNames[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "?";
}

std::optional<DType> dtype_of_ggml(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::f32: return DType::f32;
    case GgmlType::f16: return DType::f16;
    case GgmlType::bf16: return DType::bf16;
    case GgmlType::q8_0: return DType::q8_0;
    case GgmlType::mxfp4: return DType::mxfp4;
  }
  return std::nullopt;
}

GgmlType ggml_type_of(DType t) {
  switch (t) {
    case DType::f32: return GgmlType::f32;
    case DType::f16: return GgmlType::f16;
    case DType::bf16: return GgmlType::bf16;
    case DType::q8_0: return GgmlType::q8_0;
    case DType::mxfp4: return GgmlType::mxfp4;
    default: throw FormatError(fmt::format("dtype {} is not stored in GGUF files (f32, f16, bf16, q8_0, mxfp4 are)", to_string(t)));
  }
}

uint64_t gguf_tensor_bytes(DType t, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (auto d : shape) numel = checked_mul(numel, d, "GGUF tensor element count");
  if (t == DType::q8_0) return uint64_t(checked_mul(numel / kQK, int64_t(sizeof(BlockQ8_0)), "GGUF tensor bytes"));
  if (t == DType::mxfp4) return uint64_t(checked_mul(numel / kQK, int64_t(sizeof(BlockMxfp4)), "GGUF tensor bytes"));
  return uint64_t(checked_mul(numel, int64_t(dtype_size(t)), "GGUF tensor bytes"));
}

namespace {

// Bounds-checked little-endian reads over the mapped file.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t size, const std::string& file) : p_(p), size_(size), file_(file) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      throw FormatError(fmt::format("{}: truncated: {} needs {} bytes at offset {}, only {} remain", file_, what, n,
                                    pos_, left()));
  }
  template <class T> T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what) {
    uint64_t len = read<uint64_t>(what + " length");
    if (len > left())
      throw FormatError(fmt::format("{}: {}: string length {} at offset {} runs past the end of the file ({} bytes left)",
                                    file_, what, len, pos_ - 8, left()));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& file_;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    case GgufType::string: return 8;  // at least its length field
    default: return 0;
  }
}

GgufScalar read_scalar(Cursor& c, GgufType t, const std::string& what) {
  switch (t) {
    case GgufType::u8: return c.read<uint8_t>(what);
    case GgufType::i8: return c.read<int8_t>(what);
    case GgufType::u16: return c.read<uint16_t>(what);
    case GgufType::i16: return c.read<int16_t>(what);
    case GgufType::u32: return c.read<uint32_t>(what);
    case GgufType::i32: return c.read<int32_t>(what);
    case GgufType::f32: return c.read<float>(what);
    case GgufType::boolean: return c.read<uint8_t>(what) != 0;
    case GgufType::string: return c.read_string(what);
    case GgufType::u64: return c.read<uint64_t>(what);
    case GgufType::i64: return c.read<int64_t>(what);
    case GgufType::f64: return c.read<double>(what);
    default: break;
  }
  return {};
}

GgufValue read_value(Cursor& c, const std::string& file, const std::string& key) {
  GgufValue v;
  const std::string what = fmt::format("metadata key '{}'", key);
  auto t = c.read<uint32_t>(what + " type");
  if (t > 12) throw FormatError(fmt::format("{}: {} has unknown value type {}", file, what, t));
  v.type = static_cast<GgufType>(t);
  if (v.type != GgufType::array) {
    v.scalar = read_scalar(c, v.type, what);
    return v;
  }
  auto et = c.read<uint32_t>(what + " array type");
  if (et > 12 || et == static_cast<uint32_t>(GgufType::array))
    throw FormatError(fmt::format("{}: {} is an array of unsupported element type {}", file, what, et));
  v.elem = static_cast<GgufType>(et);
  auto n = c.read<uint64_t>(what + " array length");
  // Each element takes at least scalar_size bytes: refuse a length the file cannot hold.
  if (n > c.left() / scalar_size(v.elem))
    throw FormatError(fmt::format("{}: {}: array length {} runs past the end of the file ({} bytes left)", file, what,
                                  n, c.left()));
  v.items.reserve(n);
  for (uint64_t i = 0; i < n; ++i) v.items.push_back(read_scalar(c, v.elem, what));
  return v;
}

GgufTensorInfo read_tensor_info(Cursor& c, const std::string& f, int64_t i, uint32_t alignment) {
  GgufTensorInfo t;
  t.name = c.read_string(fmt::format("tensor info {} name", i));
  auto bad = [&](const std::string& what) { return FormatError(fmt::format("{}: tensor '{}': {}", f, t.name, what)); };
  if (t.name.size() > kGgufMaxTensorName) throw bad(fmt::format("name longer than {} bytes", kGgufMaxTensorName));
  auto n_dims = c.read<uint32_t>("tensor n_dims");
  if (n_dims > kGgufMaxDims) throw bad(fmt::format("{} dimensions (at most {})", n_dims, kGgufMaxDims));
  std::vector<int64_t> ne(n_dims);
  for (auto& d : ne) {
    d = c.read<int64_t>("tensor dimension");
    if (d < 0) throw bad(fmt::format("negative dimension {}", d));
  }
  auto type = c.read<uint32_t>("tensor type");
  auto dt = dtype_of_ggml(type);
  if (!dt) throw bad(fmt::format("ggml type {} is not supported (f32=0, f16=1, q8_0=8, bf16=30, mxfp4=39 are)", type));
  t.dtype = *dt;
  t.offset = c.read<uint64_t>("tensor offset");
  t.shape.assign(ne.rbegin(), ne.rend());  // GGUF ne[0] is the fastest dimension: PyTorch's last
  uint64_t numel = 1;
  for (auto d : ne)
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) throw bad("element count overflows");
  if (numel > (1ull << 56)) throw bad("element count is implausibly large");  // keeps byte sizes far from overflow
  if (dtype_size(t.dtype) == 0 && (ne.empty() || ne[0] % kQK != 0))
    throw bad(fmt::format("{} rows of {} elements are not whole {}-element blocks", to_string(t.dtype),
                          ne.empty() ? 0 : ne[0], kQK));
  t.nbytes = gguf_tensor_bytes(t.dtype, t.shape);
  if (t.offset % alignment != 0) throw bad(fmt::format("offset {} is not a multiple of the alignment {}", t.offset, alignment));
  return t;
}

}  // namespace

GgufFile::GgufFile(const std::filesystem::path& path) : file_(path) { parse(); }

void GgufFile::parse() {
  const std::string& f = file_.path();
  Cursor c(file_.data(), file_.size(), f);
  c.need(4, "the magic");
  if (std::memcmp(file_.data(), "GGUF", 4) != 0) throw FormatError(fmt::format("{}: bad magic: not a GGUF file", f));
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("version");
  if (version_ != 3) throw FormatError(fmt::format("{}: GGUF version {} is not supported (3 is)", f, version_));
  auto n_tensors = c.read<int64_t>("tensor count");
  auto n_kv = c.read<int64_t>("metadata count");
  // A KV takes >= 8+4+1 bytes and a tensor info >= 8+4+4+8: counts beyond what is left are corrupt.
  if (n_kv < 0 || static_cast<uint64_t>(n_kv) > c.left() / 13)
    throw FormatError(fmt::format("{}: metadata count {} is impossible for a {}-byte file", f, n_kv, file_.size()));
  if (n_tensors < 0 || static_cast<uint64_t>(n_tensors) > c.left() / 24)
    throw FormatError(fmt::format("{}: tensor count {} is impossible for a {}-byte file", f, n_tensors, file_.size()));
  for (int64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string(fmt::format("metadata key {}", i));
    GgufValue v = read_value(c, f, key);
    if (!kv_index_.emplace(key, kvs_.size()).second) throw FormatError(fmt::format("{}: duplicate metadata key '{}'", f, key));
    kvs_.emplace_back(std::move(key), std::move(v));
  }
  if (has_key("general.alignment")) {
    alignment_ = get_value<uint32_t>("general.alignment");
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
      fail_key("general.alignment", fmt::format("{} is not a power of two", alignment_));
  }
  for (int64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t = read_tensor_info(c, f, i, alignment_);
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      throw FormatError(fmt::format("{}: tensor '{}': duplicate tensor name", f, t.name));
    tensors_.push_back(std::move(t));
  }
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  check_data_section();
}

void GgufFile::check_data_section() {
  const std::string& f = file_.path();
  if (data_offset_ > file_.size())
    throw FormatError(fmt::format("{}: truncated: the data section would start at {}, past the end ({} bytes)", f,
                                  data_offset_, file_.size()));
  const uint64_t data_size = file_.size() - data_offset_;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : tensors_) {
    // Like ggml, which reads the data section as the sum of padded tensor sizes, the padding after
    // each tensor must be present too.
    const uint64_t padded = (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
    if (t.offset > data_size || padded > data_size - t.offset)
      throw FormatError(fmt::format("{}: tensor '{}': bytes [{}, {}) (padded to the alignment) of the data section are "
                                    "past its end ({} bytes)", f, t.name, t.offset, t.offset + padded, data_size));
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->nbytes > by_offset[i]->offset)
      throw FormatError(fmt::format("{}: tensor '{}' overlaps tensor '{}'", f, by_offset[i]->name, by_offset[i - 1]->name));
}

TensorView GgufFile::get(const std::string& name) const {
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) throw TensorError(fmt::format("{}: no tensor '{}'", file_.path(), name));
  const GgufTensorInfo& t = tensors_[it->second];
  TensorView v;
  v.name = t.name;
  v.dtype = t.dtype;
  v.shape = t.shape;
  v.data = file_.data() + data_offset_ + t.offset;
  v.nbytes = t.nbytes;
  v.file = file_.path();
  return v;
}

std::vector<std::string> GgufFile::names() const {
  std::vector<std::string> out;
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

uint64_t GgufFile::tensor_offset(const std::string& name) const {
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) throw TensorError(fmt::format("{}: no tensor '{}'", file_.path(), name));
  return tensors_[it->second].offset;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  for (const auto& kv : kvs_) out.push_back(kv.first);
  return out;
}

void GgufFile::fail_key(const std::string& key, const std::string& what) const {
  throw FormatError(fmt::format("{}: metadata key '{}': {}", file_.path(), key, what));
}

const GgufValue& GgufFile::value(const std::string& key) const {
  auto it = kv_index_.find(key);
  if (it == kv_index_.end()) fail_key(key, "missing");
  return kvs_[it->second].second;
}

template <class T> T GgufFile::get_value(const std::string& key) const {
  const auto& v = value(key);
  if (v.type != gguf_type_of<T>())
    fail_key(key, fmt::format("is {}{}, not {}", to_string(v.type), v.type == GgufType::array ? fmt::format(" of {}", to_string(v.elem)) : "",
                              to_string(gguf_type_of<T>())));
  return std::get<T>(v.scalar);
}

template <class T> std::optional<T> GgufFile::find_value(const std::string& key) const {
  if (!has_key(key)) return std::nullopt;
  return get_value<T>(key);
}

template <class T> std::vector<T> GgufFile::get_array(const std::string& key) const {
  const auto& v = value(key);
  if (v.type != GgufType::array || v.elem != gguf_type_of<T>())
    fail_key(key, fmt::format("is {}{}, not an array of {}", to_string(v.type),
                              v.type == GgufType::array ? fmt::format(" of {}", to_string(v.elem)) : "",
                              to_string(gguf_type_of<T>())));
  std::vector<T> out;
  out.reserve(v.items.size());
  for (const auto& x : v.items) out.push_back(std::get<T>(x));
  return out;
}

#define FERRY_GGUF_INSTANTIATE(T)                                                  \
  template T GgufFile::get_value<T>(const std::string&) const;                     \
  template std::optional<T> GgufFile::find_value<T>(const std::string&) const;     \
  template std::vector<T> GgufFile::get_array<T>(const std::string&) const;
FERRY_GGUF_INSTANTIATE(uint8_t)
FERRY_GGUF_INSTANTIATE(int8_t)
FERRY_GGUF_INSTANTIATE(uint16_t)
FERRY_GGUF_INSTANTIATE(int16_t)
FERRY_GGUF_INSTANTIATE(uint32_t)
FERRY_GGUF_INSTANTIATE(int32_t)
FERRY_GGUF_INSTANTIATE(float)
FERRY_GGUF_INSTANTIATE(bool)
FERRY_GGUF_INSTANTIATE(std::string)
FERRY_GGUF_INSTANTIATE(uint64_t)
FERRY_GGUF_INSTANTIATE(int64_t)
FERRY_GGUF_INSTANTIATE(double)
#undef FERRY_GGUF_INSTANTIATE

}  // namespace ferry
