// A pin on one expert's host-pool slot, held by whoever may still read the slot. The host pool pins a
// slot when it grants it (acquire); exactly one party gives it back, and the lease makes that the
// type's job: destroying (or reset()) a held lease sends the pool release(key, ok) once; handing it
// on with a message (handover()) drops the local claim without releasing, and the receiver adopts the
// pin in a lease of its own (the layer scheduler hands each landed expert to the layer call this way,
// with its expert_ready). With late verification the layer call's lease releases to the layer
// scheduler instead, which holds the pool's pin until the hash has answered. Move-only.
#pragma once

#include <utility>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>

#include "messages/messages.hpp"

namespace ferry {

class HostLease {
 public:
  HostLease() = default;
  HostLease(const host_pool_actor& pool, const expert_key& k)
      : to_(caf::actor_cast<caf::actor>(pool)), key_(k), held_(true) {}
  HostLease(const layer_scheduler_actor& sched, const expert_key& k)
      : to_(caf::actor_cast<caf::actor>(sched)), key_(k), held_(true) {}
  HostLease(HostLease&& o) noexcept { *this = std::move(o); }
  HostLease& operator=(HostLease&& o) noexcept {
    if (this != &o) {
      reset();
      to_ = std::move(o.to_);
      key_ = o.key_;
      ok_ = o.ok_;
      held_ = std::exchange(o.held_, false);
    }
    return *this;
  }
  HostLease(const HostLease&) = delete;
  HostLease& operator=(const HostLease&) = delete;
  ~HostLease() { reset(); }

  // The bytes in the slot are bad (a failed fill): the release tells the pool to drop the entry.
  void fail() { ok_ = false; }
  // Gives the pin back now (once); a no-op for an empty lease.
  void reset();
  // The pin travels on with a message: this lease no longer releases it.
  void handover() { held_ = false; }

  explicit operator bool() const { return held_; }
  const expert_key& key() const { return key_; }

 private:
  caf::actor to_;  // the host pool, or a layer scheduler (late verification)
  expert_key key_;
  bool ok_ = true;
  bool held_ = false;
};

}  // namespace ferry
