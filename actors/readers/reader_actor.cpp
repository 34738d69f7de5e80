#include "actors/readers/reader_actor.hpp"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "io/errors.hpp"
#include "io/regular_file.hpp"
#include "io/read_engine/pinned_arena.hpp"
#include "io/read_engine/split_engine.hpp"
#include "io/read_engine/uring_reader_log.hpp"

namespace ferry {
namespace {

using std::chrono::microseconds;
using io::Clock;

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return b > a ? static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count()) : 0;
}

struct Pending {
  read_req req;
  caf::typed_response_promise<read_done> promise;
  std::string path;
  bool direct = true;
};

struct Delayed {
  io::ReadResult result;
  Clock::time_point due;
};

// The reader's state and logic; the actor function below only runs the receive loop around it.
class ReaderCore {
 public:
  ReaderCore(caf::blocking_actor* self, ReaderConfig cfg) : self_(self), cfg_(std::move(cfg)) {
    if (!cfg_.arena) throw LimitError("reader: no arena given for directory " + cfg_.path);
    cfg_.engine_cfg.max_inflight = std::min(cfg_.engine_cfg.max_inflight, cfg_.engine_cfg.queue_depth);
    // Per directory: io_uring + O_DIRECT for block storage, a splitting pread pool for memory-backed
    // or O_DIRECT-refusing storage (io/read_engine/split_engine.hpp).
    const auto choice = io::choose_engine(cfg_.path, cfg_.engine, cfg_.engine_cfg, cfg_.n_dirs);
    engine_ = io::make_chosen_engine(choice);
    if (cfg_.register_buffers) engine_->register_memory(cfg_.arena->base(), cfg_.arena->bytes());
    direct_ = choice.direct;
    spdlog::info("reader {}: {} ({}) via {}{}, O_DIRECT {}, cap {} in flight, {}", cfg_.dir, cfg_.path, choice.why,
                 engine_->name(), engine_->registered() ? " (fixed buffers)" : "", direct_ ? "on" : "off",
                 choice.cfg.max_inflight,
                 choice.cfg.split_bytes ? fmt::format("reads split in {} KiB parts", choice.cfg.split_bytes >> 10)
                                        : std::string("whole reads"));
  }

  ~ReaderCore() {
    // Wait for the kernel to stop writing into the arena before anyone reuses those slots, then tell
    // every requester that this reader is gone (CAF 0.17 promises say nothing when dropped).
    engine_.reset();
    for (auto& [tag, p] : pending_)
      p.promise.deliver(caf::make_error(errc::reader_down, p.path, std::string("reader exited")));
  }

  bool busy() const { return !pending_.empty(); }
  void set_knobs(const reader_knobs& k) { knobs_ = k; }

  reader_stats stats() const {
    reader_stats s;
    s.dir = cfg_.dir;
    s.engine = engine_->name();
    s.registered = engine_->registered();
    s.direct = direct_;
    s.reads = reads_;
    s.bytes = bytes_;
    s.errors = errors_;
    s.inflight = static_cast<uint32_t>(pending_.size());
    s.queued = static_cast<uint32_t>(engine_->queued());
    return s;
  }

  void on_read(const read_req& r) {
    auto promise = self_->make_response_promise<read_done>();
    std::string path = cfg_.path + "/" + expert_file_name(r.range.key.layer, r.range.key.expert);
    if (auto why = check(r); !why.empty()) {
      ++errors_;
      promise.deliver(caf::make_error(errc::bad_request, path, why));
      return;
    }
    uint64_t tag = next_tag_++;
    pending_.emplace(tag, Pending{r, std::move(promise), std::move(path), direct_});
    submit(tag);
  }

  void poll(microseconds max_wait) {
    auto now = Clock::now();
    if (!synthetic_.empty()) max_wait = microseconds(0);
    for (auto& d : delayed_)
      max_wait = std::min(max_wait, std::chrono::duration_cast<microseconds>(d.due - now) + microseconds(1));
    if (max_wait.count() < 0) max_wait = microseconds(0);
    std::vector<io::ReadResult> done;
    engine_->reap(done, max_wait);
    done.insert(done.end(), synthetic_.begin(), synthetic_.end());
    synthetic_.clear();
    for (auto& r : done) complete(r);
    release_due();
  }

 private:
  std::string check(const read_req& r) const {
    uint64_t len = io::round_up(r.range.bytes, io::kDirectAlign);
    if (r.range.bytes == 0) return "zero-byte read";
    if (r.range.offset % io::kDirectAlign || r.range.dst.offset % io::kDirectAlign)
      return fmt::format("file offset {} / slot offset {} not 4096-aligned", r.range.offset, r.range.dst.offset);
    if (r.range.dst.slot >= cfg_.arena->slots())
      return fmt::format("slot {} out of range (arena has {})", r.range.dst.slot, cfg_.arena->slots());
    if (r.range.dst.offset + len > cfg_.arena->slot_bytes())
      return fmt::format("{} bytes at slot offset {} exceed the slot size {}", len, r.range.dst.offset,
                         cfg_.arena->slot_bytes());
    return {};
  }

  void submit(uint64_t tag) {
    Pending& p = pending_.at(tag);
    if (knobs_.refuse_odirect && p.direct) {  // test knob: answer as a filesystem without O_DIRECT would
      io::ReadResult r;
      r.tag = tag;
      r.err = EINVAL;
      r.open_failed = true;
      r.submitted = r.completed = Clock::now();
      synthetic_.push_back(r);
      return;
    }
    io::ReadOp op;
    op.tag = tag;
    op.path = p.path;
    op.offset = p.req.range.offset;
    op.bytes = p.direct ? io::round_up(p.req.range.bytes, io::kDirectAlign) : p.req.range.bytes;
    op.dst = cfg_.arena->slot(p.req.range.dst.slot) + p.req.range.dst.offset;
    op.direct = p.direct;
    const expert_range& rg = p.req.range;
    if (rg.part_bytes > 0 && !rg.part_xxh64.empty())
      op.check = std::make_shared<io::PartCheck>(io::PartCheck{rg.part_bytes, rg.file_bytes, rg.part_xxh64});
    engine_->submit(std::move(op));
  }

  void complete(io::ReadResult& r) {
    auto it = pending_.find(r.tag);
    if (it == pending_.end()) return;  // cannot happen: tags are ours and answered once
    Pending& p = it->second;
    if (r.err == EINVAL && p.direct) {
      // EINVAL with O_DIRECT: the filesystem (or this file's alignment) refuses direct I/O.
      if (direct_)
        spdlog::warn("reader {}: {} refused O_DIRECT (EINVAL at {}); reading this directory buffered", cfg_.dir,
                     cfg_.path, r.open_failed ? "open" : "read");
      direct_ = false;
      p.direct = false;
      submit(r.tag);
      return;
    }
    if (knobs_.eio_reads > 0 && r.err == 0) {  // test knob: the drive reported a media error
      --knobs_.eio_reads;
      r.err = EIO;
    }
    if (knobs_.delay_us > 0) {
      auto due = r.submitted + microseconds(knobs_.delay_us);
      if (due > r.completed) {
        delayed_.push_back({r, due});
        return;
      }
    }
    finish(r);
  }

  void finish(const io::ReadResult& r) {
    auto it = pending_.find(r.tag);
    if (it == pending_.end()) return;
    Pending& p = it->second;
    if (r.err != 0) {
      ++errors_;
      auto code = r.err == ENOENT ? errc::file_missing : errc::io_error;
      p.promise.deliver(caf::make_error(code, p.path, open_error_text(r.err)));
    } else if (r.bytes_read < p.req.range.bytes) {
      ++errors_;
      p.promise.deliver(caf::make_error(errc::short_read, p.path,
                                        fmt::format("got {} of {} bytes at offset {}", r.bytes_read,
                                                    p.req.range.bytes, p.req.range.offset)));
    } else {
      ++reads_;
      bytes_ += p.req.range.bytes;
      read_done d;
      d.req = p.req;
      d.req.dir = cfg_.dir;
      d.service_ns = ns_between(r.submitted, std::max(r.completed, Clock::now()));
      d.inflight = r.inflight_at_submit;
      d.parts_ok = r.parts_ok;
      d.bad_part = r.bad_part;
      p.promise.deliver(d);
    }
    pending_.erase(it);
  }

  void release_due() {
    auto now = Clock::now();
    for (size_t i = 0; i < delayed_.size();) {
      if (delayed_[i].due <= now) {
        finish(delayed_[i].result);
        delayed_[i] = delayed_.back();
        delayed_.pop_back();
      } else {
        ++i;
      }
    }
  }

  caf::blocking_actor* self_;
  ReaderConfig cfg_;
  std::unique_ptr<io::ReadEngine> engine_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::vector<Delayed> delayed_;
  std::vector<io::ReadResult> synthetic_;
  uint64_t next_tag_ = 1;
  bool direct_ = true;
  reader_knobs knobs_;
  uint64_t reads_ = 0, bytes_ = 0, errors_ = 0;
};

void reader_main(caf::blocking_actor* self, ReaderConfig cfg) {
  auto poll = cfg.poll;
  std::unique_ptr<ReaderCore> core;
  try {
    core = std::make_unique<ReaderCore>(self, std::move(cfg));
  } catch (const std::exception& e) {
    spdlog::error("reader: cannot start: {}", e.what());
    self->fail_state(caf::make_error(errc::reader_down, std::string(e.what())));
    return;
  }
  bool running = true;
  bool idle = false;
  auto on_read = [&](read_atom, const read_req& r) { core->on_read(r); };
  auto on_stats = [&](stats_atom) { return core->stats(); };
  auto on_knobs = [&](knobs_atom, const reader_knobs& k) { core->set_knobs(k); };
  // Blocking actors see exit messages as ordinary messages: a supervisor's shutdown or a kill ends
  // the loop; ~ReaderCore then drains the engine and fails the open requests.
  auto on_exit = [&](caf::exit_msg& m) {
    running = false;
    if (m.reason != caf::exit_reason::normal) self->fail_state(m.reason);
  };
  auto on_timeout = [&] { idle = true; };
  while (running) {
    if (!core->busy()) {
      self->receive(on_read, on_stats, on_knobs, on_exit);
      continue;
    }
    core->poll(poll);
    idle = false;
    while (running && !idle)
      self->receive(on_read, on_stats, on_knobs, on_exit, caf::after(std::chrono::seconds(0)) >> on_timeout);
  }
}

}  // namespace


void install_io_log_sink() {
  static std::once_flag once;
  std::call_once(once, [] {
    io::set_log_sink([](io::LogLevel l, const std::string& m) {
      switch (l) {
        case io::LogLevel::debug: spdlog::debug("{}", m); break;
        case io::LogLevel::info: spdlog::info("{}", m); break;
        case io::LogLevel::warn: spdlog::warn("{}", m); break;
        case io::LogLevel::error: spdlog::error("{}", m); break;
      }
    });
  });
}

reader_actor spawn_reader(caf::actor_system& sys, ReaderConfig cfg) {
  install_io_log_sink();
  return caf::actor_cast<reader_actor>(sys.spawn(reader_main, std::move(cfg)));
}

}  // namespace ferry
