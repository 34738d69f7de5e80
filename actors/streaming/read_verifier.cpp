#include "actors/streaming/read_verifier.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <caf/all.hpp>
#include <xxhash.h>

namespace ferry {

namespace {

caf::behavior hasher(caf::event_based_actor*, std::shared_ptr<VerifyCounters> counters) {
  return {
      [counters](caf::get_atom, uint64_t address, uint64_t bytes) -> uint64_t {
        const auto t0 = std::chrono::steady_clock::now();
        const uint64_t h = XXH64(reinterpret_cast<const void*>(address), bytes, 0);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
        counters->hashes.fetch_add(1, std::memory_order_relaxed);
        counters->bytes.fetch_add(bytes, std::memory_order_relaxed);
        counters->ns.fetch_add(uint64_t(ns.count()), std::memory_order_relaxed);
        return h;
      },
  };
}

}  // namespace

ReadVerifier::ReadVerifier(caf::actor_system& sys, unsigned threads)
    : sys_(&sys), counters_(std::make_shared<VerifyCounters>()) {
  for (unsigned i = 0; i < std::max(threads, 1u); ++i) hashers_.push_back(sys.spawn<caf::detached>(hasher, counters_));
}

ReadVerifier::~ReadVerifier() { stop(); }

void ReadVerifier::stop() {
  if (stopped_) return;
  stopped_ = true;
  // Sending the exit is not enough: a hasher in the middle of an XXH64 keeps reading the slot, and
  // the streaming runtime frees the arena right after this (seen: a segfault in XXH64 when a
  // generation ended on an unverifiable expert while its other reads were still being hashed).
  caf::scoped_actor self{*sys_};
  for (auto& h : hashers_) self->send_exit(h, caf::exit_reason::user_shutdown);
  self->wait_for(hashers_);
}

caf::actor ReadVerifier::next() { return hashers_[next_.fetch_add(1, std::memory_order_relaxed) % hashers_.size()]; }

unsigned ReadVerifier::default_threads() {
  // Half the cores, 1..8. Measured on the H200 (16 cores, experts on tmpfs read at ~27 GB/s, 257 tokens,
  // docs/BENCHMARKS.md "verified reads on fast storage"): 4 hashers 31.4 tok/s, 8 hashers 36.9, 6 hashers
  // with 3 pread workers per directory 36.6, 12 hashers with 1 worker 19.4; unverified 54.3. xxh64 of
  // freshly read experts ran at ~5 GB/s per thread there, so fast storage needs many hashers.
  return std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u);
}

}  // namespace ferry
