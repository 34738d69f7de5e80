#include "io/read_engine/split_engine.hpp"

#include <sys/vfs.h>
#include <linux/magic.h>

#include <algorithm>
#include <thread>
#include <unordered_map>

#include "io/read_engine/pinned_arena.hpp"
#include "io/read_engine/pread_pool.hpp"

namespace ferry::io {
namespace {

constexpr uint64_t kDefaultMemoryPart = uint64_t{2} << 20;

class SplitEngine final : public ReadEngine {
 public:
  SplitEngine(std::unique_ptr<ReadEngine> inner, uint64_t part) : inner_(std::move(inner)), part_(part) {}

  std::string name() const override { return inner_->name(); }

  void submit(ReadOp op) override {
    if (op.bytes <= part_) {
      const uint64_t tag = next_++;
      whole_[tag] = op.tag;
      op.tag = tag;
      inner_->submit(std::move(op));
      return;
    }
    const uint64_t parent = op.tag;
    Parent& p = parents_[parent];
    p.op = op;
    for (uint64_t off = 0; off < op.bytes; off += part_) {
      ReadOp part = op;
      part.tag = next_++;
      part.offset = op.offset + off;
      part.dst = op.dst + off;
      part.bytes = std::min(part_, op.bytes - off);
      parts_[part.tag] = {parent, off};
      ++p.outstanding;
      inner_->submit(std::move(part));
    }
  }

  size_t reap(std::vector<ReadResult>& out, std::chrono::microseconds max_wait) override {
    const size_t before = out.size();
    std::vector<ReadResult> got;
    // Keep waiting while only parts come back and the caller's wait has time left.
    const auto deadline = Clock::now() + max_wait;
    for (;;) {
      got.clear();
      inner_->reap(got, std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()));
      for (auto& r : got) merge(r, out);
      if (out.size() > before || got.empty() || Clock::now() >= deadline) break;
    }
    return out.size() - before;
  }

  size_t inflight() const override { return whole_.size() + parents_.size(); }
  size_t queued() const override { return inner_->queued(); }
  bool register_memory(std::byte* base, size_t bytes) override { return inner_->register_memory(base, bytes); }
  bool registered() const override { return inner_->registered(); }

 private:
  struct Parent {
    ReadOp op;
    ReadResult result;
    uint32_t outstanding = 0;
    bool any = false;
    uint64_t short_at = UINT64_MAX;  // offset of the first part that came back short
  };
  struct PartOf {
    uint64_t parent = 0, offset = 0;
  };

  void merge(ReadResult& r, std::vector<ReadResult>& out) {
    if (auto w = whole_.find(r.tag); w != whole_.end()) {
      r.tag = w->second;
      whole_.erase(w);
      out.push_back(r);
      return;
    }
    const auto it = parts_.find(r.tag);
    const PartOf po = it->second;
    parts_.erase(it);
    Parent& p = parents_.at(po.parent);
    fold(p, r, po.offset);
    if (--p.outstanding > 0) return;
    ReadResult done = p.result;
    done.tag = po.parent;
    done.bytes_read = p.short_at == UINT64_MAX ? p.op.bytes : p.short_at;
    out.push_back(done);
    parents_.erase(po.parent);
  }

  void fold(Parent& p, const ReadResult& r, uint64_t offset) {
    const uint64_t want = std::min(part_, p.op.bytes - offset);
    if (!p.any) {
      p.result = r;
      p.any = true;
    } else {
      p.result.submitted = std::min(p.result.submitted, r.submitted);
      p.result.completed = std::max(p.result.completed, r.completed);
      p.result.parts_ok += r.parts_ok;
      if (p.result.bad_part < 0) p.result.bad_part = r.bad_part;
      if (p.result.err == 0 && r.err != 0) {
        p.result.err = r.err;
        p.result.open_failed = r.open_failed;
      }
    }
    if (r.err == 0 && r.bytes_read < want) p.short_at = std::min(p.short_at, offset + r.bytes_read);
  }

  std::unique_ptr<ReadEngine> inner_;
  uint64_t part_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, uint64_t> whole_;  // inner tag -> caller's tag (unsplit ops)
  std::unordered_map<uint64_t, PartOf> parts_;    // inner tag -> its op and offset
  std::unordered_map<uint64_t, Parent> parents_;  // caller's tag -> the split op
};

}  // namespace

std::unique_ptr<ReadEngine> make_split_engine(std::unique_ptr<ReadEngine> inner, uint64_t part_bytes) {
  return std::make_unique<SplitEngine>(std::move(inner), round_up(std::max<uint64_t>(part_bytes, 1), kDirectAlign));
}

StorageKind storage_kind(const std::string& dir) {
  struct statfs s{};
  if (::statfs(dir.c_str(), &s) != 0) return StorageKind::block;
  const auto t = static_cast<unsigned long>(s.f_type);
  return t == TMPFS_MAGIC || t == RAMFS_MAGIC ? StorageKind::memory : StorageKind::block;
}

EngineChoice choose_engine(const std::string& dir, EngineKind requested, EngineConfig cfg, unsigned dirs) {
  EngineChoice c;
  const bool memory = storage_kind(dir) == StorageKind::memory;
  std::string why;
  c.direct = !memory && probe_o_direct(dir, &why);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const bool pool = requested == EngineKind::pread_pool || (requested == EngineKind::automatic && !c.direct);
  c.kind = pool ? EngineKind::pread_pool : requested == EngineKind::uring ? EngineKind::uring : EngineKind::automatic;
  if (pool && requested == EngineKind::automatic) {
    // Twice the cores over the directories: on memory-backed storage every directory's reads are CPU
    // copies on the same cores, and one layer's experts fall unevenly over the directories, so the
    // busiest one needs more than its share. Measured on the H200 (16 cores, 4 tmpfs directories, 3 MoE
    // layers, docs/BENCHMARKS.md "verified reads hashed as they land"): 4 workers each 27.7 tok/s
    // verified / 34.8 unverified, 8 each 31.7 / 36.1, 16 each 31.4.
    if (cfg.pool_threads == 0) cfg.pool_threads = std::max(2u, 2 * cores / std::max(1u, dirs));
    if (cfg.split_bytes == 0) cfg.split_bytes = kDefaultMemoryPart;
    cfg.max_inflight = std::max(cfg.max_inflight, cfg.pool_threads);
  }
  if (cfg.pool_threads == 0) cfg.pool_threads = 4;
  c.cfg = cfg;
  c.why = memory ? "memory-backed (tmpfs/ramfs)" : c.direct ? "O_DIRECT accepted" : "O_DIRECT refused (" + why + ")";
  return c;
}

std::unique_ptr<ReadEngine> make_chosen_engine(const EngineChoice& c) {
  auto e = make_read_engine(c.kind, c.cfg);
  if (c.cfg.split_bytes > 0) return make_split_engine(std::move(e), c.cfg.split_bytes);
  return e;
}

}  // namespace ferry::io
