#include "actors/streaming/device_tier.hpp"

#include "io/errors.hpp"

namespace ferry {

DeviceTier::DeviceTier(ExpertGeometry g, Backend& be, uint32_t slots, uint32_t upload_queues)
    : g_(g), be_(be), bytes_(g.payload_bytes()), slots_(slots), queues_(upload_queues) {
  if (slots_ == 0) throw ConfigError("device tier: needs at least one slot");
  if (queues_ == 0) throw ConfigError("device tier: --upload-streams must be >= 1");
  base_ = static_cast<std::byte*>(be_.alloc_uninit(bytes_ * slots_));  // every slot is uploaded before use
  be_.set_upload_queues(queues_);
  arrived_.resize(slots_);
  released_.resize(slots_);
  for (uint32_t s = 0; s < slots_; ++s) {
    arrived_[s] = be_.create_event();
    released_[s] = be_.create_event();
    // The allocation (and its zero fill) is ordered on the compute queue: the first upload into each
    // slot waits for it like it waits for any earlier reader.
    be_.record_event(released_[s], Backend::kComputeQueue);
  }
}

DeviceTier::~DeviceTier() {
  be_.synchronize();
  for (uint32_t s = 0; s < slots_; ++s) {
    be_.sync_event(arrived_[s]);
    be_.destroy_event(arrived_[s]);
    be_.destroy_event(released_[s]);
  }
  be_.release(base_);
}

ExpertWeights DeviceTier::upload(uint32_t slot, const std::byte* host) {
  if (slot >= slots_) throw LimitError("device tier: slot " + std::to_string(slot) + " of " + std::to_string(slots_));
  const int q = static_cast<int>(next_queue_);
  next_queue_ = (next_queue_ + 1) % queues_;
  be_.wait_event(q, released_[slot]);
  be_.upload_async(q, slot_ptr(slot), host, bytes_);
  be_.record_event(arrived_[slot], q);
  be_.wait_event(Backend::kComputeQueue, arrived_[slot]);
  ++uploads_;
  return g_.view(slot_ptr(slot));
}

void DeviceTier::computed(uint32_t slot) { be_.record_event(released_[slot], Backend::kComputeQueue); }

void DeviceTier::wait_uploaded(uint32_t slot) { be_.sync_event(arrived_[slot]); }

}  // namespace ferry
