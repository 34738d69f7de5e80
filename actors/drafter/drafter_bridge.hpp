// The drafter bridge (DESIGN.md "Actors"): a supervisor actor that owns the ferry-drafter sidecar
// through a detached worker actor, answers each proposal request by its deadline or with an error,
// and restarts the worker (and so the sidecar) with back-off after any failure: crash, hang past the
// deadline, garbage or out-of-vocabulary answers, a refused handshake, or a sidecar that cannot start.
// While it is down every call fails at once, so the session takes a plain step; the output never
// depends on it (the verifier keeps only the target's own choices).
//
// DrafterClient is the blocking face the generation loop uses (kernels/decoding/verify.hpp ProposeFn).
#pragma once

#include <caf/fwd.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "actors/drafter/drafter_sidecar.hpp"
#include "kernels/decoding/verify.hpp"
#include "messages/messages.hpp"

namespace ferry {

class Runtime;
class Supervised;

struct DrafterBridgeOptions {
  SidecarOptions sidecar;  // exe + args ({"--drafter", SPEC, ...})
  SidecarTarget target;
  int deadline_ms = 500;  // per call: the session never waits longer
  int backoff_min_ms = 20;  // restart delay after the first failure, doubling per failure in a row
  int backoff_max_ms = 2000;
};

// $FERRY_DRAFTER if set, else `ferry-drafter` next to the running executable.
std::string default_drafter_exe();

// Sidecar options for a --draft spec: exe + {"--drafter", spec, "-t", threads}.
SidecarOptions sidecar_for_spec(const std::string& spec, int threads = 1, std::string exe = {});

// Spawns the bridge; it starts the sidecar at once. Stop it with an exit message (user_shutdown):
// the worker and the sidecar process go with it.
drafter_bridge_actor spawn_drafter_bridge(caf::actor_system& sys, const DrafterBridgeOptions& o);

// The bridge runs in the process's runtime (actors/runtime/runtime.hpp), supervised there: if the
// bridge actor itself dies it is started again (a call in flight then falls back to a plain step).
class DrafterClient {
 public:
  DrafterClient(Runtime& rt, const DrafterBridgeOptions& o);
  ~DrafterClient();
  DrafterClient(const DrafterClient&) = delete;
  DrafterClient& operator=(const DrafterClient&) = delete;

  // A checked proposal, or nullopt (drafter down, failed or late). Returns within the deadline.
  std::optional<DraftProposal> propose(std::span<const int32_t> history, int max_tokens, float gate);
  ProposeFn propose_fn();
  drafter_status status();
  // Waits until the first sidecar is up (true) or its start failed or the timeout passed (false).
  bool wait_up(std::chrono::milliseconds timeout);
  // Fault injection: kills the worker actor (its sidecar dies with it); the bridge restarts it.
  void kill_worker();
  // The running bridge (a new one after the runtime restarted it).
  drafter_bridge_actor bridge() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
