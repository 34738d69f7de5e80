// Expert file names and geometry, checksums, atomic writes, the manifest and usage files.
#include "io/store/expert_store.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/errors.hpp"
#include "io/formats/ggml_blocks.hpp"
#include "io/formats/size_limits.hpp"
#include "io/synth/synth_layout.hpp"
#include "io/regular_file.hpp"

namespace fs = std::filesystem;

namespace ferry {

std::string expert_file_name(int layer, int expert) { return fmt::format("L{}-E{}.bin", layer, expert); }

bool parse_expert_file_name(const std::string& name, int& layer, int& expert) {
  int l = -1, e = -1, n = 0;
  if (std::sscanf(name.c_str(), "L%d-E%d.bin%n", &l, &e, &n) != 2 || n != int(name.size()) || l < 0 || e < 0)
    return false;
  if (expert_file_name(l, e) != name) return false;  // rejects "L01-E2.bin", "L+1-..."
  layer = l;
  expert = e;
  return true;
}

int64_t expert_payload_bytes(const ModelConfig& c) {
  int64_t total = 0;
  for (ExpertMatrix m : {ExpertMatrix::gate, ExpertMatrix::up, ExpertMatrix::down}) {
    const auto s = expert_matrix_shape(c, m);
    total += s.rows * (s.cols / kQK) * int64_t(sizeof(BlockMxfp4));
  }
  return total;
}

int64_t expert_file_bytes(const ModelConfig& c) {
  const int64_t p = expert_payload_bytes(c);
  return (p + kExpertFileAlign - 1) / kExpertFileAlign * kExpertFileAlign;
}

uint64_t xxh64_bytes(const void* data, size_t n) { return XXH64(data, n, 0); }

std::vector<uint64_t> xxh64_parts(const void* data, size_t n, uint64_t part_bytes) {
  std::vector<uint64_t> out;
  const auto* p = static_cast<const std::byte*>(data);
  for (size_t at = 0; at < n; at += part_bytes) out.push_back(XXH64(p + at, std::min<size_t>(part_bytes, n - at), 0));
  return out;
}

namespace {
// Opens p for hashing: with `direct`, O_DIRECT as the engine reads (so a drive that returns other bytes
// than the page cache holds is caught); EINVAL (a filesystem without O_DIRECT) falls back to buffered.
int open_for_hash(const fs::path& p, bool direct, bool& used_direct) {
  used_direct = false;
  if (direct) {
    const int fd = open_regular_file(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0) {
      used_direct = true;
      return fd;
    }
    if (errno != EINVAL) throw FormatError(fmt::format("{}: cannot open: {}", p.string(), open_error_text(errno)));
  }
  const int fd = open_regular_file(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(fmt::format("{}: cannot open: {}", p.string(), open_error_text(errno)));
  return fd;
}
}  // namespace

uint64_t xxh64_file(const fs::path& p, int64_t* size, bool direct, bool* used_direct) {
  bool is_direct = false;
  const int fd = open_for_hash(p, direct, is_direct);
  if (used_direct) *used_direct = is_direct;
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> st(XXH64_createState(), XXH64_freeState);
  XXH64_reset(st.get(), 0);
  constexpr size_t kChunk = size_t(4) << 20;  // a multiple of the 4096-byte O_DIRECT alignment
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(4096, kChunk)), std::free);
  int64_t total = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf.get(), kChunk);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      throw FormatError(fmt::format("{}: read failed: {}", p.string(), std::strerror(err)));
    }
    if (r == 0) break;
    XXH64_update(st.get(), buf.get(), size_t(r));
    total += r;
  }
  ::close(fd);
  if (size) *size = total;
  return XXH64_digest(st.get());
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

uint64_t parse_hex64(const std::string& s) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw FormatError(fmt::format("'{}' is not a 16-digit lower-case hex xxh64", s));
  return std::stoull(s, nullptr, 16);
}

namespace {

[[noreturn]] void fail_io(const fs::path& p, const char* what, int err) {
  throw FormatError(fmt::format("{}: {} failed: {}", p.string(), what, std::strerror(err)));
}

// Writes all of data to fd at offset 0; returns 0 or the errno of the failed write.
int write_all(int fd, const char* data, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(fd, data + done, n - done, off_t(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    done += size_t(w);
  }
  return 0;
}

// Creates `tmp` and writes the bytes, through O_DIRECT when asked and possible; returns whether it was
// used. tmpfs and some network filesystems refuse O_DIRECT at open (EINVAL), and a device whose logical
// block is larger than 4096 refuses the write: both fall back to buffered writes.
bool write_tmp(const fs::path& tmp, const char* data, size_t n, bool want_direct) {
  constexpr size_t kAlign = 4096;
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  bool direct = want_direct && reinterpret_cast<uintptr_t>(data) % kAlign == 0 && n % kAlign == 0;
  int fd = direct ? ::open(tmp.c_str(), flags | O_DIRECT, 0644) : -1;
  if (fd < 0) {
    direct = false;
    fd = ::open(tmp.c_str(), flags, 0644);
  }
  if (fd < 0) fail_io(tmp, "create", errno);
  int err = write_all(fd, data, n);
  if (err == EINVAL && direct) {
    direct = false;
    ::close(fd);
    fd = ::open(tmp.c_str(), flags, 0644);
    if (fd < 0) fail_io(tmp, "create", errno);
    err = write_all(fd, data, n);
  }
  if (err == 0 && ::fdatasync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    fail_io(tmp, "write", err);
  }
  return direct;
}

}  // namespace

bool write_file_atomic(const fs::path& path, const void* data, size_t n, AtomicWrite how) {
  // unique_tmp: two processes saving the same file (usage.json) must not write one temporary; a
  // resumable writer (prepare) keeps the fixed name so a rerun after a kill replaces the leftover.
  const fs::path tmp = how.unique_tmp ? fs::path(fmt::format("{}.{}.tmp", path.string(), ::getpid()))
                                      : fs::path(path.string() + ".tmp");
  const bool direct = write_tmp(tmp, static_cast<const char*>(data), n, how.direct);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail_io(path, "rename", errno);
  if (how.sync_dir) fsync_directory(path.has_parent_path() ? path.parent_path() : fs::path("."));
  return direct;
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_io(dir, "open", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail_io(dir, "fsync", err);
}

Manifest make_manifest(const ModelConfig& c, const std::string& config_text, std::vector<std::string> dirs,
                       int64_t spine_bytes, uint64_t spine_xxh64) {
  Manifest m;
  m.config_hash = hex64(xxh64_bytes(config_text.data(), config_text.size()));
  m.n_layers = c.n_layers;
  m.n_experts = c.moe.n_experts;
  const bool routed = c.moe.n_experts > 0 && std::find(c.ffn.begin(), c.ffn.end(), Ffn::moe) != c.ffn.end();
  if (routed) {  // a dense model has no expert files
    m.expert_bytes = expert_payload_bytes(c);
    m.file_bytes = expert_file_bytes(c);
    m.part_bytes = int64_t(kPartHashBytes);
  }
  m.dirs = std::move(dirs);
  m.spine_bytes = spine_bytes;
  m.spine_xxh64 = spine_xxh64;
  return m;
}

// ---- manifest ----

void write_manifest(const fs::path& file, const Manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = m.format;
  j["config_hash"] = m.config_hash;
  j["n_layers"] = m.n_layers;
  j["n_experts"] = m.n_experts;
  j["expert_bytes"] = m.expert_bytes;
  j["file_bytes"] = m.file_bytes;
  j["dirs"] = m.dirs;
  j["spine"] = {{"file", m.spine_file}, {"bytes", m.spine_bytes}, {"xxh64", hex64(m.spine_xxh64)}};
  if (m.part_bytes > 0) j["part_bytes"] = m.part_bytes;
  auto& ex = j["experts"] = nlohmann::ordered_json::array();
  for (const auto& e : m.experts) {
    nlohmann::ordered_json x = {{"layer", e.layer}, {"expert", e.expert}, {"xxh64", hex64(e.xxh64)}, {"dirs", e.dirs}};
    if (!e.part_xxh64.empty()) {
      std::string parts;  // one string of 16-digit hex hashes: a third of the size of a JSON array of them
      for (uint64_t h : e.part_xxh64) parts += hex64(h);
      x["parts"] = parts;
    }
    ex.push_back(std::move(x));
  }
  // One expert per line: readable, and diff-friendly for 82k entries.
  std::string text = "{\n";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) text += ",\n";
    first = false;
    text += fmt::format(" {}: ", nlohmann::json(it.key()).dump());
    if (it.key() != "experts") {
      text += it.value().dump();
      continue;
    }
    text += "[";
    for (size_t i = 0; i < it.value().size(); ++i) text += (i ? ",\n  " : "\n  ") + it.value()[i].dump();
    text += "\n ]";
  }
  text += "\n}\n";
  write_file_atomic(file, text.data(), text.size());
}

namespace {

template <class T>
T field(const nlohmann::json& j, const char* key, const fs::path& file) {
  if (!j.contains(key)) throw FormatError(fmt::format("{}: missing field '{}'", file.string(), key));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: field '{}' has the wrong type ({})", file.string(), key, e.what()));
  }
}

// An integer field in [lo, hi]: nlohmann's get<int32_t> would truncate 2^32+1 to 1 silently.
int64_t bounded(const nlohmann::json& j, const char* key, const fs::path& file, int64_t lo, int64_t hi) {
  if (!j.contains(key)) throw FormatError(fmt::format("{}: missing field '{}'", file.string(), key));
  const auto& v = j.at(key);
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : v.is_number_integer();
  const int64_t x = fits ? v.get<int64_t>() : lo - 1;
  if (!fits || x < lo || x > hi)
    throw FormatError(fmt::format("{}: field '{}' = {} is not an integer in [{}, {}]", file.string(), key, v.dump(), lo, hi));
  return x;
}

ExpertEntry parse_entry(const nlohmann::json& x, const fs::path& file, size_t n_dirs, size_t i, size_t n_parts) {
  ExpertEntry e;
  if (!x.is_object()) throw FormatError(fmt::format("{}: experts[{}] is not an object", file.string(), i));
  e.layer = int32_t(bounded(x, "layer", file, 0, limits::kMaxLayers - 1));
  e.expert = int32_t(bounded(x, "expert", file, 0, limits::kMaxExperts - 1));
  try {
    e.xxh64 = parse_hex64(field<std::string>(x, "xxh64", file));
  } catch (const FormatError& err) {
    throw FormatError(fmt::format("{}: experts[{}].xxh64: {}", file.string(), i, err.what()));
  }
  const auto& dirs = x.contains("dirs") ? x.at("dirs") : throw FormatError(fmt::format("{}: experts[{}]: missing field 'dirs'", file.string(), i));
  if (!dirs.is_array() || dirs.size() > n_dirs)
    throw FormatError(fmt::format("{}: experts[{}].dirs is not a list of at most {} directory indexes", file.string(), i, n_dirs));
  for (size_t k = 0; k < dirs.size(); ++k) {
    const auto& d = dirs[k];
    if (!d.is_number_unsigned() || d.get<uint64_t>() >= n_dirs)
      throw FormatError(fmt::format("{}: experts[{}] names directory {} of {}", file.string(), i, d.dump(), n_dirs));
    e.dirs.push_back(uint16_t(d.get<uint64_t>()));
  }
  if (x.contains("parts") && n_parts > 0) {  // optional: stores written before part hashes have none
    const auto& v = x.at("parts");
    if (!v.is_string() || v.get_ref<const std::string&>().size() != 16 * n_parts)
      throw FormatError(fmt::format("{}: experts[{}].parts is not a string of {} 16-digit hex hashes", file.string(), i, n_parts));
    const std::string& s = v.get_ref<const std::string&>();
    try {
      for (size_t p = 0; p < n_parts; ++p) e.part_xxh64.push_back(parse_hex64(s.substr(16 * p, 16)));
    } catch (const FormatError& err) {
      throw FormatError(fmt::format("{}: experts[{}].parts: {}", file.string(), i, err.what()));
    }
  }
  if (e.dirs.empty()) throw FormatError(fmt::format("{}: experts[{}] ({}) lists no directory", file.string(), i, expert_file_name(e.layer, e.expert)));
  for (auto d : e.dirs)
    if (d >= n_dirs)
      throw FormatError(fmt::format("{}: experts[{}] names directory {} of {}", file.string(), i, d, n_dirs));
  return e;
}

}  // namespace

Manifest read_manifest(const fs::path& file) {
  require_regular_file(file, "manifest");
  std::ifstream in(file);
  if (!in) throw FormatError(fmt::format("{}: cannot open manifest", file.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: not JSON: {}", file.string(), e.what()));
  }
  Manifest m;
  m.format = field<std::string>(j, "format", file);
  if (m.format != "ferry-experts/1")
    throw FormatError(fmt::format("{}: format '{}' is not ferry-experts/1", file.string(), m.format));
  m.config_hash = field<std::string>(j, "config_hash", file);
  m.n_layers = bounded(j, "n_layers", file, 1, limits::kMaxLayers);
  m.n_experts = bounded(j, "n_experts", file, 1, limits::kMaxExperts);
  m.expert_bytes = bounded(j, "expert_bytes", file, 1, limits::kMaxExpertFileBytes);
  m.file_bytes = bounded(j, "file_bytes", file, m.expert_bytes, limits::kMaxExpertFileBytes);
  m.dirs = field<std::vector<std::string>>(j, "dirs", file);
  if (m.dirs.empty() || int64_t(m.dirs.size()) > limits::kMaxExpertDirs)
    throw FormatError(fmt::format("{}: 'dirs' lists {} directories (1 to {} allowed)", file.string(), m.dirs.size(),
                                  limits::kMaxExpertDirs));
  if (j.contains("spine")) {
    const auto& s = j["spine"];
    m.spine_file = field<std::string>(s, "file", file);
    m.spine_bytes = bounded(s, "bytes", file, 0, INT64_MAX);
    m.spine_xxh64 = parse_hex64(field<std::string>(s, "xxh64", file));
  }
  size_t n_parts = 0;
  if (j.contains("part_bytes")) {
    m.part_bytes = bounded(j, "part_bytes", file, 4096, limits::kMaxExpertFileBytes);
    n_parts = size_t((m.file_bytes + m.part_bytes - 1) / m.part_bytes);
  }
  const auto& ex = j.contains("experts") ? j["experts"] : throw FormatError(file.string() + ": missing field 'experts'");
  if (!ex.is_array() || int64_t(ex.size()) > m.n_layers * m.n_experts)  // both bounded: no overflow
    throw FormatError(fmt::format("{}: 'experts' is not a list of at most n_layers x n_experts = {} entries",
                                  file.string(), m.n_layers * m.n_experts));
  m.experts.reserve(ex.size());
  for (size_t i = 0; i < ex.size(); ++i) m.experts.push_back(parse_entry(ex[i], file, m.dirs.size(), i, n_parts));
  return m;
}

// ---- usage ----

UsageCounts load_usage(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw FormatError(fmt::format("{}: cannot open usage file", file.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: not JSON: {}", file.string(), e.what()));
  }
  if (!j.is_object()) throw FormatError(fmt::format("{}: expected an object of \"L<l>-E<e>.bin\": count", file.string()));
  UsageCounts u;
  for (auto it = j.begin(); it != j.end(); ++it) {
    int l = 0, e = 0;
    if (!parse_expert_file_name(it.key(), l, e))
      throw FormatError(fmt::format("{}: key '{}' is not L<layer>-E<expert>.bin", file.string(), it.key()));
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      throw FormatError(fmt::format("{}: '{}' has a count that is not a non-negative integer", file.string(), it.key()));
    u[key_id({l, e})] = it.value().get<int64_t>();
  }
  return u;
}

void write_usage(const fs::path& file, const UsageCounts& counts) {
  std::vector<std::pair<uint64_t, int64_t>> v(counts.begin(), counts.end());
  std::sort(v.begin(), v.end());
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i)
    out += fmt::format("{}\n\"{}\": {}", i ? "," : "", expert_file_name(int(v[i].first >> 32), int(v[i].first & 0xffffffffu)),
                       v[i].second);
  out += "\n}\n";
  write_file_atomic(file, out.data(), out.size(), {.unique_tmp = true});
}

}  // namespace ferry
