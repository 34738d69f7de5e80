// A small fixed thread pool for the CPU back-end. parallel_for splits [0, n) into one contiguous range
// per thread; every index is handled by exactly one thread, and callers compute each output element
// entirely inside one index, so results never depend on the thread count (the exactness rule in
// kernels/backend.hpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::cpu {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end)>;

  // `threads` workers in total, the calling thread included; 0 = hardware concurrency.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Calls fn(begin, end) on disjoint contiguous ranges covering [0, n). At most one range per thread,
  // and no range shorter than `grain` (small jobs stay on the calling thread: waking workers costs
  // more than it saves). Blocks until every range is done; rethrows the first exception thrown.
  // A call from inside a running range runs serially on that thread (no nested fan-out).
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);

 private:
  void worker_loop(int index);
  void run_range(int index, int parts);

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time

  std::mutex m_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  int parts_ = 0;
  int pending_ = 0;
  std::exception_ptr error_;
};

}  // namespace ferry::cpu
