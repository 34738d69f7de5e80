#include "io/read_engine/pinned_arena.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "io/errors.hpp"
#include "io/read_engine/uring_reader_log.hpp"

namespace ferry::io {

ArenaAllocator default_arena_allocator() {
  ArenaAllocator a;
  a.allocate = [](size_t bytes) { return std::aligned_alloc(kDirectAlign, round_up(bytes, kDirectAlign)); };
  a.release = [](void* p, size_t) { std::free(p); };
  a.locked = false;
  a.name = "aligned_alloc";
  return a;
}

PinnedArena::PinnedArena(size_t slots, size_t slot_bytes, ArenaAllocator alloc)
    : slots_(slots), slot_bytes_(round_up(slot_bytes, kDirectAlign)), alloc_(std::move(alloc)) {
  if (slots_ == 0 || slot_bytes_ == 0) throw LimitError("pinned arena: slots and slot_bytes must be > 0");
  base_ = static_cast<std::byte*>(alloc_.allocate(bytes()));
  if (base_ == nullptr)
    throw LimitError(fmt::format("pinned arena: {} could not allocate {} slots x {} bytes", alloc_.name, slots_,
                                 slot_bytes_));
  if (reinterpret_cast<uintptr_t>(base_) % kDirectAlign != 0)
    throw LimitError(fmt::format("pinned arena: {} returned memory not aligned to {}", alloc_.name, kDirectAlign));
  if (alloc_.locked) {
    locked_ = true;
  } else if (::mlock(base_, bytes()) == 0) {
    locked_ = mlocked_ = true;
  } else {
    // Not fatal: reads still work, only a page may be swapped out under memory pressure.
    log_warn("pinned arena: mlock of {} bytes failed ({}); running UNLOCKED (raise RLIMIT_MEMLOCK / ulimit -l)",
             bytes(), std::strerror(errno));
  }
  log_info("pinned arena: {} slots x {} bytes via {}, {}", slots_, slot_bytes_, alloc_.name,
           locked_ ? "locked" : "unlocked");
  free_.reserve(slots_);
  for (size_t i = slots_; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
}

PinnedArena::~PinnedArena() {
  if (mlocked_) ::munlock(base_, bytes());
  alloc_.release(base_, bytes());
}

std::byte* PinnedArena::slot(size_t i) const {
  if (i >= slots_) throw LimitError(fmt::format("pinned arena: slot {} out of range (slots = {})", i, slots_));
  return base_ + i * slot_bytes_;
}

std::optional<uint32_t> PinnedArena::acquire() {
  std::lock_guard lk(mu_);
  if (free_.empty()) return std::nullopt;
  auto s = free_.back();
  free_.pop_back();
  return s;
}

void PinnedArena::release(uint32_t slot) {
  std::lock_guard lk(mu_);
  free_.push_back(slot);
}

size_t PinnedArena::free_slots() const {
  std::lock_guard lk(mu_);
  return free_.size();
}

}  // namespace ferry::io
