#include "io/read_engine/pread_pool.hpp"
#include "io/regular_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <xxhash.h>

namespace ferry::io {

void check_parts(const ReadOp& op, ReadResult& r) {
  if (!op.check || r.err != 0 || op.check->part_bytes == 0) return;
  const PartCheck& c = *op.check;
  const uint64_t end = std::min(op.offset + r.bytes_read, c.file_bytes);
  for (uint64_t i = (op.offset + c.part_bytes - 1) / c.part_bytes; i < c.xxh64.size(); ++i) {
    const uint64_t a = i * c.part_bytes, b = std::min(a + c.part_bytes, c.file_bytes);
    if (b > end) break;
    if (XXH64(op.dst + (a - op.offset), b - a, 0) != c.xxh64[i]) {
      r.bad_part = int32_t(i);
      return;
    }
    ++r.parts_ok;
  }
}

ReadResult pread_fully(const ReadOp& op) {
  ReadResult r;
  r.tag = op.tag;
  r.submitted = Clock::now();
  int fd = open_regular_file(op.path.c_str(), O_RDONLY | O_CLOEXEC | (op.direct ? O_DIRECT : 0));
  if (fd < 0) {
    r.err = errno;
    r.open_failed = true;
  } else {
    while (r.bytes_read < op.bytes) {
      ssize_t n = ::pread(fd, op.dst + r.bytes_read, op.bytes - r.bytes_read,
                          static_cast<off_t>(op.offset + r.bytes_read));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        r.err = errno;
        break;
      }
      if (n == 0) break;  // EOF
      r.bytes_read += static_cast<uint64_t>(n);
    }
    ::close(fd);
  }
  check_parts(op, r);  // in this worker, while the copied bytes are in its cache
  r.completed = Clock::now();
  return r;
}

PreadPool::PreadPool(const EngineConfig& cfg) {
  unsigned n = std::max(1u, std::min(cfg.pool_threads ? cfg.pool_threads : 4u, cfg.max_inflight));
  for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
}

PreadPool::~PreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  pending_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void PreadPool::submit(ReadOp op) {
  {
    std::lock_guard lk(mu_);
    pending_.push_back(std::move(op));
  }
  pending_cv_.notify_one();
}

void PreadPool::work() {
  std::unique_lock lk(mu_);
  for (;;) {
    pending_cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    ReadOp op = std::move(pending_.front());
    pending_.pop_front();
    ++running_;
    auto inflight = static_cast<uint32_t>(running_);
    lk.unlock();
    ReadResult r = pread_fully(op);
    r.inflight_at_submit = inflight;
    lk.lock();
    --running_;
    done_.push_back(r);
    done_cv_.notify_one();
  }
}

size_t PreadPool::reap(std::vector<ReadResult>& out, std::chrono::microseconds max_wait) {
  std::unique_lock lk(mu_);
  if (done_.empty() && max_wait.count() > 0) done_cv_.wait_for(lk, max_wait, [&] { return !done_.empty(); });
  size_t n = done_.size();
  out.insert(out.end(), done_.begin(), done_.end());
  done_.clear();
  return n;
}

size_t PreadPool::inflight() const {
  std::lock_guard lk(mu_);
  return pending_.size() + running_ + done_.size();
}

size_t PreadPool::queued() const {
  std::lock_guard lk(mu_);
  return pending_.size();
}

}  // namespace ferry::io
