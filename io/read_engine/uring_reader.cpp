#include "io/read_engine/uring_reader.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <dirent.h>

#include "io/errors.hpp"
#include "io/read_engine/pinned_arena.hpp"
#include "io/read_engine/pread_pool.hpp"
#include "io/read_engine/uring_reader_log.hpp"
#include "io/regular_file.hpp"

namespace ferry::io {
namespace {

// io_uring limits one fixed buffer to 1 GiB (IORING_MAX_REG_BUFFERS aside), so the arena is
// registered as consecutive 1 GiB pieces.
constexpr size_t kFixedPiece = size_t{1} << 30;
// One SQE reads at most 2^31-1 bytes (the kernel's MAX_RW_COUNT); ops are far smaller (17.5 MB).
constexpr uint64_t kMaxOpBytes = uint64_t{1} << 30;

struct Inflight {
  ReadOp op;
  int fd = -1;
  ReadResult result;
};

class UringEngine final : public ReadEngine {
 public:
  explicit UringEngine(const EngineConfig& cfg) : cfg_(cfg) {
    int rc = io_uring_queue_init(std::max(cfg.queue_depth, 1u), &ring_, 0);
    if (rc < 0) throw LimitError(std::string("io_uring_queue_init failed: ") + std::strerror(-rc));
  }
  ~UringEngine() override {
    // Drain what the kernel still writes into caller memory before the ring goes away.
    std::vector<ReadResult> sink;
    while (submitted_ > 0) reap_ready(sink, std::chrono::milliseconds(100));
    for (auto* f : pending_) delete f;
    if (registered_) io_uring_unregister_buffers(&ring_);
    io_uring_queue_exit(&ring_);
  }

  std::string name() const override { return "io_uring"; }

  void submit(ReadOp op) override {
    auto* f = new Inflight{std::move(op)};
    f->result.tag = f->op.tag;
    pending_.push_back(f);
    pump();
  }

  size_t reap(std::vector<ReadResult>& out, std::chrono::microseconds max_wait) override {
    size_t before = out.size();
    reap_ready(out, max_wait);
    pump();
    return out.size() - before;
  }

  size_t inflight() const override { return submitted_ + pending_.size(); }
  size_t queued() const override { return pending_.size(); }

  bool register_memory(std::byte* base, size_t bytes) override {
    std::vector<iovec> iov;
    for (size_t off = 0; off < bytes; off += kFixedPiece)
      iov.push_back({base + off, std::min(kFixedPiece, bytes - off)});
    int rc = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (rc < 0) {
      log_warn("io_uring: registering {} bytes of fixed buffers failed ({}); using plain reads", bytes,
               std::strerror(-rc));
      return false;
    }
    fixed_base_ = base;
    fixed_bytes_ = bytes;
    registered_ = true;
    return true;
  }
  bool registered() const override { return registered_; }

 private:
  // Submits queued ops while the concurrency cap allows.
  void pump() {
    bool any = false;
    while (!pending_.empty() && submitted_ < cfg_.max_inflight) {
      Inflight* f = pending_.front();
      pending_.pop_front();
      if (!open_op(f)) {
        finish(f, ready_);
        continue;
      }
      f->result.submitted = Clock::now();
      f->result.inflight_at_submit = static_cast<uint32_t>(submitted_ + 1);
      queue_sqe(f);
      any = true;
    }
    if (any) io_uring_submit(&ring_);
  }

  bool open_op(Inflight* f) {
    if (f->op.bytes > kMaxOpBytes) {
      f->result.err = EFBIG;
      return false;
    }
    f->fd = open_regular_file(f->op.path.c_str(), O_RDONLY | O_CLOEXEC | (f->op.direct ? O_DIRECT : 0));
    if (f->fd < 0) {
      f->result.err = errno;
      f->result.open_failed = true;
      f->result.submitted = Clock::now();
      return false;
    }
    return true;
  }

  // Queues the remainder of f's read (all of it the first time, the rest after a short read).
  void queue_sqe(Inflight* f) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // the SQ is full of unsubmitted entries: flush and retry once
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    auto done = f->result.bytes_read;
    std::byte* dst = f->op.dst + done;
    auto len = static_cast<unsigned>(f->op.bytes - done);
    auto off = f->op.offset + done;
    int idx = fixed_index(dst, len);
    if (idx >= 0)
      io_uring_prep_read_fixed(sqe, f->fd, dst, len, off, idx);
    else
      io_uring_prep_read(sqe, f->fd, dst, len, off);
    io_uring_sqe_set_data(sqe, f);
    ++submitted_;
  }

  int fixed_index(const std::byte* dst, size_t len) const {
    if (!registered_ || dst < fixed_base_ || dst + len > fixed_base_ + fixed_bytes_) return -1;
    size_t a = static_cast<size_t>(dst - fixed_base_);
    if (a / kFixedPiece != (a + len - 1) / kFixedPiece) return -1;  // crosses a piece: plain read
    return static_cast<int>(a / kFixedPiece);
  }

  void reap_ready(std::vector<ReadResult>& out, std::chrono::microseconds max_wait) {
    out.insert(out.end(), ready_.begin(), ready_.end());
    bool have = !ready_.empty();
    ready_.clear();
    io_uring_cqe* cqe = nullptr;
    if (!have && submitted_ > 0 && max_wait.count() > 0) {
      __kernel_timespec ts{};
      ts.tv_sec = max_wait.count() / 1000000;
      ts.tv_nsec = (max_wait.count() % 1000000) * 1000;
      io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    }
    bool resubmit = false;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      auto* f = static_cast<Inflight*>(io_uring_cqe_get_data(cqe));
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --submitted_;
      if (res == -EINTR || res == -EAGAIN) {
        queue_sqe(f);
        resubmit = true;
      } else if (res < 0) {
        f->result.err = -res;
        finish(f, out);
      } else if (res > 0 && f->result.bytes_read + res < f->op.bytes) {
        f->result.bytes_read += static_cast<uint64_t>(res);  // short read: ask for the rest
        queue_sqe(f);
        resubmit = true;
      } else {
        f->result.bytes_read += static_cast<uint64_t>(res);
        finish(f, out);
      }
    }
    if (resubmit) io_uring_submit(&ring_);
  }

  void finish(Inflight* f, std::vector<ReadResult>& out) {
    if (f->fd >= 0) ::close(f->fd);
    f->result.completed = Clock::now();
    out.push_back(f->result);
    delete f;
  }

  EngineConfig cfg_;
  io_uring ring_{};
  std::deque<Inflight*> pending_;
  std::vector<ReadResult> ready_;  // finished without reaching the kernel (open failed)
  size_t submitted_ = 0;
  bool registered_ = false;
  std::byte* fixed_base_ = nullptr;
  size_t fixed_bytes_ = 0;
};

}  // namespace

bool probe_io_uring(std::string* why) {
  io_uring ring{};
  int rc = io_uring_queue_init(2, &ring, 0);
  if (rc < 0) {
    if (why) *why = std::strerror(-rc);
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
}

std::unique_ptr<ReadEngine> make_uring_engine(const EngineConfig& cfg) { return std::make_unique<UringEngine>(cfg); }

std::unique_ptr<ReadEngine> make_read_engine(EngineKind kind, const EngineConfig& cfg) {
  if (kind == EngineKind::pread_pool) return std::make_unique<PreadPool>(cfg);
  std::string why;
  if (probe_io_uring(&why)) return make_uring_engine(cfg);
  if (kind == EngineKind::uring) throw LimitError("io_uring requested but unavailable: " + why);
  log_warn("io_uring unavailable ({}); falling back to the pread thread pool ({} threads)", why,
           std::min(cfg.pool_threads ? cfg.pool_threads : 4u, cfg.max_inflight));
  return std::make_unique<PreadPool>(cfg);
}

bool probe_o_direct(const std::string& dir, std::string* why) {
  std::string probe = dir + "/.ferry-odirect-probe";
  int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    return true;
  }
  if (errno == EINVAL) {
    if (why) *why = std::strerror(errno);
    return false;
  }
  // Not writable: try an existing regular file.
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string p = dir + "/" + e->d_name;
      struct stat st{};
      if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      fd = ::open(p.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
      int err = errno;
      ::closedir(d);
      if (fd >= 0) {
        ::close(fd);
        return true;
      }
      if (why) *why = std::strerror(err);
      return err != EINVAL;
    }
    ::closedir(d);
  }
  return true;  // nothing to test against: assume yes and fall back on the first EINVAL
}

}  // namespace ferry::io
