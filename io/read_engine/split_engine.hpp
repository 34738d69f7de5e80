// Read engines that take what the storage gives.
//
// Why: one expert is one 17.5 MB read. On memory-backed storage (tmpfs, ramfs: O_DIRECT is refused
// there) a read is a memcpy by the thread that issues it, so one read per reader caps a directory at one
// core's copy rate (io_uring runs buffered page-cache reads inline: ~2.5 GB/s per reader measured on the
// H200 host, against 31 GB/s for 16 parallel `cat`). Splitting each read into parts that several pool
// workers copy at once lets one expert use several cores. NVMe keeps io_uring with O_DIRECT, which
// queues deep without threads.
#pragma once

#include <memory>
#include <string>

#include "io/read_engine/uring_reader.hpp"

namespace ferry::io {

// Wraps `inner`: an op longer than part_bytes goes to it as consecutive parts of part_bytes (rounded
// up to 4096; the last part takes the rest) and comes back as one result once every part is in: the
// first error, bytes read up to the first short part, the earliest submission, the latest completion.
std::unique_ptr<ReadEngine> make_split_engine(std::unique_ptr<ReadEngine> inner, uint64_t part_bytes);

enum class StorageKind { memory, block };

// statfs: tmpfs and ramfs are memory; anything else (or an unreadable directory) is block storage.
StorageKind storage_kind(const std::string& dir);

// What a reader of one directory runs: engine, its settings, and whether reads open with O_DIRECT.
struct EngineChoice {
  EngineKind kind = EngineKind::uring;
  EngineConfig cfg;
  bool direct = true;
  std::string why;  // one line for the log: what was found and what it led to
};

// `--io-engine auto` per directory: memory-backed storage, or a directory that refuses O_DIRECT
// (buffered reads come from the page cache), gets the pread pool with `cfg.pool_threads` workers
// (0 = twice the machine's cores / `dirs`, at least 2) and reads split into cfg.split_bytes parts (0 = 2 MiB);
// block storage gets io_uring with O_DIRECT (falling back to the pool where io_uring is unavailable).
// An explicit kind is kept (with the same O_DIRECT probe); split_bytes 0 then means no splitting.
EngineChoice choose_engine(const std::string& dir, EngineKind requested, EngineConfig cfg, unsigned dirs);

// The engine a choice describes (split when cfg.split_bytes > 0).
std::unique_ptr<ReadEngine> make_chosen_engine(const EngineChoice& c);

}  // namespace ferry::io
