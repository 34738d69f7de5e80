#include "actors/streaming/upload_watcher.hpp"

#include "actors/streaming/device_tier.hpp"

namespace ferry {

UploadWatcher::UploadWatcher(DeviceTier& dev) : dev_(dev), thread_([this] { loop(); }) {}

UploadWatcher::~UploadWatcher() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void UploadWatcher::watch(uint32_t slot, HostLease lease) {
  {
    std::lock_guard lk(mu_);
    queue_.emplace_back(slot, std::move(lease));
  }
  work_.notify_one();
}

void UploadWatcher::drain() {
  std::unique_lock lk(mu_);
  idle_.wait(lk, [&] { return queue_.empty() && !busy_; });
}

// Waiting in arrival order may hold a lease a little past its own upload (until the uploads watched
// before it are done, or a later upload into the same device slot, which re-records its event); it
// never waits on anything the host must do first, so it cannot deadlock the pool.
void UploadWatcher::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    work_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ with nothing left
    auto [slot, lease] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    dev_.wait_uploaded(slot);  // the copy out of the host slot is done
    lease.reset();             // release to the host pool
    lk.lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace ferry
