// The runtime root (DESIGN.md "Actors"): one per process, built by the app's main path before anything
// spawns an actor. It owns THE actor system (ferry types registered), the tracer (once a component
// asks for a trace file) and the supervisor actor, and everything that spawns actors is handed it
// (StreamingExperts, the drafter client).
//
// Supervision: every long-lived actor is registered here. An actor that can be restarted (the drafter
// bridge; readers are restarted by the read service, which is itself watched here) is spawned through
// supervise() and started again by the supervisor when it stops abnormally, within a restart budget.
// An actor that cannot be restarted (read service, host pool, layer schedulers, device-cache manager:
// they hold the state of requests in flight) is registered with watch(); when it stops for any
// reason other than an orderly shutdown, every listener (the model thread's mailbox, waiting on a
// layer call) receives a caf::error (errc::actor_down, naming the actor and the reason) at once, so
// the pending request fails now instead of at its timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actors/tracing/tracer_actor.hpp"
#include "messages/messages.hpp"

namespace ferry {

struct SupervisorRegistry;

// An actor the supervisor restarts: current() is the handle of its running incarnation.
class Supervised {
 public:
  Supervised(std::shared_ptr<SupervisorRegistry> reg, size_t id) : reg_(std::move(reg)), id_(id) {}
  caf::actor current() const;
  uint32_t restarts() const;
  // Stops it for good (an orderly shutdown: no restart) and returns the incarnation that was running.
  caf::actor stop();

 private:
  std::shared_ptr<SupervisorRegistry> reg_;
  size_t id_;
};

struct RuntimeOptions {
  uint32_t restart_budget = 5;               // restarts of one supervised actor per window
  std::chrono::seconds restart_window{60};
};

// An error as a person reads it: an actor_down error is its own sentence (it names the actor); any
// other error is rendered by the actor system.
std::string describe_error(caf::actor_system& sys, const caf::error& e);

class Runtime {
 public:
  explicit Runtime(RuntimeOptions o = {});
  ~Runtime();  // stops the tracer and the supervisor, then waits for every actor of the system
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  caf::actor_system& system();

  // Watches an actor that cannot be restarted. critical: its loss fails the listeners' pending
  // requests (else it is only logged: the tracer).
  void watch(const caf::actor& a, std::string name, bool critical = true);
  template <class Handle>
  void watch(const Handle& h, std::string name, bool critical = true) {
    watch(caf::actor_cast<caf::actor>(h), std::move(name), critical);
  }
  // Spawns an actor through `start` and starts it again whenever it stops abnormally (RuntimeOptions'
  // budget; past it the actor stays down and is reported like a non-critical watched actor).
  std::shared_ptr<Supervised> supervise(std::string name, std::function<caf::actor()> start);
  // `listener` is told (a caf::error with errc::actor_down) the moment a critical actor is lost.
  void listen(const caf::actor& listener);

  // The trace file (messages/trace.proto): started on the first call, shared after (the path of a
  // later call must be the same). dirs: the expert directories Event.dir indexes; caps: the cache
  // capacities its header records (for `ferry trace`'s replay).
  tracer_actor start_tracer(const std::string& path, const std::vector<std::string>& dirs, TraceCapacities caps = {});
  tracer_actor tracer() const;
  uint64_t flush_trace();  // events written so far (0 without a tracer)

  // The running incarnation of a registered actor by name ("host pool", "layer scheduler 3", ...), or
  // an empty handle. For tests and fault injection.
  caf::actor find(const std::string& name) const;
  // The first loss of a critical actor, "" while there has been none.
  std::string failure() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
