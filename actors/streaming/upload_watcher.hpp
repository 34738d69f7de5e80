// Gives host-pool slots back as soon as the device has copied them, without the model thread polling.
// With a device tier, an arrived expert's bytes are uploaded from its pinned host slot on an upload
// queue; the host slot may be reused only after that copy is done. The watcher's thread waits on each
// upload's completion event in turn (DeviceTier::wait_uploaded: cudaEventSynchronize on CUDA, nothing
// on the CPU back-end) and then ends the slot's HostLease, which sends the pool its release. So a layer
// scheduler waiting for a free host slot gets one the moment the copy that held it lands.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "actors/streaming/host_lease.hpp"

namespace ferry {

class DeviceTier;

class UploadWatcher {
 public:
  explicit UploadWatcher(DeviceTier& dev);
  ~UploadWatcher();  // waits for every watched upload (releasing its lease), then joins
  UploadWatcher(const UploadWatcher&) = delete;
  UploadWatcher& operator=(const UploadWatcher&) = delete;

  // The bytes under `lease` are being uploaded into device `slot` (DeviceTier::upload was called):
  // the lease ends once that upload is done.
  void watch(uint32_t slot, HostLease lease);
  // Blocks until every watched lease has ended.
  void drain();

 private:
  void loop();

  DeviceTier& dev_;
  std::mutex mu_;
  std::condition_variable work_, idle_;
  std::deque<std::pair<uint32_t, HostLease>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace ferry
