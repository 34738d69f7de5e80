// GGUF v3 (MODEL_SPEC.md §11; ggml include/gguf.h, src/gguf.cpp): a memory-mapped reader that is a
// TensorSource, and a streaming writer whose files follow ggml's layout byte for byte (header, KVs,
// tensor infos, zero padding to the alignment, data with every tensor zero-padded to the alignment),
// so llama.cpp and other third-party readers load them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "io/formats/ggml_blocks.hpp"
#include "io/formats/mapped_file.hpp"
#include "io/formats/tensor_source.hpp"

namespace ferry {

// GGUF metadata value types (gguf.h enum gguf_type).
enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
  u64 = 10, i64 = 11, f64 = 12
};
const char* to_string(GgufType t);

constexpr uint32_t kGgufDefaultAlignment = 32;
// ggml's GGML_MAX_NAME is 64 including the terminating NUL: a tensor name has at most 63 bytes.
constexpr size_t kGgufMaxTensorName = 63;
constexpr uint32_t kGgufMaxDims = 4;

using GgufScalar = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                                uint64_t, int64_t, double>;

// The GgufType of a C++ type (uint8_t -> u8, std::string -> string, ...).
template <class T> constexpr GgufType gguf_type_of();

// One metadata value: a scalar, or an array of scalars of one type (GGUF has no nested arrays here:
// ggml's reader refuses them too).
struct GgufValue {
  GgufType type = GgufType::u8;
  GgufType elem = GgufType::u8;  // element type when type == array
  GgufScalar scalar;             // when type != array
  std::vector<GgufScalar> items; // when type == array

  template <class T> static GgufValue of(T v) {
    GgufValue g;
    g.type = gguf_type_of<T>();
    g.scalar = GgufScalar(std::in_place_type<T>, std::move(v));
    return g;
  }
  static GgufValue of(const char* s) { return of(std::string(s)); }
  template <class T> static GgufValue array(const std::vector<T>& v) {
    GgufValue g;
    g.type = GgufType::array;
    g.elem = gguf_type_of<T>();
    g.items.reserve(v.size());
    for (const auto& x : v) g.items.emplace_back(std::in_place_type<T>, x);
    return g;
  }
};

// DType <-> ggml type id for the tensor types ferry stores in GGUF (f32, f16, bf16, q8_0, mxfp4).
std::optional<DType> dtype_of_ggml(uint32_t ggml_type);
GgmlType ggml_type_of(DType t);  // throws FormatError for dtypes GGUF files here do not hold
// Bytes of a tensor of `t` with PyTorch-order `shape` (block types: rows * blocks * block size).
uint64_t gguf_tensor_bytes(DType t, const std::vector<int64_t>& shape);

// One tensor info of a GGUF file.
struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // PyTorch order (GGUF ne reversed)
  uint64_t offset = 0;         // relative to the data section
  uint64_t nbytes = 0;         // unpadded
};

class GgufFile final : public TensorSource {
 public:
  // Maps and validates the whole file; throws FormatError naming the file (and key / tensor).
  explicit GgufFile(const std::filesystem::path& path);

  bool has(const std::string& name) const override { return tensor_index_.count(name) != 0; }
  TensorView get(const std::string& name) const override;  // shape in PyTorch order (GGUF ne reversed)
  std::vector<std::string> names() const override;         // in file order
  std::string describe() const override { return file_.path(); }

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t tensor_offset(const std::string& name) const;  // relative to data_offset()

  bool has_key(const std::string& key) const { return kv_index_.count(key) != 0; }
  std::vector<std::string> keys() const;  // in file order
  const GgufValue& value(const std::string& key) const;  // throws FormatError naming a missing key
  // Typed getters; a missing key or a value of another type is a FormatError naming the key.
  template <class T> T get_value(const std::string& key) const;
  template <class T> std::optional<T> find_value(const std::string& key) const;
  template <class T> std::vector<T> get_array(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensor_infos() const { return tensors_; }

 private:
  void parse();
  void check_data_section();
  [[noreturn]] void fail_key(const std::string& key, const std::string& what) const;

  MappedFile file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Streaming writer: set metadata and declare every tensor first, then write each tensor's bytes in
// declaration order (in pieces if convenient). `general.alignment` (u32) is written first. The file
// is written as `<path>.tmp` and renamed over `path` by finish(); a writer destroyed unfinished
// removes the temporary file.
class GgufWriter {
 public:
  explicit GgufWriter(std::filesystem::path path, uint32_t alignment = kGgufDefaultAlignment);
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  void set(const std::string& key, GgufValue v);
  template <class T> void set_value(const std::string& key, T v) { set(key, GgufValue::of(std::move(v))); }
  template <class T> void set_array(const std::string& key, const std::vector<T>& v) { set(key, GgufValue::array(v)); }
  // shape in PyTorch order; dtype one of f32, f16, bf16, q8_0, mxfp4 (block types: last dim % 32 == 0).
  void add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  void write(const std::string& name, const void* data, size_t n);
  void finish();

 private:
  struct Decl {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, nbytes;
  };
  void write_header();
  void write_value(const GgufScalar& v);
  void raw(const void* p, size_t n);
  void pad_to_alignment();  // zeros up to the next multiple of the alignment
  [[noreturn]] void fail(const std::string& what) const;

  std::filesystem::path path_, tmp_;
  uint32_t alignment_;
  std::FILE* out_ = nullptr;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<Decl> decls_;
  std::unordered_map<std::string, size_t> declared_;
  uint64_t data_size_ = 0;  // padded
  size_t current_ = 0;
  uint64_t in_current_ = 0;  // bytes of decls_[current_] written
  uint64_t file_pos_ = 0;   // in the header: from the file start; then: within the data section
  bool header_done_ = false, finished_ = false;
};

template <class T> constexpr GgufType gguf_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return GgufType::u8;
  else if constexpr (std::is_same_v<T, int8_t>) return GgufType::i8;
  else if constexpr (std::is_same_v<T, uint16_t>) return GgufType::u16;
  else if constexpr (std::is_same_v<T, int16_t>) return GgufType::i16;
  else if constexpr (std::is_same_v<T, uint32_t>) return GgufType::u32;
  else if constexpr (std::is_same_v<T, int32_t>) return GgufType::i32;
  else if constexpr (std::is_same_v<T, float>) return GgufType::f32;
  else if constexpr (std::is_same_v<T, bool>) return GgufType::boolean;
  else if constexpr (std::is_same_v<T, std::string>) return GgufType::string;
  else if constexpr (std::is_same_v<T, uint64_t>) return GgufType::u64;
  else if constexpr (std::is_same_v<T, int64_t>) return GgufType::i64;
  else if constexpr (std::is_same_v<T, double>) return GgufType::f64;
  else static_assert(sizeof(T) == 0, "not a GGUF scalar type");
}

}  // namespace ferry
