// The reader supervisor ("read service"): owns one reader actor per expert directory and is the only
// way the rest of the runtime reads expert bytes. For each fetch it picks the copy expected to finish
// first (SourceChooser), feeds measured read times back into the chooser, retries an I/O error on
// another copy (a fetch with no copy left ends with an error naming the file), restarts a dead reader
// and re-issues its in-flight reads (to a replica when one exists, else to the restarted reader), and
// escalates (quits with errc::restart_budget) when a directory's restart budget is spent.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/readers/reader_actor.hpp"
#include "actors/readers/source_chooser.hpp"
#include "messages/messages.hpp"

namespace ferry {

struct ReadServiceConfig {
  std::vector<std::string> dirs;               // expert directories; fetch_req::dirs index this list
  std::shared_ptr<io::PinnedArena> arena;      // shared by every reader
  io::EngineKind engine = io::EngineKind::automatic;
  io::EngineConfig engine_cfg;                 // per reader: queue depth and concurrency cap
  SourceChooserConfig chooser;
  std::vector<double> initial_rates_bps;       // optional, per directory (else chooser.initial_rate_bps)
  std::chrono::milliseconds read_timeout{30000};
  uint32_t max_attempts = 6;                   // reads per fetch, first one included
  uint32_t restart_budget = 5;                 // restarts of one directory's reader per window
  std::chrono::seconds restart_window{60};
  std::chrono::milliseconds retry_backoff{2};  // wait for a restarting reader
  tracer_actor tracer;                         // optional
};

// Spawns the supervisor and its readers. Stop it with an exit message (user_shutdown): its readers
// stop with it.
read_service_actor spawn_read_service(caf::actor_system& sys, ReadServiceConfig cfg);

}  // namespace ferry
