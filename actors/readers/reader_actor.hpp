// The NVMe reader actor: one per expert directory (drive). It owns one read engine (an io_uring, or
// the pread pool where io_uring is unavailable), reads expert files or byte ranges of them into slots of
// the pinned arena with O_DIRECT (buffered for a directory that refuses O_DIRECT), applies its
// concurrency cap, and answers each read_req with a read_done (or a ferry::errc error naming the
// file) when the bytes are in memory. It is a detached blocking actor because it waits on completions.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "io/read_engine/uring_reader.hpp"
#include "io/store/expert_store.hpp"  // expert_file_name
#include "messages/messages.hpp"

namespace ferry::io {
class PinnedArena;
}

namespace ferry {

struct ReaderConfig {
  uint32_t dir = 0;   // index in the storage directory list (reported back in read_done)
  std::string path;   // the directory
  io::EngineKind engine = io::EngineKind::automatic;
  io::EngineConfig engine_cfg;
  unsigned n_dirs = 1;  // directories read at once: an automatic pool's workers share the cores
  std::shared_ptr<io::PinnedArena> arena;  // reads land here; registered as fixed buffers if possible
  bool register_buffers = true;
  // While reads are in flight the actor alternates between waiting on completions (at most this long)
  // and draining its mailbox, so a new request waits at most this long before submission.
  std::chrono::microseconds poll{200};
};

// Spawns a reader in `sys` (detached; the caller monitors it if it supervises).
reader_actor spawn_reader(caf::actor_system& sys, ReaderConfig cfg);

// Routes ferry_io's log lines (engine choice, O_DIRECT and mlock fall-backs) to spdlog. Idempotent.
void install_io_log_sink();

}  // namespace ferry
