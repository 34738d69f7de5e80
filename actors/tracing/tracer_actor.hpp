// The tracer: appends every scheduling event to a trace file (messages/trace.proto: a Header record,
// then one Event record per message, each varint-length-delimited). Senders fire and forget
// (trace_atom); flush_atom answers after the file is flushed, with the count of events written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/messages.hpp"

namespace ferry {

// Steady-clock nanoseconds: what senders put in trace::Event's t_ns (0 = stamp on arrival); the tracer
// writes it relative to its own start.
uint64_t trace_now_ns();

// The cache capacities the header records (so `ferry trace` can replay the run's requests at them).
struct TraceCapacities {
  uint32_t device_slots = 0, host_slots = 0;
  uint64_t expert_bytes = 0;
};

// Spawns a detached tracer writing `path` (truncated). Throws ferry::Error when the file cannot be
// created. dirs: the expert directories that Event.dir indexes.
tracer_actor spawn_tracer(caf::actor_system& sys, const std::string& path, std::vector<std::string> dirs,
                          TraceCapacities caps = {});

}  // namespace ferry
