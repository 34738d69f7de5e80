// SafetensorsFile: the reader. Validation follows huggingface/safetensors src/tensor.rs: u64 header
// length N <= 100 MB, N + 8 <= file size, a JSON object starting with '{', known dtypes, integer
// shapes, data_offsets whose span equals numel * dtype size, tensors covering the buffer exactly
// (no overlaps, no holes).
#include "io/formats/safetensors.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/errors.hpp"

namespace ferry {

namespace {
struct NameDType {
  const char* name;
  DType dtype;
};
constexpr NameDType kDTypes[] = {{"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16}, {"F64", DType::f64},
                                 {"U8", DType::u8},   {"I8", DType::i8},   {"I16", DType::i16},   {"U16", DType::u16},
                                 {"I32", DType::i32}, {"U32", DType::u32}, {"I64", DType::i64},   {"U64", DType::u64},
                                 {"BOOL", DType::boolean}};
}  // namespace

std::optional<DType> safetensors_dtype(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (t == d.dtype) return d.name;
  throw FormatError(fmt::format("dtype {} cannot be stored in safetensors", to_string(t)));
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  parse_header();
  check_layout();
}

void SafetensorsFile::parse_header() {
  const auto& p = file_.path();
  if (file_.size() < 8)
    throw FormatError(fmt::format("{}: truncated: {} bytes, shorter than the 8-byte header length", p, file_.size()));
  uint64_t n = 0;
  std::memcpy(&n, file_.data(), 8);  // little-endian host (x86-64, aarch64)
  if (n > kSafetensorsMaxHeader)
    throw FormatError(fmt::format("{}: header length {} exceeds the {}-byte limit", p, n, kSafetensorsMaxHeader));
  if (n + 8 > file_.size())
    throw FormatError(fmt::format("{}: header length {} runs past the end of the {}-byte file", p, n, file_.size()));
  header_len_ = n;
  const char* text = reinterpret_cast<const char*>(file_.data() + 8);
  if (n == 0 || text[0] != '{') throw FormatError(fmt::format("{}: header does not start with '{{'", p));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, text + n);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: header is not valid JSON: {}", p, e.what()));
  }
  if (!j.is_object()) throw FormatError(fmt::format("{}: header is not a JSON object", p));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw FormatError(fmt::format("{}: __metadata__ is not an object", p));
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          throw FormatError(fmt::format("{}: __metadata__ value of '{}' is not a string", p, m.key()));
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    entries_.push_back(parse_entry(it.key(), &*it));
  }
}

SafetensorsFile::Entry SafetensorsFile::parse_entry(const std::string& name, const void* json_value) const {
  const auto& v = *static_cast<const nlohmann::json*>(json_value);
  auto bad = [&](const std::string& what) {
    return FormatError(fmt::format("{}: tensor '{}': {}", file_.path(), name, what));
  };
  if (!v.is_object()) throw bad("entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) throw bad(fmt::format("missing '{}'", key));
  if (v.size() != 3) throw bad("entry has fields other than dtype, shape, data_offsets");
  if (!v["dtype"].is_string()) throw bad("dtype is not a string");
  auto dtype_name = v["dtype"].get<std::string>();
  auto dt = safetensors_dtype(dtype_name);
  if (!dt) throw bad(fmt::format("unknown or unsupported dtype '{}'", dtype_name));
  Entry e{name, *dt, {}, 0, 0};
  if (!v["shape"].is_array()) throw bad("shape is not a list");
  uint64_t numel = 1;
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned()) throw bad(fmt::format("shape entry {} is not a non-negative integer", d.dump()));
    uint64_t x = d.get<uint64_t>();
    if (x > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, x, &numel)) throw bad("shape overflows");
    e.shape.push_back(static_cast<int64_t>(x));
  }
  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw bad("data_offsets is not a pair of non-negative integers");
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  uint64_t buffer = file_.size() - 8 - header_len_;
  if (e.begin > e.end || e.end > buffer)
    throw bad(fmt::format("data_offsets [{}, {}) are not inside the {}-byte data buffer", e.begin, e.end, buffer));
  uint64_t want = 0;
  if (__builtin_mul_overflow(numel, dtype_size(e.dtype), &want)) throw bad("byte size overflows");
  if (e.end - e.begin != want)
    throw bad(fmt::format("data_offsets span {} bytes but shape x {} needs {} ({} elements)", e.end - e.begin,
                          dtype_name, want, numel));
  return e;
}

void SafetensorsFile::check_layout() {
  // Sorted by offset, each tensor must start where the previous one ended: no overlap, no hole.
  std::vector<size_t> order(entries_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(entries_[a].begin, entries_[a].end) < std::tie(entries_[b].begin, entries_[b].end);
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (size_t i : order) {
    const Entry& e = entries_[i];
    if (e.begin < pos)
      throw FormatError(fmt::format("{}: tensor '{}' [{}, {}) overlaps tensor '{}' [{}, {})", file_.path(), e.name,
                                    e.begin, e.end, prev->name, prev->begin, prev->end));
    if (e.begin > pos)
      throw FormatError(fmt::format("{}: hole in the data buffer: bytes [{}, {}) before tensor '{}' belong to no tensor",
                                    file_.path(), pos, e.begin, e.name));
    pos = e.end;
    prev = &e;
  }
  uint64_t buffer = file_.size() - 8 - header_len_;
  if (pos != buffer)
    throw FormatError(fmt::format("{}: the tensors cover {} bytes but the data buffer has {} ({} trailing bytes)",
                                  file_.path(), pos, buffer, buffer - pos));
  std::vector<Entry> sorted;
  sorted.reserve(entries_.size());
  for (size_t i : order) sorted.push_back(std::move(entries_[i]));
  entries_ = std::move(sorted);
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].name, i);
}

bool SafetensorsFile::has(const std::string& name) const { return index_.count(name) != 0; }

TensorView SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw TensorError(fmt::format("{}: no tensor '{}'", file_.path(), name));
  const Entry& e = entries_[it->second];
  TensorView v;
  v.name = e.name;
  v.dtype = e.dtype;
  v.shape = e.shape;
  v.data = file_.data() + 8 + header_len_ + e.begin;
  v.nbytes = e.end - e.begin;
  v.file = file_.path();
  return v;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

}  // namespace ferry
