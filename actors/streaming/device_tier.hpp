// The model thread's side of the device tier (the CUDA back-end's GPU expert cache; docs/ARCHITECTURE.md
// "Tiers"): the device memory of every slot the device-cache manager hands out, and the upload queues
// (default 8) that copy expert bytes from the pinned host arena into those slots.
//
// Ordering is done with back-end events, so the host never waits for a copy or a kernel:
//   upload(slot): upload queue q waits for `released[slot]` (the compute that last read the slot),
//                 copies the bytes, records `arrived[slot]`; the compute queue waits for `arrived[slot]`.
//   computed(slot): records `released[slot]` on the compute queue after the work that reads the slot.
// So an expert's compute starts on the GPU the moment its own bytes land, uploads of later experts
// overlap it on other queues, and a slot (an evicted cache slot, or a scratch slot reused inside one
// call) is overwritten only after every kernel that read its previous contents. The host learns that
// an upload finished (so the pinned host slot can go back to the host pool) from wait_uploaded(), which
// the UploadWatcher's thread calls (upload_watcher.hpp): no polling.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/streaming/compute_tier.hpp"
#include "kernels/backend.hpp"

namespace ferry {

class DeviceTier {
 public:
  // slots = cache + scratch slots of the device-cache manager; upload_queues >= 1.
  DeviceTier(ExpertGeometry g, Backend& be, uint32_t slots, uint32_t upload_queues);
  ~DeviceTier();
  DeviceTier(const DeviceTier&) = delete;
  DeviceTier& operator=(const DeviceTier&) = delete;

  // The weights in a slot whose bytes are already on the device (a hit).
  ExpertWeights at(uint32_t slot) const { return g_.view(slot_ptr(slot)); }
  // Queues the upload of an expert's bytes (pinned host memory) into `slot` on the next upload
  // queue, and makes compute wait for it; returns the weights compute may use at once.
  ExpertWeights upload(uint32_t slot, const std::byte* host);
  // Compute has queued everything that reads `slot`.
  void computed(uint32_t slot);
  // Blocks until the last upload queued into `slot` has completed (its host bytes may then be reused).
  // Safe from another thread than the one queueing uploads (it only waits on the slot's event).
  void wait_uploaded(uint32_t slot);

  uint32_t slots() const { return slots_; }
  uint32_t upload_queues() const { return queues_; }
  uint32_t last_queue() const { return (next_queue_ + queues_ - 1) % queues_; }  // of the last upload
  uint64_t uploads() const { return uploads_; }
  uint64_t upload_bytes() const { return uploads_ * bytes_; }
  uint64_t expert_bytes() const { return bytes_; }  // bytes one upload copies (the payload, no padding)

 private:
  std::byte* slot_ptr(uint32_t s) const { return base_ + size_t(s) * bytes_; }
  ExpertGeometry g_;
  Backend& be_;
  uint64_t bytes_ = 0;
  uint32_t slots_ = 0, queues_ = 1, next_queue_ = 0;
  std::byte* base_ = nullptr;
  std::vector<Backend::Event> arrived_, released_;
  uint64_t uploads_ = 0;
};

}  // namespace ferry
