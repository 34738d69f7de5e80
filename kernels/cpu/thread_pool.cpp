#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>

namespace ferry::cpu {

namespace {
thread_local bool t_inside_range = false;
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  size_ = threads;
  for (int i = 1; i < size_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_range(int index, int parts) {
  const int64_t begin = n_ * index / parts;
  const int64_t end = n_ * (index + 1) / parts;
  if (begin >= end) return;
  try {
    t_inside_range = true;
    (*fn_)(begin, end);
    t_inside_range = false;
  } catch (...) {
    t_inside_range = false;
    std::lock_guard lk(m_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    int parts = 0;
    {
      std::unique_lock lk(m_);
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      parts = parts_;
    }
    if (index < parts) run_range(index, parts);
    {
      std::lock_guard lk(m_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t parts = std::min<int64_t>(size_, std::max<int64_t>(1, n / grain));
  if (parts <= 1 || t_inside_range) {
    fn(0, n);
    return;
  }
  std::lock_guard call(call_mutex_);
  {
    std::lock_guard lk(m_);
    fn_ = &fn;
    n_ = n;
    parts_ = static_cast<int>(parts);
    pending_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_range(0, static_cast<int>(parts));
  std::exception_ptr err;
  {
    std::unique_lock lk(m_);
    done_.wait(lk, [&] { return pending_ == 0; });
    err = error_;
    fn_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace ferry::cpu
