// A pin on one expert's host-pool slot, held by whoever may still read the slot. The host pool pins a
// slot when it grants it (acquire); exactly one party gives it back, and the lease makes that the
// type's job: destroying (or reset()) a held lease sends the pool release(key, ok) once; handing it
// on with a message (handover()) drops the local claim without releasing, and the receiver adopts the
// pin in a lease of its own (the layer scheduler hands each landed expert to the layer call this way,
// with its expert_ready). Move-only.
#pragma once

#include <utility>

#include "messages/messages.hpp"

namespace ferry {

class HostLease {
 public:
  HostLease() = default;
  HostLease(host_pool_actor pool, const expert_key& k) : pool_(std::move(pool)), key_(k), held_(true) {}
  HostLease(HostLease&& o) noexcept { *this = std::move(o); }
  HostLease& operator=(HostLease&& o) noexcept {
    if (this != &o) {
      reset();
      pool_ = std::move(o.pool_);
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
  host_pool_actor pool_;
  expert_key key_;
  bool ok_ = true;
  bool held_ = false;
};

}  // namespace ferry
