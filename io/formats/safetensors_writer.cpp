// SafetensorsWriter and write_safetensors_checkpoint: streaming output, one tensor in memory at a time.
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/formats/safetensors.hpp"

namespace ferry {

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path) : path_(std::move(path)) {
  tmp_ = path_;
  tmp_ += ".tmp";
}

SafetensorsWriter::~SafetensorsWriter() {
  if (out_) std::fclose(out_);
  if (!finished_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void SafetensorsWriter::fail(const std::string& what) const {
  throw FormatError(fmt::format("{}: {}", path_.string(), what));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  if (header_done_) fail("metadata set after tensor data was written");
  metadata_[key] = value;
}

void SafetensorsWriter::declare(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  if (header_done_) fail(fmt::format("tensor '{}' declared after tensor data was written", name));
  if (name.empty() || name == "__metadata__") fail(fmt::format("invalid tensor name '{}'", name));
  if (!declared_.emplace(name, decls_.size()).second) fail(fmt::format("tensor '{}' declared twice", name));
  uint64_t bytes = dtype_size(dtype);
  safetensors_dtype_name(dtype);  // throws for block types
  for (auto d : shape) {
    if (d < 0) fail(fmt::format("tensor '{}': negative dimension {}", name, d));
    bytes *= static_cast<uint64_t>(d);
  }
  decls_.push_back({name, dtype, shape, total_, total_ + bytes});
  total_ += bytes;
}

void SafetensorsWriter::write_raw(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, out_) != n) fail(fmt::format("write failed: {}", std::strerror(errno)));
}

void SafetensorsWriter::write_header() {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  for (const auto& d : decls_)
    h[d.name] = {{"dtype", safetensors_dtype_name(d.dtype)}, {"shape", d.shape}, {"data_offsets", {d.begin, d.end}}};
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer then starts 8-byte aligned
  out_ = std::fopen(tmp_.c_str(), "wb");
  if (!out_) fail(fmt::format("cannot create {}: {}", tmp_.string(), std::strerror(errno)));
  uint64_t n = text.size();
  write_raw(&n, 8);
  write_raw(text.data(), text.size());
  header_done_ = true;
}

void SafetensorsWriter::append(const std::string& name, const void* data, size_t n) {
  if (!header_done_) write_header();
  if (n == 0) {  // nothing to place; an empty tensor owns no bytes
    if (!declared_.count(name)) fail(fmt::format("bytes appended for undeclared tensor '{}'", name));
    return;
  }
  while (current_ < decls_.size() && written_ == decls_[current_].end) ++current_;  // complete or empty
  if (current_ >= decls_.size()) fail(fmt::format("bytes for '{}' appended after every tensor was written", name));
  const Decl& d = decls_[current_];
  if (d.name != name) fail(fmt::format("bytes for '{}' appended while tensor '{}' is due (declaration order)", name, d.name));
  if (written_ + n > d.end)
    fail(fmt::format("tensor '{}': {} bytes appended, more than its {} bytes", name, written_ + n - d.begin, d.end - d.begin));
  write_raw(data, n);
  written_ += n;
}

void SafetensorsWriter::finish() {
  if (finished_) return;
  if (!header_done_) write_header();
  if (written_ != total_) {
    while (current_ < decls_.size() && written_ >= decls_[current_].end) ++current_;
    fail(fmt::format("finish() with {} of {} data bytes written (tensor '{}' incomplete)", written_, total_,
                     current_ < decls_.size() ? decls_[current_].name : "?"));
  }
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

namespace {
uint64_t tensor_bytes(const TensorToWrite& t) {
  uint64_t n = dtype_size(t.dtype);
  for (auto d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}
}  // namespace

std::vector<std::filesystem::path> write_safetensors_checkpoint(const std::filesystem::path& dir,
                                                               const std::vector<TensorToWrite>& tensors,
                                                               uint64_t max_shard_bytes) {
  // Plan: consecutive tensors fill a shard until the next would push it past the limit.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t b = tensor_bytes(tensors[i]);
    if (!shards.back().empty() && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += b;
  }
  std::filesystem::create_directories(dir);
  const size_t n = shards.size();
  std::vector<std::filesystem::path> files;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  std::vector<uint8_t> buf;
  for (size_t s = 0; s < n; ++s) {
    std::string fname = n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n);
    SafetensorsWriter w(dir / fname);
    w.set_metadata("format", "pt");
    for (size_t i : shards[s]) w.declare(tensors[i].name, tensors[i].dtype, tensors[i].shape);
    for (size_t i : shards[s]) {
      buf.assign(tensor_bytes(tensors[i]), 0);
      tensors[i].fill(buf.data(), buf.size());
      w.append(tensors[i].name, buf.data(), buf.size());
      weight_map[tensors[i].name] = fname;
    }
    w.finish();
    total += w.data_bytes();
    files.push_back(dir / fname);
  }
  if (n > 1) {
    nlohmann::ordered_json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    auto path = dir / "model.safetensors.index.json";
    auto tmp = path;
    tmp += ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw FormatError(fmt::format("{}: cannot create: {}", tmp.string(), std::strerror(errno)));
    std::string text = idx.dump(2) + "\n";
    bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok) throw FormatError(fmt::format("{}: write failed", tmp.string()));
    std::filesystem::rename(tmp, path);
    files.push_back(path);
  }
  return files;
}

}  // namespace ferry
