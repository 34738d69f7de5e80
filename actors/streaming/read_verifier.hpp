// ReadVerifier: checks landed expert bytes against manifest.json's xxh64, off the layer scheduler's
// and the model thread's critical path. A few detached hasher actors (own threads) take the hashing:
// a layer scheduler whose read has landed asks the next hasher (round-robin) for the xxh64 of the slot
// and goes on serving other fills and calls; the experts of one layer call hash in parallel, and the
// model computes each expert as soon as its own hash matched. The counters (hashes, bytes, time,
// mismatches) are shared atomics so StreamingMetrics can report the cost of verified reads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/actor.hpp>

namespace ferry {

struct VerifyCounters {
  std::atomic<uint64_t> hashes{0}, bytes{0}, ns{0}, mismatches{0};
  std::atomic<uint64_t> in_reader{0};  // reads whose every part the reader checked (no hasher needed)
};

class ReadVerifier {
 public:
  // `threads` hasher actors (at least 1).
  ReadVerifier(caf::actor_system& sys, unsigned threads);
  ~ReadVerifier();
  ReadVerifier(const ReadVerifier&) = delete;
  ReadVerifier& operator=(const ReadVerifier&) = delete;

  // A hasher to ask: request(hasher, timeout, caf::get_atom_v, uint64_t(address), uint64_t(bytes)) -> uint64_t.
  caf::actor next();
  // The hashers quit (pending requests fail) and stop() returns once every hasher thread has ended, so
  // no hash still reads the slots it was given: the owner frees the arena after this. The destructor
  // calls it too.
  void stop();
  uint32_t threads() const { return uint32_t(hashers_.size()); }
  VerifyCounters& counters() { return *counters_; }
  const std::shared_ptr<VerifyCounters>& shared_counters() const { return counters_; }
  // Hasher threads for a machine: half the cores, 1..8 (measured faster than a quarter on fast storage;
  // they compete with the pread workers and compute for cores).
  static unsigned default_threads();

 private:
  caf::actor_system* sys_;
  std::vector<caf::actor> hashers_;
  std::atomic<size_t> next_{0};
  bool stopped_ = false;
  std::shared_ptr<VerifyCounters> counters_;
};

}  // namespace ferry
