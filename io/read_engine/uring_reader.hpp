// Whole-file or byte-range reads of expert files into the pinned arena. Two engines behind one
// interface: io_uring (O_DIRECT, fixed buffers where the kernel allows) and a pread thread pool for
// kernels or containers where io_uring_queue_init fails (ENOSYS/EPERM, io_uring_disabled).
// make_read_engine() probes at start and logs which one runs. Engines are single-owner objects: one
// thread submits and reaps (the reader actor's thread); the pool's workers are internal.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry::io {

using Clock = std::chrono::steady_clock;

// Expected xxh64 (seed 0) of each consecutive part_bytes of the whole file (the last part ends at
// file_bytes). An engine that copies with a CPU (the pread pool) hashes every part that lies wholly
// inside an op as it copies it: check_chunk_bytes at a time, each hashed right after its pread, while it
// is in the worker's L2 (EngineConfig::check_chunk_bytes); io_uring checks nothing.
struct PartCheck {
  uint64_t part_bytes = 0;
  uint64_t file_bytes = 0;
  std::vector<uint64_t> xxh64;
};

struct ReadOp {
  uint64_t tag = 0;  // the caller's id, returned in the result
  std::string path;
  uint64_t offset = 0;
  uint64_t bytes = 0;   // bytes to read; must be a multiple of 4096 when direct
  std::byte* dst = nullptr;
  bool direct = true;   // open with O_DIRECT
  std::shared_ptr<const PartCheck> check;  // optional
};

struct ReadResult {
  uint64_t tag = 0;
  int err = 0;               // errno of the failing open/read, 0 on success
  bool open_failed = false;  // err came from open(2) (EINVAL there means O_DIRECT refused)
  uint64_t bytes_read = 0;   // < op.bytes means EOF came first
  Clock::time_point submitted{};  // handed to the kernel / a worker (after the concurrency cap)
  Clock::time_point completed{};
  uint32_t inflight_at_submit = 1;  // in flight when this one was submitted, itself included
  uint32_t parts_ok = 0;   // parts of op.check hashed and found right
  int32_t bad_part = -1;   // the first part whose hash differed, or -1
};

// Hashes the parts of op.check that lie wholly inside [op.offset, op.offset + r.bytes_read) and
// records them in r (parts_ok, bad_part). Nothing without op.check or after a failed read.
void check_parts(const ReadOp& op, ReadResult& r);

struct EngineConfig {
  unsigned queue_depth = 64;   // io_uring submission queue entries
  unsigned max_inflight = 8;   // concurrency cap: more ops wait in the engine's FIFO
  unsigned pool_threads = 0;   // pread pool workers (0 = 4; concurrency is min(threads, max_inflight))
  uint64_t split_bytes = 0;    // reads longer than this go as parts (0 = auto: see split_engine.hpp)
  // Pread pool with a PartCheck: bytes per pread, each hashed right after it lands (0 = kCheckChunk;
  // the environment's FERRY_PREAD_CHECK_CHUNK overrides 0, for measurements; "whole" = one pread per op
  // and the hashes after it, the old way).
  uint64_t check_chunk_bytes = 0;
};

// 256 KiB: well inside a core's L2, so the hash reads what the copy just wrote; 8 preads per 2 MiB part.
inline constexpr uint64_t kCheckChunk = 256 << 10;

class ReadEngine {
 public:
  virtual ~ReadEngine() = default;
  virtual std::string name() const = 0;  // "io_uring" or "pread-pool"
  virtual void submit(ReadOp op) = 0;    // never blocks on I/O; beyond the cap ops are queued
  // Moves finished reads into `out`; when none is ready waits up to max_wait for one. Returns the count.
  virtual size_t reap(std::vector<ReadResult>& out, std::chrono::microseconds max_wait) = 0;
  virtual size_t inflight() const = 0;  // submitted + queued, not yet reaped
  virtual size_t queued() const = 0;    // waiting for the concurrency cap
  // Lets reads into [base, base+bytes) use io_uring fixed buffers. Returns false (and keeps working with
  // plain reads) when the kernel refuses, e.g. RLIMIT_MEMLOCK.
  virtual bool register_memory(std::byte* base, size_t bytes) = 0;
  virtual bool registered() const = 0;
};

enum class EngineKind { automatic, uring, pread_pool };

// True when an io_uring can be created here; otherwise `why` says what the kernel answered.
bool probe_io_uring(std::string* why = nullptr);

// automatic: io_uring when the probe succeeds, else the pread pool (logged). uring: throws
// ferry::LimitError when io_uring is unavailable.
std::unique_ptr<ReadEngine> make_read_engine(EngineKind kind, const EngineConfig& cfg);

std::unique_ptr<ReadEngine> make_uring_engine(const EngineConfig& cfg);  // throws LimitError

// Whether `dir` accepts O_DIRECT opens (creates and removes a probe file when the directory is
// writable; otherwise tries the first regular file in it). `why` gets the errno text on refusal.
bool probe_o_direct(const std::string& dir, std::string* why = nullptr);

}  // namespace ferry::io
