// A slab arena of fixed-size slots for expert bytes in host memory. Slots are 4096-aligned (O_DIRECT
// and io_uring fixed buffers need it) and the memory is locked so reads and uploads never touch a
// swapped-out page. The memory comes from an allocator hook: the default is aligned_alloc + mlock;
// the CUDA back-end supplies cudaHostAlloc (already pinned) through the same hook.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ferry::io {

constexpr size_t kDirectAlign = 4096;

constexpr uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Supplies and frees the arena's memory. `locked` says whether the memory is already page-locked
// (cudaHostAlloc); otherwise the arena mlocks it itself.
struct ArenaAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void*, size_t bytes)> release;
  bool locked = false;
  std::string name = "aligned_alloc";
};
ArenaAllocator default_arena_allocator();

class PinnedArena {
 public:
  // slot_bytes is rounded up to 4096. Throws ferry::LimitError when the memory cannot be had.
  PinnedArena(size_t slots, size_t slot_bytes, ArenaAllocator alloc = default_arena_allocator());
  ~PinnedArena();
  PinnedArena(const PinnedArena&) = delete;
  PinnedArena& operator=(const PinnedArena&) = delete;

  size_t slots() const { return slots_; }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t bytes() const { return slots_ * slot_bytes_; }
  std::byte* base() const { return base_; }
  std::byte* slot(size_t i) const;  // throws LimitError for i >= slots()
  // True when the pages are locked (by mlock or by the allocator); false when mlock was refused
  // (RLIMIT_MEMLOCK) and the arena runs unlocked, which the constructor logs as a warning.
  bool locked() const { return locked_; }
  const std::string& allocator_name() const { return alloc_.name; }

  // A simple free list for callers that do not manage slots themselves (tests, the bench).
  std::optional<uint32_t> acquire();
  void release(uint32_t slot);
  size_t free_slots() const;

 private:
  size_t slots_;
  size_t slot_bytes_;
  ArenaAllocator alloc_;
  std::byte* base_ = nullptr;
  bool locked_ = false;
  bool mlocked_ = false;
  mutable std::mutex mu_;
  std::vector<uint32_t> free_;
};

}  // namespace ferry::io
