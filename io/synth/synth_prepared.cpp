// synth_prepared: plan (config, placement, free space), then N workers generate the non-routed
// tensors (largest first) and the experts, while one more thread writes spine.gguf as soon as every
// non-routed tensor exists; the manifest is written last, so a model dir with a manifest is complete.
#include "io/synth/synth_prepared.hpp"


#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/store/expert_store_prepare.hpp"
#include "io/formats/gguf.hpp"
#include "io/progress.hpp"
#include "io/synth/synth_expert_files.hpp"
#include "io/synth/synth_spine.hpp"
#include "io/synth/synth_usage.hpp"

namespace fs = std::filesystem;

namespace ferry {

namespace {

struct Plan {
  std::string cfg_text;
  ModelConfig c;
  std::vector<ExpertKey> experts;
  std::vector<PlacementDir> dirs;
  std::vector<std::vector<uint16_t>> placement;
  int64_t payload = 0, file_bytes = 0, spine_bytes = 0;
  SynthSpineSource::Order order = SynthSpineSource::Order::sorted;
};

Plan make_plan(const SynthPreparedOptions& o) {
  Plan p;
  p.cfg_text = synth_config_json(o.synth);
  p.c = parse_model_config(p.cfg_text, (o.out / "config.json").string());
  int64_t total = 0;  // what synth --out would write: decides its shard count, hence prepare's tensor order
  visit_checkpoint_layout(p.c, [&](const TensorSpec& t) {
    total += t.bytes();
    if (t.routed()) return;
    const auto g = spine_gguf_name(t.name, p.c.tensor_prefix);
    const auto type = dtype_of_ggml(uint32_t(spine_tensor_type(g, t.shape, o.spine)));
    p.spine_bytes += int64_t(gguf_tensor_bytes(type.value_or(DType::f32), t.shape)) + 32;
  });
  SynthOptions unsharded = o.synth;
  unsharded.shard_bytes = 0;
  p.order = total <= synth_shard_bytes(unsharded, total) ? SynthSpineSource::Order::layout : SynthSpineSource::Order::sorted;
  for (int64_t l = 0; l < p.c.n_layers; ++l)
    if (p.c.ffn[size_t(l)] == Ffn::moe)
      for (int64_t e = 0; e < p.c.moe.n_experts; ++e) p.experts.push_back({int32_t(l), int32_t(e)});
  PrepareOptions po;
  po.expert_dirs = o.expert_dirs;
  p.dirs = prepare_placement_dirs(po);
  if (!p.experts.empty()) {
    if (!p.c.moe.experts_mxfp4) throw ConfigError("synth --prepared: the routed experts are not MXFP4");
    p.payload = expert_payload_bytes(p.c);
    p.file_bytes = expert_file_bytes(p.c);
    p.placement = place_experts(p.experts, p.file_bytes, p.dirs, nullptr);
  }
  return p;
}

// Free space per filesystem, before anything is written. Files we overwrite give their space back
// (a re-run into the same dirs must fit on the disk that holds the first run), but each writer
// briefly holds a .tmp beside the file it replaces.
void check_space(const SynthPreparedOptions& o, const Plan& p, int threads) {
  auto free_of = o.free_bytes ? o.free_bytes : statvfs_free;
  std::map<uint64_t, std::pair<int64_t, fs::path>> need;
  auto add = [&](const fs::path& where, int64_t bytes) {
    auto& n = need[device_of(where)];
    n.first += bytes;
    if (n.second.empty()) n.second = where;
  };
  add(o.out, p.spine_bytes + (int64_t(1) << 20) + int64_t(p.experts.size()) * 128);
  for (size_t i = 0; i < p.experts.size(); ++i)
    for (auto d : p.placement[i]) {
      std::error_code ec;
      const auto old = fs::file_size(p.dirs[d].path / expert_file_name(p.experts[i].layer, p.experts[i].expert), ec);
      add(p.dirs[d].path, p.file_bytes - (ec ? 0 : int64_t(old)));
    }
  for (const auto& d : p.dirs) add(d.path, int64_t(threads) * p.file_bytes);
  for (const auto& [dev, n] : need) {
    const int64_t avail = free_of(n.second);
    if (n.first > avail)
      throw LimitError(fmt::format("not enough free space on the filesystem of {}: need {} bytes ({}), {} free ({})",
                                   n.second.string(), n.first, format_bytes(n.first), avail, format_bytes(avail)));
  }
}

// The workers and the spine thread; the first error stops everyone and is rethrown by run().
class Run {
 public:
  Run(const SynthPreparedOptions& o, const Plan& p, SynthSpineSource& spine, Progress& progress, int threads)
      : o_(o), p_(p), spine_(spine), progress_(progress), threads_(threads), gen_order_(spine.generation_order()),
        hashes_(p.experts.size()),
        part_hashes_(p.experts.size()) {
    for (const auto& d : p.dirs) dir_names_.push_back(d.path.string());
  }

  void run(SynthPreparedResult& r) {
    std::vector<std::thread> pool;
    pool.emplace_back([this] { guarded([this] { write_spine(); }); });
    for (int t = 0; t < threads_; ++t) pool.emplace_back([this] { guarded([this] { work(); }); });
    for (auto& t : pool) t.join();
    if (error_) std::rethrow_exception(error_);
    r.spine_tensors = spine_tensors_;
    r.spine_bytes = spine_size_;
    r.tracking = std::move(tracking_);
    r.direct_io = buffered_ == 0;
  }

  Manifest manifest() const {
    Manifest m = make_manifest(p_.c, p_.cfg_text, dir_names_, spine_size_, spine_hash_);
    for (size_t i = 0; i < p_.experts.size(); ++i)
      m.experts.push_back({p_.experts[i].layer, p_.experts[i].expert, hashes_[i], p_.placement[i], part_hashes_[i]});
    return m;
  }

 private:
  template <class F> void guarded(F f) {
    try {
      f();
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = std::current_exception();
      abort_ = true;
      cv_.notify_all();
    }
  }

  // Jobs: the non-routed tensors first (largest first: the spine thread waits for all of them),
  // then the experts in (layer, expert) order.
  void work() {
    const size_t n_plain = gen_order_.size(), n = n_plain + p_.experts.size();
    std::unique_ptr<AlignedBuffer> buf;
    for (size_t j; !abort_ && (j = next_++) < n;) {
      if (j < n_plain) {
        spine_.generate(gen_order_[j]);
        std::lock_guard lock(mu_);
        if (++plain_done_ == n_plain) cv_.notify_all();
        continue;
      }
      if (!buf) buf = std::make_unique<AlignedBuffer>(size_t(p_.file_bytes));
      write_expert(j - n_plain, *buf);
    }
  }

  void write_expert(size_t i, AlignedBuffer& buf) {
    const ExpertKey k = p_.experts[i];
    build_synth_expert(p_.c, o_.synth.seed, k.layer, k.expert, buf.data());
    hashes_[i] = xxh64_bytes(buf.data(), buf.size());
    part_hashes_[i] = xxh64_parts(buf.data(), buf.size());
    for (auto d : p_.placement[i]) {
      if (!write_file_atomic(p_.dirs[d].path / expert_file_name(k.layer, k.expert), buf.data(), buf.size(),
                             {.direct = true, .sync_dir = false}))  // one directory fsync at the end
        ++buffered_;
      progress_.add(1, p_.file_bytes);
    }
  }

  void write_spine() {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return abort_ || plain_done_ == gen_order_.size(); });
      if (abort_) return;
    }
    tracking_ = spine_.fit_biases(threads_);
    const fs::path file = o_.out / "spine.gguf";
    spine_tensors_ = write_spine_gguf(file, spine_, p_.c, p_.cfg_text, dir_names_, o_.spine, &progress_);
    spine_hash_ = xxh64_file(file, &spine_size_);
    spine_.release();  // the workers keep going; give the memory back
    progress_.add(1, 0);
  }

  const SynthPreparedOptions& o_;
  const Plan& p_;
  SynthSpineSource& spine_;
  Progress& progress_;
  const int threads_;
  const std::vector<size_t> gen_order_;
  std::vector<std::string> dir_names_;
  std::vector<uint64_t> hashes_;
  std::vector<std::vector<uint64_t>> part_hashes_;
  std::atomic<size_t> next_{0};
  std::atomic<int64_t> buffered_{0};
  std::atomic<bool> abort_{false};
  size_t plain_done_ = 0;  // guarded by mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::vector<RouterTracking> tracking_;
  int64_t spine_tensors_ = 0, spine_size_ = 0;
  uint64_t spine_hash_ = 0;
};

}  // namespace

SynthPreparedResult synth_prepared(const SynthPreparedOptions& o) {
  if (o.expert_dirs.empty()) throw ConfigError("synth --prepared: give at least one --expert-dir");
  if (o.threads < 0) throw ConfigError(fmt::format("synth --prepared: --threads {} is negative", o.threads));
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const Plan p = make_plan(o);
  std::unique_ptr<SynthUsage> usage;
  if (!o.synth.usage.empty()) usage = std::make_unique<SynthUsage>(o.synth.usage);
  check_space(o, p, threads);
  fs::create_directories(o.out);
  for (const auto& d : p.dirs) fs::create_directories(d.path);
  fs::remove(o.out / "manifest.json");  // until the new one is written, this is not a complete model

  SynthSpineSource spine(p.c, o.synth.seed, p.order, usage.get());
  const int64_t n = int64_t(p.experts.size());
  Progress progress("synth", n + 1, n * p.file_bytes + p.spine_bytes, Progress::Options{o.synth.progress, -1, 5.0, stderr});
  Run run(o, p, spine, progress, threads);
  SynthPreparedResult r;
  run.run(r);
  for (const auto& d : p.dirs) fsync_directory(d.path);  // the renames, once per directory
  write_synth_side_files(o.out, p.c, p.cfg_text);
  if (usage) write_usage(usage_file(o.out), synth_layer_usage(p.c, *usage));  // what the routers follow
  r.manifest = o.out / "manifest.json";
  write_manifest(r.manifest, run.manifest());
  progress.finish();
  r.experts = n;
  r.expert_bytes_written = n * p.file_bytes;
  r.threads = threads;
  return r;
}

}  // namespace ferry
