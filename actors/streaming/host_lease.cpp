#include "actors/streaming/host_lease.hpp"

#include <caf/send.hpp>

namespace ferry {

void HostLease::reset() {
  if (!std::exchange(held_, false)) return;
  caf::anon_send(to_, release_atom_v, key_, ok_);
}

}  // namespace ferry
