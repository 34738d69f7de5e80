// GgufWriter: ggml's layout (src/gguf.cpp gguf_write_to_buf): header, KVs in insertion order,
// tensor infos with offsets = running sum of sizes each padded to the alignment, zero padding to
// the alignment, then the data, every tensor followed by zeros up to the alignment.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/formats/gguf.hpp"

namespace ferry {

GgufWriter::GgufWriter(std::filesystem::path path, uint32_t alignment) : path_(std::move(path)), alignment_(alignment) {
  tmp_ = path_;
  tmp_ += ".tmp";
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) fail(fmt::format("alignment {} is not a power of two", alignment_));
  set("general.alignment", GgufValue::of<uint32_t>(alignment_));
}

GgufWriter::~GgufWriter() {
  if (out_) std::fclose(out_);
  if (!finished_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void GgufWriter::fail(const std::string& what) const { throw FormatError(fmt::format("{}: {}", path_.string(), what)); }

void GgufWriter::set(const std::string& key, GgufValue v) {
  if (header_done_) fail(fmt::format("metadata key '{}' set after tensor data was written", key));
  if (v.type == GgufType::array && v.elem == GgufType::array) fail(fmt::format("metadata key '{}': nested arrays", key));
  auto [it, added] = kv_index_.emplace(key, kvs_.size());
  if (!added) {
    if (key == "general.alignment") fail("general.alignment is set by the writer's constructor");
    kvs_[it->second].second = std::move(v);  // a later set replaces the value, keeping the key's place
    return;
  }
  kvs_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  if (header_done_) fail(fmt::format("tensor '{}' declared after tensor data was written", name));
  if (name.empty() || name.size() > kGgufMaxTensorName)
    fail(fmt::format("tensor name '{}' has {} bytes; GGUF (ggml GGML_MAX_NAME) allows 1..{}", name, name.size(),
                     kGgufMaxTensorName));
  ggml_type_of(dtype);  // throws for dtypes GGUF does not hold here
  if (shape.empty() || shape.size() > kGgufMaxDims)
    fail(fmt::format("tensor '{}': {} dimensions (1..{} allowed)", name, shape.size(), kGgufMaxDims));
  for (auto d : shape)
    if (d < 0) fail(fmt::format("tensor '{}': negative dimension {}", name, d));
  if (dtype_size(dtype) == 0 && shape.back() % kQK != 0)
    fail(fmt::format("tensor '{}': {} needs the last dimension to be a multiple of {}, got {}", name, to_string(dtype),
                     kQK, shape.back()));
  if (!declared_.emplace(name, decls_.size()).second) fail(fmt::format("tensor '{}' declared twice", name));
  uint64_t nbytes = gguf_tensor_bytes(dtype, shape);
  decls_.push_back({name, dtype, shape, data_size_, nbytes});
  data_size_ += (nbytes + alignment_ - 1) / alignment_ * alignment_;
}

void GgufWriter::raw(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, out_) != n) fail(fmt::format("write failed: {}", std::strerror(errno)));
  file_pos_ += n;
}

void GgufWriter::pad_to_alignment() {
  static const uint8_t zeros[256] = {};
  const uint64_t target = (file_pos_ + alignment_ - 1) / alignment_ * alignment_;
  while (file_pos_ < target) raw(zeros, static_cast<size_t>(std::min<uint64_t>(sizeof(zeros), target - file_pos_)));
}

void GgufWriter::write_value(const GgufScalar& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          uint64_t n = x.size();
          raw(&n, 8);
          raw(x.data(), x.size());
        } else if constexpr (std::is_same_v<T, bool>) {
          uint8_t b = x ? 1 : 0;
          raw(&b, 1);
        } else {
          raw(&x, sizeof(T));
        }
      },
      v);
}

void GgufWriter::write_header() {
  out_ = std::fopen(tmp_.c_str(), "wb");
  if (!out_) fail(fmt::format("cannot create {}: {}", tmp_.string(), std::strerror(errno)));
  raw("GGUF", 4);
  uint32_t version = 3;
  int64_t n_tensors = static_cast<int64_t>(decls_.size()), n_kv = static_cast<int64_t>(kvs_.size());
  raw(&version, 4);
  raw(&n_tensors, 8);
  raw(&n_kv, 8);
  for (const auto& [key, v] : kvs_) {
    write_value(GgufScalar(key));
    uint32_t t = static_cast<uint32_t>(v.type);
    raw(&t, 4);
    if (v.type != GgufType::array) {
      write_value(v.scalar);
      continue;
    }
    uint32_t et = static_cast<uint32_t>(v.elem);
    uint64_t n = v.items.size();
    raw(&et, 4);
    raw(&n, 8);
    for (const auto& x : v.items) write_value(x);
  }
  for (const auto& d : decls_) {
    write_value(GgufScalar(d.name));
    uint32_t n_dims = static_cast<uint32_t>(d.shape.size());
    raw(&n_dims, 4);
    for (auto it = d.shape.rbegin(); it != d.shape.rend(); ++it) raw(&*it, 8);  // ne: fastest dimension first
    uint32_t type = static_cast<uint32_t>(ggml_type_of(d.dtype));
    raw(&type, 4);
    raw(&d.offset, 8);
  }
  pad_to_alignment();
  file_pos_ = 0;  // from here on, positions count within the data section
  header_done_ = true;
}

void GgufWriter::write(const std::string& name, const void* data, size_t n) {
  if (!header_done_) write_header();
  // Move past completed tensors, padding each to the alignment.
  while (current_ < decls_.size() && in_current_ == decls_[current_].nbytes && !(n == 0 && decls_[current_].name == name)) {
    pad_to_alignment();
    ++current_;
    in_current_ = 0;
  }
  if (current_ >= decls_.size()) fail(fmt::format("data for '{}' written after every tensor was complete", name));
  const Decl& d = decls_[current_];
  if (d.name != name) fail(fmt::format("data for '{}' written while tensor '{}' is due (declaration order)", name, d.name));
  if (in_current_ + n > d.nbytes)
    fail(fmt::format("tensor '{}': {} bytes written, more than its {} bytes", name, in_current_ + n, d.nbytes));
  raw(data, n);
  in_current_ += n;
}

void GgufWriter::finish() {
  if (finished_) return;
  if (!header_done_) write_header();
  while (current_ < decls_.size() && in_current_ == decls_[current_].nbytes) {
    pad_to_alignment();
    ++current_;
    in_current_ = 0;
  }
  if (current_ != decls_.size())
    fail(fmt::format("finish() before tensor '{}' was complete ({} of {} bytes)", decls_[current_].name, in_current_,
                     decls_[current_].nbytes));
  if (file_pos_ != data_size_) fail(fmt::format("data section is {} bytes, expected {}", file_pos_, data_size_));
  if (std::fflush(out_) != 0 || std::fclose(out_) != 0) {
    out_ = nullptr;
    fail(fmt::format("cannot flush {}: {}", tmp_.string(), std::strerror(errno)));
  }
  out_ = nullptr;
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) fail(fmt::format("cannot rename {} into place: {}", tmp_.string(), ec.message()));
  finished_ = true;
}

}  // namespace ferry
