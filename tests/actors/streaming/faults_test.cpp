#include <fmt/format.h>
// Supervision under generation: a reader killed mid-generation is restarted and its reads re-issued;
// EIO on one copy is served from another; a checksum mismatch (reads are verified by default) is a bad
// copy; with no good copy left, generation ends with an error naming the file.
#include <caf/all.hpp>

#include "actors/readers/reader_actor.hpp"
#include "io/errors.hpp"
#include "io/read_engine/uring_reader.hpp"
#include "io/store/expert_store.hpp"
#include "tests/actors/streaming/streaming_support.hpp"

using namespace ferry;
using namespace ferry::test;
using namespace std::chrono_literals;

namespace {

reader_actor reader_of(StreamingExperts& s, uint32_t dir) {
  caf::scoped_actor self{s.system()};
  reader_actor r;
  self->request(s.read_service(), 5s, reader_atom_v, dir)
      .receive([&](reader_actor& x) { r = x; }, [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  return r;
}

// The message of the Error that a run which must fail throws; a test failure ("" returned) if it ran
// to the end instead.
std::string error_of(const ModelOptions& o, const std::function<void(LoadedModel&)>& before = {},
                     const char* if_not = "generation should have failed") {
  try {
    generate_run(o, before);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << if_not;
  return "";
}

// Kills the reader of directory 0 right after the `at`-th layer call has sent its reads out.
ModelOptions kill_reader_at(ModelOptions o, uint64_t at, std::shared_ptr<StreamingExperts*> holder,
                            std::shared_ptr<int> kills) {
  o.streaming.after_schedule = [=](uint32_t, uint64_t call) {
    if (call != at || !*holder) return;
    caf::anon_send_exit(reader_of(**holder, 0), caf::exit_reason::kill);
    ++*kills;
  };
  return o;
}

}  // namespace

TEST(StreamingFaults, ReaderKilledMidGenerationLeavesOutputUnchanged) {
  for (const char* layout : {"replicated", "one"}) {  // re-issued to the replica / to the restarted reader
    SCOPED_TRACE(layout);
    auto holder = std::make_shared<StreamingExperts*>(nullptr);
    auto kills = std::make_shared<int>(0);
    auto dir = std::string(layout) == "one" ? prepared("one", 1, false) : prepared("replicated", 2, true);
    auto o = kill_reader_at(streaming_options(dir, 0), 40, holder, kills);  // call 40: in the decode steps
    auto r = generate_run(o, [&](LoadedModel& m) { *holder = m.streaming; });
    EXPECT_EQ(*kills, 1);
    expect_same_output(r, reference());
    EXPECT_EQ(r.metrics.drives[0].restarts, 1u);
  }
}

// The same with the device tier (device-cache manager, upload queues; CPU memory as the "device"): the
// re-issued reads land, are uploaded and computed as usual, and every host slot goes back to the pool.
TEST(StreamingFaults, ReaderKilledMidGenerationWithTheDeviceTierLeavesOutputUnchanged) {
  auto holder = std::make_shared<StreamingExperts*>(nullptr);
  auto kills = std::make_shared<int>(0);
  auto o = kill_reader_at(streaming_options(prepared("one", 1, false), 6), 40, holder, kills);
  o.streaming.device_tier = true;
  o.streaming.upload_streams = 4;
  auto r = generate_run(o, [&](LoadedModel& m) { *holder = m.streaming; });
  EXPECT_EQ(*kills, 1);
  expect_same_output(r, reference());
  EXPECT_EQ(r.metrics.drives[0].restarts, 1u);
  EXPECT_EQ(r.metrics.pool.scratch_free, r.metrics.pool.scratch);
  EXPECT_EQ(r.metrics.uploads, r.metrics.device.misses);
}

TEST(StreamingFaults, EioOnOneCopyIsServedFromAnotherAndOutputIsUnchanged) {
  auto r = generate_run(streaming_options(prepared("replicated", 2, true), 0), [](LoadedModel& m) {
    caf::anon_send(reader_of(*m.streaming, 0), knobs_atom_v, reader_knobs{0, 1000000, false});
  });
  expect_same_output(r, reference());
  EXPECT_GT(r.metrics.drives[0].failures, 0u);
  EXPECT_EQ(r.metrics.drives[0].reads, 0u) << "every read of directory 0 failed; the replica served them";
}

TEST(StreamingFaults, EioWithNoOtherCopyEndsGenerationWithAnErrorNamingTheFile) {
  const std::string msg = error_of(streaming_options(prepared("one", 1, false), 0), [](LoadedModel& m) {
    caf::anon_send(reader_of(*m.streaming, 0), knobs_atom_v, reader_knobs{0, 1000000, false});
  });
  EXPECT_NE(msg.find("nvme0/L"), std::string::npos) << msg;
  EXPECT_NE(msg.find(".bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
}

TEST(StreamingFaults, EioWithNoOtherCopyAndTheDeviceTierEndsWithAnErrorNamingTheFile) {
  auto o = streaming_options(prepared("one", 1, false), 4);
  o.streaming.device_tier = true;
  const std::string msg = error_of(o, [](LoadedModel& m) {
    caf::anon_send(reader_of(*m.streaming, 0), knobs_atom_v, reader_knobs{0, 1000000, false});
  });
  EXPECT_NE(msg.find("nvme0/L"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
}

namespace {
enum class Damage { flip_byte, zero_file };

// Copies a prepared layout file by file. Other test processes run on the same layout at the same time and
// a CLI run among them saves the model's usage.json (written to usage.json.<pid>.tmp, then renamed), so a
// temporary may be listed here and gone a moment later: temporaries are skipped, and so is a file that
// vanished between the listing and its copy (fs::copy_options::recursive threw ENOENT on one: CI, 2026-12-07).
void copy_layout(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::recursive_directory_iterator(from)) {
    const fs::path dst = to / fs::relative(e.path(), from);
    if (e.is_directory()) {
      fs::create_directories(dst);
      continue;
    }
    if (e.path().extension() == ".tmp") continue;
    std::error_code ec;
    fs::copy_file(e.path(), dst, fs::copy_options::overwrite_existing, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) throw fs::filesystem_error("copy_layout", e.path(), dst, ec);
  }
}

// Copies a prepared layout so a test can corrupt files without touching the shared ones: one byte of
// every expert file in `victim_dir` flipped, or every one zeroed (what a failing drive returns).
// `tag` keeps the copies of tests that ctest runs in parallel apart.
// part_bytes > 0: the copy's manifest gets part hashes of that span, computed from the files before the
// damage (the test stores' experts are 16 KiB: smaller parts give them several).
fs::path corrupted_copy(const std::string& name, int primaries, bool replica, const std::string& victim_dir,
                        Damage damage = Damage::flip_byte, const std::string& tag = "", uint64_t part_bytes = 0) {
  const fs::path src_root = prepared(name, primaries, replica).parent_path();
  const fs::path root = kRoot / (name + (damage == Damage::flip_byte ? "-corrupt" : "-zeroed") + tag);
  fs::remove_all(root);
  copy_layout(src_root, root);
  // manifest.json names absolute directories: point them at the copy.
  std::string m;
  {
    std::ifstream f(root / "model/manifest.json");
    m.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (size_t at; (at = m.find(src_root.string() + "/")) != std::string::npos;)
    m.replace(at, src_root.string().size(), root.string());
  std::ofstream(root / "model/manifest.json") << m;
  if (part_bytes > 0) {
    Manifest man = read_manifest(root / "model/manifest.json");
    man.part_bytes = int64_t(part_bytes);
    for (auto& e : man.experts) {
      std::ifstream f(fs::path(man.dirs.at(e.dirs.at(0))) / expert_file_name(e.layer, e.expert), std::ios::binary);
      const std::string bytes(std::istreambuf_iterator<char>(f), {});
      e.part_xxh64 = xxh64_parts(bytes.data(), bytes.size(), part_bytes);
    }
    write_manifest(root / "model/manifest.json", man);
  }
  for (auto& f : fs::directory_iterator(root / victim_dir)) {
    if (damage == Damage::zero_file) {
      const std::string zeros(fs::file_size(f.path()), '\0');
      std::ofstream(f.path(), std::ios::binary | std::ios::trunc) << zeros;
      continue;
    }
    std::fstream x(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    x.seekg(100);
    char c = 0;
    x.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    x.seekp(100);
    x.write(&c, 1);
  }
  return root / "model";
}

// A run through a store whose only copy of nvme0's experts is damaged must fail, its error naming the
// file, the bad part (`part`, as the message spells it) and the hash.
void expect_error_names_the_bad_part(const ModelOptions& bad, const std::string& part) {
  const std::string msg = error_of(bad, {}, "a damaged expert reached the output");
  EXPECT_NE(msg.find("/nvme0/L"), std::string::npos) << msg;
  EXPECT_NE(msg.find(part), std::string::npos) << msg;
  EXPECT_NE(msg.find("xxh64"), std::string::npos) << msg;
}
}  // namespace

TEST(StreamingFaults, VerifyReadsTreatsAChecksumMismatchAsABadCopy) {
  auto o = streaming_options(corrupted_copy("replicated", 2, true, "nvme0"), 0);
  o.streaming.verify_reads = true;
  for (bool split : {false, true}) {  // a split read's mismatch is resolved by re-reading whole copies
    SCOPED_TRACE(split ? "split reads" : "whole-file reads");
    o.streaming.split_reads = split;
    expect_same_output(generate_run(o), reference());
  }
}

// With a pread pool (tmpfs, cached storage) the worker that copied a part hashes it against the
// manifest's part hashes while it is in cache: no hasher pass, the same bad-copy handling, the same output.
TEST(StreamingFaults, PreadWorkersCheckEveryPartAndABadCopyIsReadFromAnother) {
  auto o = streaming_options(corrupted_copy("replicated", 2, true, "nvme0", Damage::flip_byte, "-parts"), 0);
  o.streaming.verify_reads = true;
  o.streaming.engine = io::EngineKind::pread_pool;
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split reads" : "whole-file reads");
    o.streaming.split_reads = split;
    const RunResult r = generate_run(o);
    expect_same_output(r, reference());
    EXPECT_GT(r.metrics.verify_in_reader, 0u) << "the pread workers checked the parts";
    EXPECT_GT(r.metrics.verify_mismatches, 0u) << "the flipped byte was found";
  }
  auto bad = streaming_options(corrupted_copy("one", 1, false, "nvme0", Damage::flip_byte, "-parts"), 0);
  bad.streaming.engine = io::EngineKind::pread_pool;
  expect_error_names_the_bad_part(bad, "part 0");
}

// io_uring's reads land without a CPU touching them, so the hashers check them: with part hashes in
// the manifest each part goes to its own hasher at once (the layer waits for one part's hash, not the
// whole file's), with the same bad-copy handling and the same output, and the error names the part.
TEST(StreamingFaults, HashersCheckTheManifestsPartsOfAnIoUringReadInParallel) {
  std::string why;
  if (!io::probe_io_uring(&why)) GTEST_SKIP() << "io_uring unavailable here: " << why;
  constexpr uint64_t kPart = 4096;  // 4 parts of each 16 KiB test expert
  auto o = streaming_options(corrupted_copy("replicated", 2, true, "nvme0", Damage::flip_byte, "-uring-parts", kPart), 0);
  o.streaming.verify_reads = true;
  o.streaming.engine = io::EngineKind::uring;
  o.streaming.hash_threads = 4;
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split reads" : "whole-file reads");
    o.streaming.split_reads = split;
    const RunResult r = generate_run(o);
    expect_same_output(r, reference());
    EXPECT_EQ(r.metrics.verify_in_reader, 0u) << "io_uring checks nothing itself";
    EXPECT_GT(r.metrics.verify_mismatches, 0u) << "the flipped byte was found";
    EXPECT_GE(r.metrics.verify_hashes, 4 * r.metrics.disk_reads) << "every read hashed as its 4 parts";
  }
  auto bad = streaming_options(corrupted_copy("one", 1, false, "nvme0", Damage::flip_byte, "-uring-parts", kPart), 0);
  bad.streaming.engine = io::EngineKind::uring;
  bad.streaming.hash_threads = 4;
  expect_error_names_the_bad_part(bad, "part 0 (bytes 0..4096)");
}

TEST(StreamingFaults, VerifyReadsWithNoGoodCopyEndsWithAnErrorNamingTheFile) {
  auto o = streaming_options(corrupted_copy("one", 1, false, "nvme0"), 0);
  o.streaming.verify_reads = true;
  const std::string msg = error_of(o);
  EXPECT_NE(msg.find("one-corrupt/nvme0/L"), std::string::npos) << msg;
  EXPECT_NE(msg.find("xxh64"), std::string::npos) << msg;
}

// Reads are verified by default (issue 16): a flipped byte or a zeroed expert never reaches the output.
TEST(StreamingFaults, DamagedExpertWithoutAReplicaFailsNamingTheFileByDefault) {
  for (Damage d : {Damage::flip_byte, Damage::zero_file}) {
    SCOPED_TRACE(d == Damage::flip_byte ? "flipped byte" : "zeroed file");
    auto o = streaming_options(corrupted_copy("one", 1, false, "nvme0", d, "-default"), 0);
    ASSERT_TRUE(o.streaming.verify_reads) << "verified reads must be the default";
    const std::string msg = error_of(o, {}, "a damaged expert reached the output");
    EXPECT_NE(msg.find("/nvme0/L"), std::string::npos) << msg;
    EXPECT_NE(msg.find(".bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("xxh64"), std::string::npos) << msg;
  }
}

TEST(StreamingFaults, DamagedExpertWithAReplicaGivesIdenticalOutputByDefault) {
  for (Damage d : {Damage::flip_byte, Damage::zero_file}) {
    SCOPED_TRACE(d == Damage::flip_byte ? "flipped byte" : "zeroed file");
    auto r = generate_run(streaming_options(corrupted_copy("replicated", 2, true, "nvme0", d, "-default"), 0));
    expect_same_output(r, reference());
    EXPECT_TRUE(r.metrics.verify);
    EXPECT_GT(r.metrics.verify_mismatches, 0u);
    EXPECT_GE(r.metrics.verify_hashes, r.metrics.disk_reads) << "every landed read is hashed";
    EXPECT_GT(r.metrics.verify_s, 0.0) << "the hash time is measured";
  }
}

// Without streaming the prepared model's experts are read once into memory: verified the same way.
TEST(StreamingFaults, InMemoryExpertsAreVerifiedTooAndAReplicaServes) {
  ModelOptions o;
  o.threads = 2;
  o.dir = corrupted_copy("replicated", 2, true, "nvme0", Damage::zero_file, "-ram").string();
  expect_same_output(generate_run(o), reference());
  o.dir = corrupted_copy("one", 1, false, "nvme0", Damage::zero_file, "-ram").string();
  try {
    generate_run(o);
    FAIL() << "a zeroed expert was loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/nvme0/L"), std::string::npos) << e.what();
  }
}

// Late verification (--verify-late): experts compute before their hash answers; a layer that used a
// corrupt copy runs again from the replica, so the output is identical, whether reads are whole or
// split over two copies, with or without a host cache and with the device tier. With no good copy the
// run fails naming the file, as without it.
TEST(StreamingFaults, LateVerificationRunsTheLayerAgainFromAGoodCopyWithIdenticalOutput) {
  const fs::path dir = corrupted_copy("replicated", 2, true, "nvme0", Damage::flip_byte, "-late");
  auto clean = streaming_options(prepared("replicated", 2, true), 0);
  clean.streaming.verify_late = true;
  const RunResult ok = generate_run(clean);
  expect_same_output(ok, reference());
  EXPECT_EQ(ok.metrics.verify_mismatches, 0u);
  struct Case { uint64_t cache; bool split; bool device; };
  for (auto c : {Case{0, false, false}, Case{0, true, false}, Case{4, false, false}, Case{4, true, true}}) {
    SCOPED_TRACE(fmt::format("cache {}, {} reads{}", c.cache, c.split ? "split" : "whole", c.device ? ", device tier" : ""));
    auto o = streaming_options(dir, c.cache);
    o.streaming.verify_late = true;
    o.streaming.split_reads = c.split;
    o.streaming.device_tier = c.device;
    const RunResult r = generate_run(o);
    expect_same_output(r, reference());
    EXPECT_GT(r.metrics.verify_mismatches, 0u) << "the flipped bytes were found";
    EXPECT_EQ(r.metrics.verify_in_reader, 0u) << "late verification leaves the readers copying only";
    EXPECT_GT(r.metrics.layer_calls, ok.metrics.layer_calls) << "layers that used a corrupt copy ran again";
  }
  auto bad = streaming_options(corrupted_copy("one", 1, false, "nvme0", Damage::flip_byte, "-late"), 0);
  bad.streaming.verify_late = true;
  const std::string msg = error_of(bad, {}, "a damaged expert reached the output");
  EXPECT_NE(msg.find("/nvme0/L"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no other copy"), std::string::npos) << msg;
}

TEST(StreamingFaults, NoVerifyReadsSkipsTheHashes) {
  auto o = streaming_options(prepared("one", 1, false), 0);
  o.streaming.verify_reads = false;
  auto r = generate_run(o);
  expect_same_output(r, reference());
  EXPECT_FALSE(r.metrics.verify);
  EXPECT_EQ(r.metrics.verify_hashes, 0u);
}
