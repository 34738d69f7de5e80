// The storage half of `ferry faults` (prepared models): each scenario streams the experts
// (--ssd-streaming, no cache, so every expert is read) while one drive misbehaves, and compares the
// tokens and logit hashes with the fault-free run. Faults that touch files never touch the user's
// store: directory 0 is replaced (--expert-dir) by an overlay of symbolic links to its files, in which
// victims are damaged copies and which can vanish mid-run.
#include "apps/ferry/faults_storage.hpp"

#include <unistd.h>

#include <caf/all.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "actors/readers/reader_actor.hpp"
#include "actors/streaming/expert_catalog.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Overlay {
  fs::path dir;
  int victims = 0;  // damaged copies
};

// Directory 0 of the manifest as an overlay: links to every file, except that experts of the first
// MoE layer (up to 64 MB of them) are copies with a flipped byte (zero = false) or all zeros.
Overlay make_overlay(const Manifest& man, const fs::path& root, const std::string& name, bool damage, bool zero) {
  Overlay o{root / name};
  fs::create_directories(o.dir);
  const fs::path src = man.dirs.at(0);
  int first_layer = INT32_MAX;
  for (const auto& e : man.experts) first_layer = std::min<int>(first_layer, e.layer);
  int64_t budget = int64_t(64) << 20;
  for (const auto& entry : fs::directory_iterator(src)) {
    const fs::path dst = o.dir / entry.path().filename();
    int layer = -1, expert = -1;
    const bool victim = damage && parse_expert_file_name(entry.path().filename().string(), layer, expert) &&
                        layer == first_layer && budget >= man.file_bytes;
    if (!victim) {
      fs::create_symlink(entry.path(), dst);
      continue;
    }
    std::string bytes(size_t(fs::file_size(entry.path())), '\0');
    if (!zero) {
      std::ifstream(entry.path(), std::ios::binary).read(bytes.data(), std::streamsize(bytes.size()));
      bytes[100 % bytes.size()] ^= 0x5a;
    }
    std::ofstream(dst, std::ios::binary) << bytes;
    budget -= man.file_bytes;
    ++o.victims;
  }
  return o;
}

reader_actor reader_of(StreamingExperts& s, uint32_t dir) {
  caf::scoped_actor self{s.system()};
  reader_actor r;
  self->request(s.read_service(), 5s, reader_atom_v, dir)
      .receive([&](reader_actor& x) { r = x; }, [&](caf::error&) {});
  return r;
}

}  // namespace

std::vector<StorageRow> run_storage_faults(Runtime& rt, const ModelOptions& base, int64_t n, uint64_t seed,
                                           std::span<const int32_t> prompt,
                                           const std::function<int64_t(const std::vector<GeneratedToken>&)>& mismatches) {
  const fs::path mdir(base.dir);
  const Manifest man = read_manifest(mdir / "manifest.json");
  bool replicated = false;
  for (const auto& e : man.experts) replicated |= e.dirs.size() > 1;
  const fs::path root = fs::temp_directory_path() / fmt::format("ferry-storage-faults-{}", ::getpid());
  fs::remove_all(root);
  std::vector<StorageRow> rows;
  auto streaming = [&](const std::string& overlay_dir) {
    ModelOptions o = base;
    o.ssd_streaming = true;
    o.streaming.cache_experts = 0;
    o.streaming.cache_bytes = 0;
    o.streaming.verify_reads = true;
    o.streaming.read_timeout = 5000ms;
    if (!overlay_dir.empty()) {
      o.streaming.expert_dirs = man.dirs;
      o.streaming.expert_dirs[0] = overlay_dir;
    }
    return o;
  };
  // One run: faults injected and recoveries come from the streaming counters, read whether the run
  // completed or ended with an error (no good copy left).
  auto one = [&](const std::string& name, const ModelOptions& o, const std::function<void(LoadedModel&)>& before,
                 const std::function<uint64_t(const StreamingMetrics&)>& faults_of) {
    StorageRow row{name};
    try {
      LoadedModel m = load_model(o, &rt);
      if (before) before(m);
      auto state = m.model->new_state(int64_t(prompt.size()) + n + 1);
      GenerateParams gp;
      gp.n_predict = n;
      GenerateMetrics g;
      std::vector<GeneratedToken> toks;
      try {
        toks = generate(*m.model, *state, prompt, gp, g);
        row.mismatches = mismatches(toks);
      } catch (const Error& e) {
        row.error = e.what();
      }
      const StreamingMetrics sm = m.streaming->metrics();
      row.faults = faults_of(sm);
      for (const auto& d : sm.drives) row.recoveries += d.restarts;
      if (row.error.empty()) row.recoveries += sm.verify_mismatches + sm.drives.at(0).failures;
    } catch (const Error& e) {
      row.error = e.what();
    }
    rows.push_back(std::move(row));
  };
  // 1. The reader of directory 0 killed while its reads are in flight (calls 3, 10, 17, ...).
  {
    auto o = streaming("");
    auto holder = std::make_shared<StreamingExperts*>(nullptr);
    auto kills = std::make_shared<uint64_t>(0);
    const uint64_t first = 3 + seed % 4;
    o.streaming.after_schedule = [holder, kills, first](uint32_t, uint64_t call) {
      if (!*holder || call < first || (call - first) % 7 != 0 || *kills >= 3) return;
      caf::anon_send_exit(reader_of(**holder, 0), caf::exit_reason::kill);
      ++*kills;
    };
    one("reader killed mid-read", o, [holder](LoadedModel& m) { *holder = m.streaming; },
        [kills](const StreamingMetrics&) { return *kills; });
  }
  // 2. EIO on every read of directory 0 (replicas serve; without one, a clear error).
  one("EIO on drive 0", streaming(""),
      [](LoadedModel& m) { caf::anon_send(reader_of(*m.streaming, 0), knobs_atom_v, reader_knobs{0, 1000000, false}); },
      [](const StreamingMetrics& sm) { return sm.drives.at(0).failures; });
  // 3. Directory 0 answers 3 ms late.
  one("slow drive 0 (3 ms)", streaming(""),
      [](LoadedModel& m) { caf::anon_send(reader_of(*m.streaming, 0), knobs_atom_v, reader_knobs{3000, 0, false}); },
      [](const StreamingMetrics& sm) { return sm.drives.at(0).reads + sm.drives.at(0).failures; });
  // 4, 5. Corrupted experts (a flipped byte; zeros, as a failing drive returns) in directory 0.
  for (bool zero : {false, true}) {
    const auto ov = make_overlay(man, root, zero ? "zeroed" : "flipped", true, zero);
    one(fmt::format("{} expert{}", zero ? "zeroed" : "corrupted", replicated ? " (replica)" : " (no replica)"),
        streaming(ov.dir.string()), {},
        [](const StreamingMetrics& sm) { return sm.verify_mismatches; });
  }
  // 6. Directory 0 vanishes after the first layer calls (its files gone: ENOENT).
  {
    const auto ov = make_overlay(man, root, "vanishing", false, false);
    auto o = streaming(ov.dir.string());
    const uint64_t at = 2 + seed % 3;
    o.streaming.after_schedule = [dir = ov.dir, at](uint32_t, uint64_t call) {
      if (call == at) fs::remove_all(dir);
    };
    one("drive 0 vanishes", o, {}, [](const StreamingMetrics& sm) { return sm.drives.at(0).failures; });
  }
  fs::remove_all(root);
  return rows;
}

}  // namespace ferry::cli
