// safetensors files (MODEL_SPEC.md §11): a memory-mapped reader with strict header validation, and a
// streaming writer that keeps memory bounded for multi-GB files.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/formats/mapped_file.hpp"
#include "io/formats/tensor_source.hpp"

namespace ferry {

// "F32" <-> DType::f32 and so on for the plain dtypes; nullopt for names ferry cannot hold.
std::optional<DType> safetensors_dtype(std::string_view name);
// The safetensors name of a plain dtype; throws FormatError for block types (q8_0, mxfp4).
const char* safetensors_dtype_name(DType t);

// The reader caps the JSON header at 100 MB, as the safetensors reference implementation does.
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

class SafetensorsFile final : public TensorSource {
 public:
  // Maps the file and validates the whole header; throws FormatError naming the file (and the
  // tensor, where one is at fault) when the bytes do not follow the format.
  explicit SafetensorsFile(const std::filesystem::path& path);

  bool has(const std::string& name) const override;
  TensorView get(const std::string& name) const override;
  std::vector<std::string> names() const override;  // in data order
  std::string describe() const override { return file_.path(); }

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }
  uint64_t header_bytes() const { return header_len_; }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;  // relative to the data buffer
  };
  void parse_header();
  Entry parse_entry(const std::string& name, const void* json_value) const;
  void check_layout();

  MappedFile file_;
  uint64_t header_len_ = 0;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Streaming writer: declare every tensor first (name, dtype, shape), then append each tensor's bytes
// in declaration order (in as many pieces as convenient). The header is space-padded so the data
// buffer starts at a multiple of 8. Writes `<path>.tmp` and renames it over `path` on finish(); a
// writer destroyed before finish() removes the temporary file.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::filesystem::path path);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void set_metadata(const std::string& key, const std::string& value);
  void declare(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  // Appends bytes of the tensor now being written; `name` must be that tensor (a check on the caller's order).
  void append(const std::string& name, const void* data, size_t n);
  void finish();
  uint64_t data_bytes() const { return total_; }  // sum of the declared tensors' sizes

 private:
  struct Decl {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  void write_header();
  void write_raw(const void* data, size_t n);
  [[noreturn]] void fail(const std::string& what) const;

  std::filesystem::path path_, tmp_;
  std::FILE* out_ = nullptr;
  std::vector<Decl> decls_;
  std::map<std::string, std::string> metadata_;
  std::unordered_map<std::string, size_t> declared_;
  uint64_t total_ = 0;
  size_t current_ = 0;      // tensor being appended
  uint64_t written_ = 0;    // bytes of the data buffer written so far
  bool header_done_ = false, finished_ = false;
};

// One tensor for write_safetensors_checkpoint: `fill` writes exactly nbytes into dst when the
// tensor's turn comes, so only one tensor's bytes are in memory at a time.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::function<void(uint8_t* dst, size_t nbytes)> fill;
};

// Writes a Hugging Face checkpoint into dir: one `model.safetensors` when everything fits in
// max_shard_bytes, else shards `model-0000K-of-0000N.safetensors` (a shard is closed before it would
// exceed the limit; a tensor bigger than the limit gets a shard of its own) plus
// `model.safetensors.index.json`. Returns the files written.
std::vector<std::filesystem::path> write_safetensors_checkpoint(const std::filesystem::path& dir,
                                                               const std::vector<TensorToWrite>& tensors,
                                                               uint64_t max_shard_bytes);

}  // namespace ferry
