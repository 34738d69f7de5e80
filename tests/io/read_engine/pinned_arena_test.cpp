#include <gtest/gtest.h>

#include "io/errors.hpp"
#include "io/read_engine/pinned_arena.hpp"

using namespace ferry;

TEST(PinnedArena, SlotsAre4096AlignedAndRoundedUp) {
  io::PinnedArena a(3, 5000);
  EXPECT_EQ(a.slot_bytes(), 8192u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(reinterpret_cast<uintptr_t>(a.slot(i)) % 4096, 0u);
  EXPECT_THROW(a.slot(3), LimitError);
  auto s = a.acquire();
  ASSERT_TRUE(s);
  EXPECT_EQ(a.free_slots(), 2u);
  a.release(*s);
  EXPECT_EQ(a.free_slots(), 3u);
}

TEST(PinnedArena, AllocatorHookSuppliesTheMemory) {
  static int allocs = 0, frees = 0;
  io::ArenaAllocator hook;
  hook.allocate = [](size_t n) { ++allocs; return std::aligned_alloc(4096, n); };
  hook.release = [](void* p, size_t) { ++frees; std::free(p); };
  hook.locked = true;  // as cudaHostAlloc memory is: the arena must not mlock it again
  hook.name = "test-hook";
  {
    io::PinnedArena a(2, 4096, hook);
    EXPECT_TRUE(a.locked());
    EXPECT_EQ(a.allocator_name(), "test-hook");
  }
  EXPECT_EQ(allocs, 1);
  EXPECT_EQ(frees, 1);
}

TEST(PinnedArena, MisalignedAllocatorIsRejected) {
  io::ArenaAllocator bad;
  static std::vector<std::byte> buf(3 * 4096);
  bad.allocate = [](size_t) { return static_cast<void*>(buf.data() + (4096 - reinterpret_cast<uintptr_t>(buf.data()) % 4096) + 8); };
  bad.release = [](void*, size_t) {};
  bad.locked = true;
  EXPECT_THROW(io::PinnedArena(1, 4096, bad), LimitError);
}
