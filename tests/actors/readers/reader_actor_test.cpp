// The reader actor reads real expert files into the pinned arena with the exact bytes, on both
// engines, and reports errors that name the file.
#include <filesystem>

#include "tests/actors/readers/test_support.hpp"

using namespace ferry;
using namespace ferry::test;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kLayer = 3;
constexpr size_t kPayload = 300 * 1000;  // not a multiple of 4096: the files carry padding

std::vector<std::tuple<read_atom, read_req>> whole_file_reads(uint32_t n, uint32_t dir = 0) {
  std::vector<std::tuple<read_atom, read_req>> out;
  for (uint32_t e = 0; e < n; ++e) out.emplace_back(read_atom_v, read_req{e, dir, {{kLayer, e}, 0, kPayload, {e, 0}}});
  return out;
}

void expect_exact(const io::PinnedArena& arena, const std::vector<caf::expected<read_done>>& got,
                  const std::vector<uint64_t>& hashes) {
  ASSERT_EQ(got.size(), hashes.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i]) << "read " << i << ": " << caf::to_string(got[i].error());
    EXPECT_EQ(got[i]->req.range.key.expert, i);
    EXPECT_EQ(xxh64(arena.slot(got[i]->req.range.dst.slot), kPayload), hashes[i]) << "expert " << i;
  }
}

reader_stats stats_of(caf::scoped_actor& self, const reader_actor& r) {
  reader_stats s;
  self->request(r, 5s, stats_atom_v).receive([&](reader_stats& x) { s = x; }, [&](caf::error& e) { FAIL() << caf::to_string(e); });
  return s;
}

ReaderConfig reader_config(const std::string& dir, std::shared_ptr<io::PinnedArena> arena, io::EngineKind kind) {
  ReaderConfig rc;
  rc.path = dir;
  rc.arena = std::move(arena);
  rc.engine = kind;
  rc.engine_cfg.max_inflight = 4;
  return rc;
}

}  // namespace

TEST(ReaderActor, BuildDirectoryAcceptsODirect) {
  auto dir = fresh_dir("odirect-probe");
  std::string why;
  EXPECT_TRUE(io::probe_o_direct(dir, &why)) << why;
}

TEST(ReaderActor, IoUringReadsExactBytesOfManyFiles) {
  std::string why;
  if (!io::probe_io_uring(&why)) GTEST_SKIP() << "io_uring unavailable here: " << why;
  auto dir = fresh_dir("reader-uring");
  auto hashes = write_experts({dir}, kLayer, 16, kPayload);
  auto arena = std::make_shared<io::PinnedArena>(16, 512 * 1024);
  ActorSystem as;
  caf::scoped_actor self{*as.sys};
  auto r = spawn_reader(*as.sys, reader_config(dir, arena, io::EngineKind::uring));
  expect_exact(*arena, request_all(self, r, whole_file_reads(16)), hashes);
  auto s = stats_of(self, r);
  EXPECT_EQ(s.engine, "io_uring");
  EXPECT_TRUE(s.direct);
  EXPECT_TRUE(s.registered) << "fixed buffers were refused (RLIMIT_MEMLOCK?)";
  EXPECT_EQ(s.reads, 16u);
  caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}

TEST(ReaderActor, PreadPoolReadsExactBytesOfManyFiles) {
  auto dir = fresh_dir("reader-pread");
  auto hashes = write_experts({dir}, kLayer, 16, kPayload);
  auto arena = std::make_shared<io::PinnedArena>(16, 512 * 1024);
  ActorSystem as;
  caf::scoped_actor self{*as.sys};
  auto r = spawn_reader(*as.sys, reader_config(dir, arena, io::EngineKind::pread_pool));
  expect_exact(*arena, request_all(self, r, whole_file_reads(16)), hashes);
  EXPECT_EQ(stats_of(self, r).engine, "pread-pool");
  caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}

TEST(ReaderActor, SplitFillFromTwoHoldersLandsInOneSlot) {
  auto a = fresh_dir("split-a"), b = fresh_dir("split-b");
  auto hashes = write_experts({a, b}, kLayer, 1, kPayload);
  auto arena = std::make_shared<io::PinnedArena>(2, 512 * 1024);
  ActorSystem as;
  caf::scoped_actor self{*as.sys};
  auto ra = spawn_reader(*as.sys, reader_config(a, arena, io::EngineKind::automatic));
  auto cb = reader_config(b, arena, io::EngineKind::automatic);
  cb.dir = 1;
  auto rb = spawn_reader(*as.sys, cb);
  constexpr uint64_t half = 36 * 4096;  // the first chunk ends on a 4096 boundary, the second is the rest
  auto h1 = self->request(ra, 10s, read_atom_v, read_req{1, 0, {{kLayer, 0}, 0, half, {1, 0}}});
  auto h2 = self->request(rb, 10s, read_atom_v, read_req{2, 1, {{kLayer, 0}, half, kPayload - half, {1, half}}});
  int ok = 0;
  auto fail = [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); };
  h1.receive([&](read_done& d) { ok += d.req.dir == 0; }, fail);
  h2.receive([&](read_done& d) { ok += d.req.dir == 1; }, fail);
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(xxh64(arena->slot(1), kPayload), hashes[0]);
  caf::anon_send_exit(ra, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(rb, caf::exit_reason::user_shutdown);
}

TEST(ReaderActor, FallsBackToBufferedReadsWhenODirectIsRefused) {
  auto dir = fresh_dir("reader-no-odirect");
  auto hashes = write_experts({dir}, kLayer, 4, kPayload);
  auto arena = std::make_shared<io::PinnedArena>(4, 512 * 1024);
  ActorSystem as;
  caf::scoped_actor self{*as.sys};
  auto r = spawn_reader(*as.sys, reader_config(dir, arena, io::EngineKind::automatic));
  self->send(r, knobs_atom_v, reader_knobs{0, 0, true});
  expect_exact(*arena, request_all(self, r, whole_file_reads(4)), hashes);
  EXPECT_FALSE(stats_of(self, r).direct) << "the reader should have switched this directory to buffered reads";
  caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}

TEST(ReaderActor, MissingFileAndBadRequestErrorsNameTheFile) {
  auto dir = fresh_dir("reader-errors");
  write_experts({dir}, kLayer, 1, kPayload);
  auto arena = std::make_shared<io::PinnedArena>(2, 512 * 1024);
  ActorSystem as;
  caf::scoped_actor self{*as.sys};
  auto r = spawn_reader(*as.sys, reader_config(dir, arena, io::EngineKind::automatic));
  std::vector<std::tuple<read_atom, read_req>> reqs{
      {read_atom_v, read_req{1, 0, {{9, 99}, 0, 4096, {0, 0}}}},            // no such file
      {read_atom_v, read_req{2, 0, {{kLayer, 0}, 100, 4096, {0, 0}}}},      // unaligned offset
      {read_atom_v, read_req{3, 0, {{kLayer, 0}, 0, 1 << 20, {0, 0}}}},     // larger than a slot
      {read_atom_v, read_req{4, 0, {{kLayer, 0}, 0, 1 << 19, {0, 0}}}}};    // beyond the end of the file
  auto got = request_all(self, r, reqs);
  ASSERT_EQ(got.size(), 4u);
  ASSERT_FALSE(got[0]);
  EXPECT_EQ(got[0].error(), errc::file_missing);
  EXPECT_EQ(std::filesystem::path(io_error_file(got[0].error())).filename(), "L9-E99.bin");
  ASSERT_FALSE(got[1]);
  EXPECT_EQ(got[1].error(), errc::bad_request);
  ASSERT_FALSE(got[2]);
  EXPECT_EQ(got[2].error(), errc::bad_request);
  ASSERT_FALSE(got[3]);
  EXPECT_EQ(got[3].error(), errc::short_read);
  EXPECT_NE(io_error_file(got[3].error()).find("L3-E0.bin"), std::string::npos);
  caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}
