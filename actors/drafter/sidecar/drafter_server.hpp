// The sidecar side of the drafter wire protocol: serves one connection with a Drafter until the peer
// closes it. ferry-drafter (apps/ferry-drafter) wraps it in a process; the fault knobs let tests and
// `ferry faults` make the sidecar crash, hang, answer garbage or speak another protocol version.
#pragma once

#include <cstdint>

#include "actors/drafter/sidecar/drafter_core.hpp"

namespace ferry {

struct ServerFaults {
  int garbage_every = 0;   // every Nth proposal is garbage (a non-frame, an out-of-vocabulary id, a wrong seq)
  int exit_after = 0;      // exit (as a crash, status 9) on the Nth proposal request
  int hang_after = 0;      // stop answering from the Nth proposal request on
  uint32_t protocol_version = 0;  // 0: the real one; else claim this version (mismatch tests)
};

// Returns 0 when the client closed the connection cleanly, 2 on a refused handshake, 3 on a dropped
// connection or socket error. Logs one line per event that ends the session (spdlog).
int serve_drafter(int fd, Drafter& drafter, const ServerFaults& faults);

}  // namespace ferry
