#include "io/read_engine/pread_pool.hpp"
#include "io/regular_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string_view>

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

namespace {

// The parts of op.check hashed as the bytes land, chunk by chunk (the incremental form of check_parts:
// the same parts are checked and the same digests compared).
class ChunkChecker {
 public:
  explicit ChunkChecker(const ReadOp& op) : op_(op), c_(*op.check), st_(XXH64_createState()) {}
  ~ChunkChecker() { XXH64_freeState(st_); }
  ChunkChecker(const ChunkChecker&) = delete;
  ChunkChecker& operator=(const ChunkChecker&) = delete;

  // How many bytes the next pread at file offset `at` may take: up to `chunk`, never across a part end.
  uint64_t next_len(uint64_t at, uint64_t left, uint64_t chunk) const {
    const uint64_t part_end = (at / c_.part_bytes + 1) * c_.part_bytes;
    return std::min({left, chunk, part_end - at});
  }

  // Bytes [at, at + n) of the file have landed at op.dst + (at - op.offset).
  void landed(uint64_t at, uint64_t n, ReadResult& r) {
    if (r.bad_part >= 0) return;
    const uint64_t i = at / c_.part_bytes;
    if (i >= c_.xxh64.size()) return;
    const uint64_t a = i * c_.part_bytes, b = std::min(a + c_.part_bytes, c_.file_bytes);
    if (a < op_.offset || at >= b) return;  // a part that began before this op, or bytes past the file's end
    if (at == a) XXH64_reset(st_, 0);
    const uint64_t upto = std::min(at + n, b);
    XXH64_update(st_, op_.dst + (at - op_.offset), upto - at);
    if (upto < b) return;
    if (XXH64_digest(st_) != c_.xxh64[i])
      r.bad_part = int32_t(i);
    else
      ++r.parts_ok;
  }

 private:
  const ReadOp& op_;
  const PartCheck& c_;
  XXH64_state_t* st_;
};

}  // namespace

ReadResult pread_fully(const ReadOp& op, uint64_t check_chunk) {
  ReadResult r;
  r.tag = op.tag;
  r.submitted = Clock::now();
  const bool chunked = check_chunk > 0 && op.check && op.check->part_bytes > 0;
  std::optional<ChunkChecker> checker;
  if (chunked) checker.emplace(op);
  int fd = open_regular_file(op.path.c_str(), O_RDONLY | O_CLOEXEC | (op.direct ? O_DIRECT : 0));
  if (fd < 0) {
    r.err = errno;
    r.open_failed = true;
  } else {
    while (r.bytes_read < op.bytes) {
      const uint64_t at = op.offset + r.bytes_read, left = op.bytes - r.bytes_read;
      const uint64_t want = chunked ? checker->next_len(at, left, check_chunk) : left;
      ssize_t n = ::pread(fd, op.dst + r.bytes_read, want, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        r.err = errno;
        break;
      }
      if (n == 0) break;  // EOF
      if (chunked) checker->landed(at, uint64_t(n), r);  // while the copied bytes are in this core's cache
      r.bytes_read += static_cast<uint64_t>(n);
    }
    ::close(fd);
  }
  if (!chunked) check_parts(op, r);
  if (r.err != 0) {  // as check_parts: nothing is reported checked after a failed read
    r.parts_ok = 0;
    r.bad_part = -1;
  }
  r.completed = Clock::now();
  return r;
}

uint64_t pread_check_chunk(const EngineConfig& cfg) {
  if (cfg.check_chunk_bytes > 0) return cfg.check_chunk_bytes;
  if (const char* e = std::getenv("FERRY_PREAD_CHECK_CHUNK"); e && *e) {
    if (std::string_view(e) == "whole") return 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(e, &end, 10);
    if (end && *end == '\0' && v >= 4096 && v % 4096 == 0) return v;
  }
  return kCheckChunk;
}

PreadPool::PreadPool(const EngineConfig& cfg) : check_chunk_(pread_check_chunk(cfg)) {
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
    ReadResult r = pread_fully(op, check_chunk_);
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
