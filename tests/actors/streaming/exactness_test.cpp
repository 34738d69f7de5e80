// Streaming output is bit-identical (per-position logit hashes) to the all-in-RAM engine: at every cache
// size, with 1, 2 and 3 directories and with replicas, with io_uring and with the pread pool, with
// prefetch and with split decode reads. And a prepared model equals the Hugging Face checkpoint.
#include "io/read_engine/split_engine.hpp"
#include "io/read_engine/uring_reader.hpp"
#include "io/store/expert_store.hpp"
#include "tests/actors/streaming/streaming_support.hpp"

using namespace ferry;
using namespace ferry::test;

TEST(PreparedModel, AllInRamEngineMatchesTheCheckpointEngineBitForBit) {
  ModelOptions hf;
  hf.dir = kHf.string();
  hf.threads = 2;
  expect_same_output(generate_run(hf), reference());
}

TEST(StreamingExactness, BitIdenticalAtCacheSizesNoneOneAFewAndAll) {
  const auto dir = prepared("one", 1, false);
  for (uint64_t cache : {0u, 1u, 6u, 160u}) {
    SCOPED_TRACE("cache " + std::to_string(cache) + " experts");
    auto o = streaming_options(dir, cache);
    if (cache == 160) o.streaming.min_rows = 1;  // admit everything, also in the 24-row prompt pass
    auto r = generate_run(o);
    expect_same_output(r, reference());
    EXPECT_EQ(r.metrics.requested, r.metrics.host_hits + r.metrics.disk_reads + r.metrics.prefetch_hits);
    if (cache == 0) {
      EXPECT_EQ(r.metrics.host_hits, 0u);
    } else {
      EXPECT_GT(r.metrics.pool.admissions, 0u);
      EXPECT_LE(r.metrics.pool.resident, cache);
    }
    if (cache == 160) {
      EXPECT_LE(r.metrics.disk_reads, 160u) << "with room for all, each expert is read once";
      EXPECT_GT(r.metrics.host_hits, 0u);
    }
  }
}

TEST(StreamingExactness, BitIdenticalWithOneTwoAndThreeDirectoriesAndReplicas) {
  struct Layout { const char* name; int primaries; bool replica; size_t dirs; };
  for (auto l : {Layout{"one", 1, false, 1}, Layout{"two", 2, false, 2}, Layout{"three", 3, false, 3},
                 Layout{"replicated", 2, true, 3}}) {
    SCOPED_TRACE(l.name);
    auto r = generate_run(streaming_options(prepared(l.name, l.primaries, l.replica), 4));
    expect_same_output(r, reference());
    ASSERT_EQ(r.metrics.drives.size(), l.dirs);
    for (auto& d : r.metrics.drives) EXPECT_GT(d.reads, 0u) << "directory " << d.dir << " served no read";
  }
}

TEST(StreamingExactness, BitIdenticalWithIoUringAndWithThePreadPool) {
  const auto dir = prepared("replicated", 2, true);
  auto o = streaming_options(dir, 2);
  o.streaming.engine = io::EngineKind::pread_pool;
  auto pread = generate_run(o);
  expect_same_output(pread, reference());
  EXPECT_EQ(pread.metrics.engine, "pread-pool");
  std::string why;
  if (!io::probe_io_uring(&why)) GTEST_SKIP() << "io_uring unavailable here: " << why;
  o.streaming.engine = io::EngineKind::uring;
  auto uring = generate_run(o);
  expect_same_output(uring, reference());
  EXPECT_EQ(uring.metrics.engine, "io_uring");
}

// `--io-engine auto` on memory-backed storage: the expert files copied to tmpfs (/dev/shm) are read by
// the splitting pread pool (several workers per expert), with the same output.
TEST(StreamingExactness, AutoEngineOnTmpfsSplitsReadsAcrossPoolWorkersWithTheSameOutput) {
  if (io::storage_kind("/dev/shm") != io::StorageKind::memory) GTEST_SKIP() << "/dev/shm is not tmpfs here";
  const auto dir = prepared("one", 1, false);
  const Manifest man = read_manifest(dir / "manifest.json");
  const fs::path shm = fs::path("/dev/shm") / ("ferry-test-" + std::to_string(::getpid()));
  fs::remove_all(shm);
  fs::copy(man.dirs.at(0), shm);
  auto o = streaming_options(dir, 4);
  o.streaming.expert_dirs = {shm.string()};
  o.streaming.engine_cfg.split_bytes = 64 * 1024;  // fixture experts are small: split them too
  auto r = generate_run(o);
  fs::remove_all(shm);
  expect_same_output(r, reference());
  EXPECT_EQ(r.metrics.engine, "pread-pool");
  EXPECT_FALSE(r.metrics.direct);
}

TEST(StreamingExactness, PrefetchAndWholeFileReadsChangeNothingButTheCounters) {
  const auto dir = prepared("replicated", 2, true);
  auto o = streaming_options(dir, 40);
  o.streaming.prefetch = 4;
  o.streaming.split_reads = false;
  // Block-aware LRFU admits every prefetch it has room for; the frequency policy refuses guesses colder
  // than what it holds (and the hot guesses are already resident), so its run below issues few or none.
  o.streaming.policy = CachePolicy::block_aware;
  auto r = generate_run(o);
  o.streaming.policy = CachePolicy::frequency;
  expect_same_output(generate_run(o), reference());
  expect_same_output(r, reference());
  EXPECT_GT(r.metrics.prefetch_issued, 0u);
  EXPECT_LE(r.metrics.prefetch_hits, r.metrics.prefetch_issued + r.metrics.requested);
}

// Router prefetch (the next MoE layer's router on this layer's input): guesses read into guess slots
// of the host pool change only where bytes wait. Same output with no cache, a small host cache and a
// device tier; guesses are issued, some are used, every slot goes back to the pool.
TEST(StreamingExactness, RouterPrefetchChangesNothingButWhereBytesWait) {
  const auto dir = prepared("replicated", 2, true);
  for (uint64_t cache : {0u, 4u}) {
    for (bool device : {false, true}) {
      SCOPED_TRACE("cache " + std::to_string(cache) + (device ? ", device tier" : ""));
      auto o = streaming_options(dir, cache);
      o.streaming.prefetch_router = true;
      o.streaming.device_tier = device;
      if (device) o.streaming.host_pool_bytes = 0;
      auto r = generate_run(o);
      expect_same_output(r, reference());
      const auto& m = r.metrics;
      std::printf("router prefetch, cache %llu%s: %llu requested, %llu host hits, %llu disk reads, prefetch %llu issued, %llu hits, "
                  "%llu wasted\n",
                  (unsigned long long)cache, device ? " (device)" : "", (unsigned long long)m.requested,
                  (unsigned long long)m.host_hits, (unsigned long long)m.disk_reads, (unsigned long long)m.prefetch_issued,
                  (unsigned long long)m.prefetch_hits, (unsigned long long)m.prefetch_wasted);
      EXPECT_GT(m.prefetch_issued, 0u);
      EXPECT_GT(m.prefetch_hits, 0u);
      EXPECT_LE(m.prefetch_hits + m.prefetch_wasted, m.prefetch_issued);
      EXPECT_GE(m.pool.scratch_free + 4u, m.pool.scratch)
          << "after the run only parked guesses (at most top_k = 4) hold scratch slots";
    }
  }
}

TEST(StreamingExactness, LruPolicyAndBlockAwarePolicyGiveTheSameOutput) {
  const auto dir = prepared("one", 1, false);
  auto o = streaming_options(dir, 8);
  o.streaming.policy = CachePolicy::lru;
  auto lru = generate_run(o);
  o.streaming.policy = CachePolicy::block_aware;
  o.streaming.min_rows = 3;
  auto block = generate_run(o);
  expect_same_output(lru, reference());
  expect_same_output(block, reference());
  EXPECT_GT(block.metrics.pool.refusals, 0u) << "the 24-row prompt pass should refuse experts used by < 3 rows";
}

// The device tier (device-cache manager + upload queues) on the CPU back-end, whose "device" slots are
// host memory: the same plan, slot reuse and release logic as on CUDA, checked in CI. Bit-identical at
// device cache sizes none, one, a few and all, with 1 and 8 upload queues and scratch reuse forced.
TEST(StreamingExactness, DeviceTierBitIdenticalAtEveryDeviceCacheSizeAndUploadQueueCount) {
  const auto dir = prepared("one", 1, false);
  struct Case { uint64_t device; uint32_t queues; uint32_t scratch; };
  for (auto c : {Case{0, 1, 1}, Case{0, 8, 0}, Case{1, 2, 3}, Case{6, 8, 0}, Case{160, 8, 0}}) {
    SCOPED_TRACE("device cache " + std::to_string(c.device) + ", queues " + std::to_string(c.queues) + ", scratch " +
                 std::to_string(c.scratch));
    auto o = streaming_options(dir, c.device);
    o.streaming.device_tier = true;
    o.streaming.upload_streams = c.queues;
    o.streaming.device_scratch = c.scratch;
    o.streaming.host_pool_bytes = 0;
    if (c.device == 160) o.streaming.min_rows = 1;  // admit everything, also in the 24-row prompt pass
    auto r = generate_run(o);
    expect_same_output(r, reference());
    const auto& d = r.metrics.device;
    EXPECT_EQ(r.metrics.upload_streams, c.queues);
    EXPECT_EQ(d.hits + d.misses, r.metrics.requested) << "the manager classifies every expert of every call";
    EXPECT_EQ(d.hits, r.metrics.device_hits);
    EXPECT_EQ(r.metrics.uploads, d.misses) << "every miss is uploaded once, a hit never";
    EXPECT_LE(d.resident, c.device);
    if (c.device == 0) {
      EXPECT_EQ(d.hits, 0u);
    }
    if (c.device == 160) {
      EXPECT_GT(d.hits, 0u);
      EXPECT_LE(d.misses, 160u) << "with room for all, each expert is uploaded once";
    }
    EXPECT_EQ(r.metrics.pool.scratch_free, r.metrics.pool.scratch) << "every host slot went back to the pool";
  }
}
