// The fall-back read engine: a pool of threads doing open/pread/close, used where io_uring cannot be
// created. Same contract as every ReadEngine (io/read_engine/uring_reader.hpp).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "io/read_engine/uring_reader.hpp"

namespace ferry::io {

class PreadPool final : public ReadEngine {
 public:
  explicit PreadPool(const EngineConfig& cfg);
  ~PreadPool() override;

  std::string name() const override { return "pread-pool"; }
  void submit(ReadOp op) override;
  size_t reap(std::vector<ReadResult>& out, std::chrono::microseconds max_wait) override;
  size_t inflight() const override;
  size_t queued() const override;
  bool register_memory(std::byte*, size_t) override { return false; }
  bool registered() const override { return false; }

 private:
  void work();

  uint64_t check_chunk_ = 0;

  mutable std::mutex mu_;
  std::condition_variable pending_cv_;
  std::condition_variable done_cv_;
  std::deque<ReadOp> pending_;
  std::vector<ReadResult> done_;
  size_t running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// Reads op into op.dst with pread, retrying short reads until EOF. Shared with the bench's baseline.
// With op.check, every part wholly inside the op is hashed: with check_chunk > 0 the reads go
// check_chunk bytes at a time (never across a part boundary) and each is hashed as it lands, so the hash
// reads from cache what the copy wrote; with 0, one pread and check_parts after it. Same results either way.
ReadResult pread_fully(const ReadOp& op, uint64_t check_chunk = kCheckChunk);

// The check_chunk a PreadPool uses for cfg (its field, else FERRY_PREAD_CHECK_CHUNK: bytes or "whole",
// else kCheckChunk).
uint64_t pread_check_chunk(const EngineConfig& cfg);

}  // namespace ferry::io
