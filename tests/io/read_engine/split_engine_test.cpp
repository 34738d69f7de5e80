// Reads split into parts land every byte where one whole read would, and `--io-engine auto` picks
// the splitting pread pool on memory-backed storage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "io/read_engine/pinned_arena.hpp"
#include "io/read_engine/pread_pool.hpp"
#include "io/read_engine/split_engine.hpp"
#include "io/store/expert_store.hpp"
#include "tests/io/temp_dir.hpp"

using namespace ferry;
namespace fs = std::filesystem;

namespace {

std::vector<char> pattern(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  uint32_t x = seed;
  for (auto& c : v) c = char((x = x * 1664525u + 1013904223u) >> 24);
  return v;
}

fs::path write_file(const fs::path& dir, const std::string& name, const std::vector<char>& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return dir / name;
}

std::vector<io::ReadResult> wait_all(io::ReadEngine& e, size_t n) {
  std::vector<io::ReadResult> out;
  for (int i = 0; i < 1000 && out.size() < n; ++i) e.reap(out, std::chrono::milliseconds(10));
  return out;
}

}  // namespace

TEST(SplitEngine, PartsOfSeveralReadsLandEveryByteWhereTheWholeReadWould) {
  const auto dir = test::temp_dir("split");
  const size_t a_size = 10 * 4096 + 3 * 1000, b_size = 4096 * 3;  // a: 11 parts of 4 KiB, the last short
  const auto a = pattern(a_size, 1), b = pattern(b_size, 2);
  const auto pa = write_file(dir, "a.bin", a), pb = write_file(dir, "b.bin", b);
  io::EngineConfig cfg;
  cfg.pool_threads = 4;
  auto e = io::make_split_engine(std::make_unique<io::PreadPool>(cfg), 4096);
  std::vector<char> da(a_size + 4096, 0), db(b_size, 0);
  e->submit({7, pa.string(), 0, a_size, reinterpret_cast<std::byte*>(da.data()), false});
  e->submit({9, pb.string(), 4096, 2 * 4096, reinterpret_cast<std::byte*>(db.data()), false});
  EXPECT_EQ(e->inflight(), 2u);
  auto got = wait_all(*e, 2);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& r : got) {
    EXPECT_EQ(r.err, 0);
    EXPECT_EQ(r.bytes_read, r.tag == 7 ? a_size : 2 * 4096u) << "tag " << r.tag;
  }
  EXPECT_EQ(std::memcmp(da.data(), a.data(), a_size), 0);
  EXPECT_EQ(std::memcmp(db.data(), b.data() + 4096, 2 * 4096), 0);
  EXPECT_EQ(e->inflight(), 0u);
}

TEST(SplitEngine, ReadPastTheEndReportsTheBytesUpToTheFirstShortPart) {
  const auto dir = test::temp_dir("split-eof");
  const auto a = pattern(5 * 4096 + 100, 3);
  const auto pa = write_file(dir, "a.bin", a);
  auto e = io::make_split_engine(std::make_unique<io::PreadPool>(io::EngineConfig{}), 2 * 4096);
  std::vector<char> buf(8 * 4096, 0);
  e->submit({1, pa.string(), 0, 8 * 4096, reinterpret_cast<std::byte*>(buf.data()), false});
  auto got = wait_all(*e, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bytes_read, a.size()) << "a short part caps bytes_read; the parts after it read nothing";
  EXPECT_EQ(std::memcmp(buf.data(), a.data(), a.size()), 0);
  e->submit({2, (dir / "missing.bin").string(), 0, 8 * 4096, reinterpret_cast<std::byte*>(buf.data()), false});
  got = wait_all(*e, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].err, ENOENT);
  EXPECT_TRUE(got[0].open_failed);
}

// The pread worker hashes each part wholly inside its op against PartCheck; the split engine sums them
// over its parts and reports the first bad one.
TEST(SplitEngine, PoolWorkersCheckThePartsTheyCopyAndNameTheFirstBadOne) {
  const auto dir = test::temp_dir("split-check");
  const size_t n = 5 * 4096 + 1000;  // the last part is short
  std::vector<std::byte> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = std::byte(i * 131 + 7);
  const std::string path = (dir / "e.bin").string();
  { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), std::streamsize(n)); }
  auto check = std::make_shared<io::PartCheck>();
  check->part_bytes = 4096;
  check->file_bytes = n;
  check->xxh64 = xxh64_parts(data.data(), n, 4096);
  ASSERT_EQ(check->xxh64.size(), 6u);
  auto run = [&](uint64_t split, std::shared_ptr<const io::PartCheck> c, uint64_t offset, uint64_t bytes) {
    auto e = io::make_split_engine(std::make_unique<io::PreadPool>(io::EngineConfig{}), split);
    std::vector<std::byte> dst(bytes);
    io::ReadOp op;
    op.tag = 1;
    op.path = path;
    op.offset = offset;
    op.bytes = bytes;
    op.dst = dst.data();
    op.direct = false;
    op.check = std::move(c);
    e->submit(std::move(op));
    std::vector<io::ReadResult> out;
    while (out.empty()) e->reap(out, std::chrono::milliseconds(100));
    return out[0];
  };
  for (uint64_t split : {uint64_t(4096), uint64_t(8192), uint64_t(1) << 20}) {
    SCOPED_TRACE(split);
    const auto whole = run(split, check, 0, n);
    EXPECT_EQ(whole.parts_ok, 6u);
    EXPECT_EQ(whole.bad_part, -1);
  }
  const auto tail = run(4096, check, 2 * 4096, n - 2 * 4096);  // a range: only its own parts
  EXPECT_EQ(tail.parts_ok, 4u);
  auto wrong = std::make_shared<io::PartCheck>(*check);
  wrong->xxh64[3] ^= 1;
  const auto bad = run(8192, wrong, 0, n);
  EXPECT_EQ(bad.bad_part, 3);
  EXPECT_EQ(bad.parts_ok, 5u);
}

// The pool's worker reads check_chunk bytes at a time and hashes each as it lands (the bytes still in
// its cache). Whatever the chunk, it must check exactly the parts that one pread and check_parts after
// it check, and name the same bad part: ops that start mid-part, end mid-part or run past the file's
// end, chunks that do not divide a part, a bad part and a wrong last part.
TEST(PreadCheck, ChunkedHashingChecksTheSamePartsAsHashingAfterTheWholeRead) {
  const auto dir = test::temp_dir("pread-chunk");
  const uint64_t part = 8192, n = 6 * part + 1000;  // 7 parts, the last short
  std::vector<std::byte> data(n);
  for (uint64_t i = 0; i < n; ++i) data[i] = std::byte(i * 131 + (i >> 9));
  const std::string path = (dir / "e.bin").string();
  { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), std::streamsize(n)); }
  auto good = std::make_shared<io::PartCheck>();
  good->part_bytes = part;
  good->file_bytes = n;
  good->xxh64 = xxh64_parts(data.data(), n, part);
  ASSERT_EQ(good->xxh64.size(), 7u);
  auto bad3 = std::make_shared<io::PartCheck>(*good), bad_last = std::make_shared<io::PartCheck>(*good);
  bad3->xxh64[3] ^= 1;
  bad_last->xxh64[6] ^= 1;
  int compared = 0;
  for (const auto& check : {good, bad3, bad_last})
    for (auto [offset, bytes] : {std::pair<uint64_t, uint64_t>{0, n}, {0, 8 * part}, {4096, 3 * part},
                                 {part, 2 * part + 4096}, {2 * part, n - 2 * part}, {5 * part, 4 * part}})
      for (uint64_t chunk : {uint64_t(4096), uint64_t(12288), part, uint64_t(3) * part}) {
        SCOPED_TRACE(testing::Message() << "offset " << offset << " bytes " << bytes << " chunk " << chunk);
        std::vector<std::byte> d0(bytes), d1(bytes);
        io::ReadOp op{1, path, offset, bytes, d0.data(), false, check};
        const auto whole = io::pread_fully(op, 0);
        op.dst = d1.data();
        const auto chunked = io::pread_fully(op, chunk);
        EXPECT_EQ(chunked.err, 0);
        EXPECT_EQ(chunked.bytes_read, whole.bytes_read);
        EXPECT_EQ(chunked.parts_ok, whole.parts_ok);
        EXPECT_EQ(chunked.bad_part, whole.bad_part);
        EXPECT_EQ(std::memcmp(d0.data(), d1.data(), whole.bytes_read), 0);
        ++compared;
      }
  EXPECT_EQ(compared, 3 * 6 * 4);
  // And the counts themselves, for the whole file: every part, or up to the bad one.
  std::vector<std::byte> d(n);
  EXPECT_EQ(io::pread_fully({1, path, 0, n, d.data(), false, good}, 4096).parts_ok, 7u);
  const auto r3 = io::pread_fully({1, path, 0, n, d.data(), false, bad3}, 4096);
  EXPECT_EQ(r3.bad_part, 3);
  EXPECT_EQ(r3.parts_ok, 3u);
  const auto r6 = io::pread_fully({1, path, 0, n, d.data(), false, bad_last}, 12288);
  EXPECT_EQ(r6.bad_part, 6);
  EXPECT_EQ(r6.parts_ok, 6u);
  const auto mid = io::pread_fully({1, path, 4096, 3 * part, d.data(), false, good}, 4096);
  EXPECT_EQ(mid.parts_ok, 2u) << "parts 1 and 2 lie wholly inside [4096, 28672); parts 0 and 3 do not";
}

TEST(EngineChoice, AutoPicksTheSplittingPoolOnTmpfsAndIoUringWithODirectElsewhere) {
  if (io::storage_kind("/dev/shm") != io::StorageKind::memory) GTEST_SKIP() << "/dev/shm is not tmpfs here";
  const auto mem = io::choose_engine("/dev/shm", io::EngineKind::automatic, {}, 4);
  EXPECT_EQ(mem.kind, io::EngineKind::pread_pool);
  EXPECT_FALSE(mem.direct) << "tmpfs refuses O_DIRECT";
  EXPECT_GT(mem.cfg.split_bytes, 0u);
  EXPECT_GE(mem.cfg.pool_threads, 2u);
  EXPECT_GE(mem.cfg.max_inflight, mem.cfg.pool_threads);
  const auto dir = test::temp_dir("block");
  if (io::storage_kind(dir.string()) == io::StorageKind::block && io::probe_o_direct(dir.string())) {
    const auto blk = io::choose_engine(dir.string(), io::EngineKind::automatic, {}, 4);
    EXPECT_NE(blk.kind, io::EngineKind::pread_pool);
    EXPECT_TRUE(blk.direct);
    EXPECT_EQ(blk.cfg.split_bytes, 0u);
  }
  const auto forced = io::choose_engine("/dev/shm", io::EngineKind::uring, {}, 4);
  EXPECT_EQ(forced.kind, io::EngineKind::uring) << "an explicit engine is kept";
}
