// prepare_model: plan (placement, resume state, free space), then write spine, experts, manifest.
#include "io/store/expert_store_prepare.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "io/formats/checkpoint.hpp"
#include "io/formats/ct_mxfp4.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/formats/model_config.hpp"
#include "io/progress.hpp"
#include "io/synth/synth_layout.hpp"

namespace fs = std::filesystem;

namespace ferry {

namespace {

constexpr const char* kJournal = ".prepare-journal";

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read", p.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Journal: the first line names the run ("ferry-prepare <config hash> <spine type>"); then one line
// per finished file "<xxh64> <path>". A torn last line (kill -9 mid-write) is ignored.
class Journal {
 public:
  Journal(const fs::path& file, const std::string& header) : file_(file) {
    std::ifstream in(file);
    std::string line;
    if (in && std::getline(in, line) && line == header) {
      while (std::getline(in, line)) {
        const auto sp = line.find(' ');
        if (sp != 16 || in.eof()) continue;  // torn line has no newline: eof set
        try {
          done_[line.substr(17)] = parse_hex64(line.substr(0, 16));
        } catch (const FormatError&) {
        }
      }
    }
  }
  // Rewrites the journal (dropping a torn line or a journal of another run) and keeps it open.
  void open(const std::string& header) {
    fd_ = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw FormatError(fmt::format("{}: cannot write journal", file_.string()));
    append_line(header);
    for (const auto& [p, h] : done_) append_line(hex64(h) + " " + p);
  }
  ~Journal() {
    if (fd_ >= 0) ::close(fd_);
  }
  // The recorded hash when `path` was finished and still has `size` bytes.
  std::optional<uint64_t> done(const fs::path& path, int64_t size) const {
    auto it = done_.find(path.string());
    if (it == done_.end()) return std::nullopt;
    std::error_code ec;
    if (int64_t(fs::file_size(path, ec)) != size || ec) return std::nullopt;
    return it->second;
  }
  void record(const fs::path& path, uint64_t h) {
    done_[path.string()] = h;
    append_line(hex64(h) + " " + path.string());
  }

 private:
  void append_line(const std::string& s) {
    const std::string l = s + "\n";
    if (::write(fd_, l.data(), l.size()) != ssize_t(l.size())) throw FormatError(fmt::format("{}: journal write failed", file_.string()));
  }
  fs::path file_;
  int fd_ = -1;
  std::unordered_map<std::string, uint64_t> done_;
};

struct Plan {
  std::string config_text, config_hash;
  ModelConfig cfg;
  std::vector<ExpertKey> experts;
  std::vector<PlacementDir> dirs;
  std::vector<std::vector<uint16_t>> placement;
  int64_t payload = 0, file_bytes = 0;
};

Plan make_plan(const PrepareOptions& o) {
  Plan p;
  p.config_text = read_text(o.checkpoint / "config.json");
  p.config_hash = hex64(xxh64_bytes(p.config_text.data(), p.config_text.size()));
  p.cfg = parse_model_config(p.config_text, (o.checkpoint / "config.json").string());
  for (int64_t l = 0; l < p.cfg.n_layers; ++l)
    if (p.cfg.ffn[size_t(l)] == Ffn::moe)
      for (int64_t e = 0; e < p.cfg.moe.n_experts; ++e) p.experts.push_back({int32_t(l), int32_t(e)});
  p.dirs = prepare_placement_dirs(o);
  if (!p.experts.empty()) {
    p.payload = expert_payload_bytes(p.cfg);
    p.file_bytes = expert_file_bytes(p.cfg);
    UsageCounts usage;
    if (!o.replicas_usage.empty()) usage = load_usage(o.replicas_usage);
    p.placement = place_experts(p.experts, p.file_bytes, p.dirs, o.replicas_usage.empty() ? nullptr : &usage);
  }
  return p;
}

// Free space per filesystem for what is still to be written; throws LimitError before any write.
void check_space(const PrepareOptions& o, const Plan& p, const Journal& j, int64_t spine_bytes) {
  auto free_of = o.free_bytes ? o.free_bytes : statvfs_free;
  std::map<uint64_t, std::pair<int64_t, fs::path>> need;  // device -> bytes, a path on it
  auto add = [&](const fs::path& where, int64_t bytes) {
    auto& n = need[device_of(where)];
    n.first += bytes;
    if (n.second.empty()) n.second = where;
  };
  add(o.out, spine_bytes + (int64_t(1) << 20) + int64_t(p.experts.size()) * 128);  // spine + manifest + small files
  for (size_t i = 0; i < p.experts.size(); ++i)
    for (auto d : p.placement[i]) {
      const fs::path f = p.dirs[d].path / expert_file_name(p.experts[i].layer, p.experts[i].expert);
      if (!j.done(f, p.file_bytes)) add(p.dirs[d].path, p.file_bytes);
    }
  for (const auto& [dev, n] : need) {
    const int64_t avail = free_of(n.second);
    if (n.first > avail)
      throw LimitError(fmt::format("not enough free space on the filesystem of {}: need {} bytes ({}), {} free ({})",
                                   n.second.string(), n.first, format_bytes(n.first), avail, format_bytes(avail)));
  }
}

// One expert's file bytes: gate, up, down as ggml MXFP4 blocks, zero-padded.
void build_expert(const TensorSource& src, const ModelConfig& c, ExpertKey k, std::vector<uint8_t>& buf) {
  std::fill(buf.begin(), buf.end(), uint8_t(0));
  uint8_t* at = buf.data();
  for (ExpertMatrix m : {ExpertMatrix::gate, ExpertMatrix::up, ExpertMatrix::down}) {
    const auto [rows, cols] = expert_matrix_shape(c, m);
    const auto base = expert_matrix_name(c, k.layer, k.expert, m);
    const auto w = find_ct_mxfp4(src, base, rows, cols);
    ct_mxfp4_to_blocks(w, reinterpret_cast<BlockMxfp4*>(at));
    at += rows * (cols / kQK) * int64_t(sizeof(BlockMxfp4));
  }
}

void copy_side_files(const PrepareOptions& o, const std::string& config_text) {
  write_file_atomic(o.out / "config.json", config_text.data(), config_text.size());
  for (const char* n : {"tiktoken.model", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json",
                        "generation_config.json", "chat_template.jinja"}) {
    if (!fs::exists(o.checkpoint / n)) continue;
    const auto t = read_text(o.checkpoint / n);
    write_file_atomic(o.out / n, t.data(), t.size());
  }
}

}  // namespace

std::vector<PlacementDir> prepare_placement_dirs(const PrepareOptions& o) {
  std::vector<PlacementDir> dirs;
  auto find = [&](const fs::path& p) -> PlacementDir* {
    for (auto& d : dirs)
      if (d.path == p) return &d;
    return nullptr;
  };
  for (const auto& d : o.expert_dirs) {
    const fs::path p = fs::weakly_canonical(fs::absolute(d));
    if (!find(p)) dirs.push_back({p, true, -1});
  }
  for (const auto& [d, budget] : o.replica_budgets) {
    const fs::path p = fs::weakly_canonical(fs::absolute(d));
    if (auto* x = find(p)) x->budget = budget;
    else dirs.push_back({p, false, budget});
  }
  if (!o.replica_budgets.empty() && o.replicas_usage.empty())
    throw ConfigError("--replica-budget needs --replicas USAGE.json (replicas are chosen by usage)");
  return dirs;
}

PrepareResult prepare_model(const PrepareOptions& o) {
  if (o.expert_dirs.empty()) throw ConfigError("prepare: give at least one --expert-dir");
  const Plan p = make_plan(o);
  if (!p.experts.empty() && !p.cfg.moe.experts_mxfp4)
    throw TensorError(fmt::format("{}: routed experts are not compressed-tensors MXFP4 (no quantization_config "
                                  "mxfp4-pack-quantized); prepare repacks MXFP4 exactly and does not quantize",
                                  o.checkpoint.string()));
  const auto src = open_safetensors_checkpoint(o.checkpoint);
  const int64_t spine_bytes = spine_data_bytes(*src, p.cfg, o.spine);
  const std::string header = fmt::format("ferry-prepare {} {} {}", p.config_hash, to_string(o.spine), p.file_bytes);
  Journal j(o.out / kJournal, header);  // read only until open(): nothing is created before the space check
  check_space(o, p, j, spine_bytes);
  fs::create_directories(o.out);
  for (const auto& d : p.dirs) fs::create_directories(d.path);
  j.open(header);

  PrepareResult r;
  r.experts = int64_t(p.experts.size());
  int64_t copies = 0;
  for (const auto& x : p.placement) copies += int64_t(x.size());
  Progress progress("prepare", copies + 1, copies * p.file_bytes + spine_bytes, Progress::Options{o.progress, -1, 5.0, stderr});

  std::vector<std::string> dir_names;
  for (const auto& d : p.dirs) dir_names.push_back(d.path.string());
  const fs::path spine = o.out / "spine.gguf";
  int64_t spine_size = 0;
  uint64_t spine_hash = 0;
  if (auto h = j.done(spine, fs::exists(spine) ? int64_t(fs::file_size(spine)) : -1)) {
    spine_hash = *h;
    spine_size = int64_t(fs::file_size(spine));
    progress.skip(1, spine_bytes);
  } else {
    r.spine_tensors = write_spine_gguf(spine, *src, p.cfg, p.config_text, dir_names, o.spine, &progress);
    spine_hash = xxh64_file(spine, &spine_size);
    j.record(spine, spine_hash);
    progress.add(1, 0);
    r.spine_written = true;
  }

  Manifest m = make_manifest(p.cfg, p.config_text, dir_names, spine_size, spine_hash);
  std::vector<uint8_t> buf(size_t(p.file_bytes));
  for (size_t i = 0; i < p.experts.size(); ++i) {
    const ExpertKey k = p.experts[i];
    const auto name = expert_file_name(k.layer, k.expert);
    std::optional<uint64_t> hash;
    std::vector<uint64_t> parts;  // known when this run builds the expert (a resumed, skipped one has none)
    std::vector<fs::path> todo;
    for (auto d : p.placement[i]) {
      const fs::path f = p.dirs[d].path / name;
      if (auto h = j.done(f, p.file_bytes)) {
        hash = *h;
        ++r.copies_skipped;
        progress.skip(1, p.file_bytes);
      } else {
        todo.push_back(f);
      }
    }
    if (!todo.empty()) {
      build_expert(*src, p.cfg, k, buf);
      const uint64_t h = xxh64_bytes(buf.data(), buf.size());
      if (hash && *hash != h) throw FormatError(fmt::format("{}: a finished copy's xxh64 {} differs from the checkpoint's {}", name, hex64(*hash), hex64(h)));
      hash = h;
      parts = xxh64_parts(buf.data(), buf.size(), uint64_t(m.part_bytes));
      for (const auto& f : todo) {
        write_file_atomic(f, buf.data(), buf.size());
        j.record(f, h);
        ++r.copies_written;
        r.bytes_written += p.file_bytes;
        progress.add(1, p.file_bytes);
      }
    }
    m.experts.push_back({k.layer, k.expert, *hash, p.placement[i], std::move(parts)});
  }
  copy_side_files(o, p.config_text);
  // The usage counts stay with the store: they seed the expert caches of every run (usage_file()).
  if (!o.replicas_usage.empty()) write_usage(usage_file(o.out), load_usage(o.replicas_usage));
  r.manifest = o.out / "manifest.json";
  write_manifest(r.manifest, m);
  progress.finish();
  return r;
}

static fs::path nearest_existing(fs::path p) {
  p = fs::absolute(p);
  while (!fs::exists(p) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  return p;
}

int64_t statvfs_free(const fs::path& p) {
  struct statvfs st{};
  const fs::path e = nearest_existing(p);
  if (::statvfs(e.c_str(), &st) != 0) throw FormatError(fmt::format("{}: statvfs failed", e.string()));
  return int64_t(st.f_bavail) * int64_t(st.f_frsize);
}

uint64_t device_of(const fs::path& p) {
  struct stat st{};
  const fs::path e = nearest_existing(p);
  return ::stat(e.c_str(), &st) == 0 ? uint64_t(st.st_dev) : 0;
}

}  // namespace ferry
