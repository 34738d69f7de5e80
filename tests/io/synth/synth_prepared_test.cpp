// ferry synth --prepared: the prepared model it writes is byte for byte what synth --out followed by
// prepare writes (spine tensors and metadata, expert files, manifest), over one or several expert
// dirs, with fitted router biases, whatever the thread count; and the free-space check and CLI.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/wait.h>

#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/store/expert_store_prepare.hpp"
#include "io/formats/gguf.hpp"
#include "io/synth/synth.hpp"
#include "io/synth/synth_prepared.hpp"
#include "tests/io/store/store_test_util.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;
const fs::path kFix = FERRY_FIXTURES;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SynthOptions small(Arch a) {
  SynthOptions o;
  o.arch = a;
  o.progress = false;
  return o;
}

std::vector<fs::path> expert_dirs(const fs::path& root, int n) {
  std::vector<fs::path> d;
  for (int i = 0; i < n; ++i) d.push_back(root / ("nvme" + std::to_string(i)));
  return d;
}

// synth --out root/hf, then prepare into root/model + root/nvme<i>. Returns synth's router tracking.
std::vector<RouterTracking> synth_then_prepare(const fs::path& root, const SynthOptions& s, int n_dirs, SpineType t) {
  const auto r = synth_checkpoint(root / "hf", s);
  PrepareOptions o;
  o.checkpoint = root / "hf";
  o.out = root / "model";
  o.expert_dirs = expert_dirs(root, n_dirs);
  o.spine = t;
  o.progress = false;
  prepare_model(o);
  return r.tracking;
}

SynthPreparedResult synth_direct(const fs::path& root, const SynthOptions& s, int n_dirs, SpineType t, int threads) {
  SynthPreparedOptions o;
  o.synth = s;
  o.out = root / "model";
  o.expert_dirs = expert_dirs(root, n_dirs);
  o.spine = t;
  o.threads = threads;
  return synth_prepared(o);
}

// Same tensor names (in order), types, shapes and bytes, and the same metadata.
void expect_same_spine(const fs::path& want_file, const fs::path& got_file) {
  const GgufFile want(want_file), got(got_file);
  ASSERT_EQ(want.names(), got.names());
  for (const auto& n : want.names()) {
    const auto a = want.get(n), b = got.get(n);
    EXPECT_EQ(a.dtype, b.dtype) << n;
    EXPECT_EQ(a.shape, b.shape) << n;
    ASSERT_EQ(a.nbytes, b.nbytes) << n;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << n;
  }
  ASSERT_EQ(want.keys(), got.keys());
  for (const char* k : {"general.name", "ferry.config_json", "ferry.config_hash", "ferry.spine_type", "ferry.tensor_prefix"})
    EXPECT_EQ(want.get_value<std::string>(k), got.get_value<std::string>(k)) << k;
  EXPECT_EQ(want.get_array<std::string>("ferry.expert_dirs"), got.get_array<std::string>("ferry.expert_dirs"));
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Every file of the model dir and the expert dirs (manifest, spine, configs, experts) is identical.
void expect_same_model(const fs::path& want_root, const fs::path& got_root, int n_dirs, bool with_usage = false) {
  expect_same_spine(want_root / "model/spine.gguf", got_root / "model/spine.gguf");
  const auto mw = read_manifest(want_root / "model/manifest.json"), mg = read_manifest(got_root / "model/manifest.json");
  ASSERT_EQ(mw.experts.size(), mg.experts.size());
  for (size_t i = 0; i < mw.experts.size(); ++i) {
    EXPECT_EQ(mw.experts[i].xxh64, mg.experts[i].xxh64) << expert_file_name(mw.experts[i].layer, mw.experts[i].expert);
    EXPECT_EQ(mw.experts[i].dirs, mg.experts[i].dirs);
  }
  auto got_files = listing(got_root / "model");
  // synth --prepared --usage also keeps the counts its routers follow (they seed the expert caches);
  // prepare writes usage.json only with --replicas.
  EXPECT_EQ(got_files.erase("usage.json"), with_usage ? 1u : 0u);
  EXPECT_FALSE(got_files.count(".prepare-journal")) << "synth --prepared keeps no journal";
  auto want_files = listing(want_root / "model");
  want_files.erase(".prepare-journal");  // prepare's resume log
  EXPECT_EQ(want_files, got_files);
  // (bool comparisons: a failure names the file instead of printing megabytes of binary)
  for (const auto& f : want_files) EXPECT_TRUE(slurp(want_root / "model" / f) == slurp(got_root / "model" / f)) << f;
  for (const auto& d : expert_dirs("", n_dirs)) {
    ASSERT_EQ(listing(want_root / d), listing(got_root / d)) << d;
    for (const auto& f : listing(want_root / d)) ASSERT_TRUE(slurp(want_root / d / f) == slurp(got_root / d / f)) << d / f;
  }
}

// Runs the reference under root, moves it to root's sibling "-ref" and returns that: the reference
// then names the same absolute dirs (manifest, spine metadata) as a second run written under root.
fs::path move_aside(const fs::path& root) {
  const fs::path ref = root.string() + "-ref";
  fs::remove_all(ref);
  fs::rename(root, ref);
  fs::create_directories(root);
  return ref;
}

TEST(SynthPrepared, K31OverTwoDirsIsByteIdenticalToSynthThenPrepare) {
  const auto root = test::fresh_dir("k31");
  synth_then_prepare(root, small(Arch::kimi_k31), 2, SpineType::q8_0);
  const auto ref = move_aside(root);
  const auto r = synth_direct(root, small(Arch::kimi_k31), 2, SpineType::q8_0, 4);
  EXPECT_EQ(r.experts, int64_t(read_manifest(root / "model/manifest.json").experts.size()));
  EXPECT_FALSE(listing(root / "nvme0").empty());
  EXPECT_FALSE(listing(root / "nvme1").empty()) << "the second expert dir holds its share";
  EXPECT_FALSE(fs::exists(root / "hf")) << "no HF checkpoint is written";
  expect_same_model(ref, root, 2);
  fs::remove_all(ref);
}

TEST(SynthPrepared, K3WithUsageFitsTheSameRouterBiasesAsSynth) {
  const auto root = test::fresh_dir("k3");
  auto s = small(Arch::kimi_k3);
  s.usage = kFix / "k3-expert-usage-2026-09-03.json";
  const auto want_tracking = synth_then_prepare(root, s, 1, SpineType::bf16);
  const auto ref = move_aside(root);
  const auto r = synth_direct(root, s, 1, SpineType::bf16, 3);
  ASSERT_EQ(r.tracking.size(), want_tracking.size());
  ASSERT_FALSE(r.tracking.empty());
  for (size_t i = 0; i < r.tracking.size(); ++i) {
    EXPECT_EQ(r.tracking[i].layer, want_tracking[i].layer);
    EXPECT_EQ(r.tracking[i].usage_layer, want_tracking[i].usage_layer);
    EXPECT_DOUBLE_EQ(r.tracking[i].correlation, want_tracking[i].correlation);
  }
  expect_same_model(ref, root, 1, /*with_usage=*/true);
  fs::remove_all(ref);
}

// Under 1 MB synth writes one model.safetensors, which prepare reads in write order rather than
// sorted by name: the spine's tensor order must follow.
TEST(SynthPrepared, TinySingleFileDeepSeekKeepsCheckpointOrder) {
  const auto root = test::fresh_dir("tiny");
  auto s = small(Arch::deepseek_v3);
  s.dims = SynthDims{};
  s.dims.layers = 2;
  s.dims.hidden = 64;
  s.dims.experts = 4;
  s.dims.top_k = 2;
  s.dims.moe_inter = 32;
  s.dims.dense_inter = 64;
  s.dims.vocab = 512;
  s.dims.heads = 2;
  s.dims.q_lora = 32;
  s.dims.kv_lora = 32;
  synth_then_prepare(root, s, 1, SpineType::q8_0);
  ASSERT_TRUE(fs::exists(root / "hf/model.safetensors")) << "the case under test: a single-file checkpoint";
  const auto ref = move_aside(root);
  synth_direct(root, s, 1, SpineType::q8_0, 2);
  expect_same_model(ref, root, 1);
  fs::remove_all(ref);
}

TEST(SynthPrepared, OneThreadAndFourThreadsWriteTheSameModel) {
  const auto root = test::fresh_dir("threads");
  auto s = small(Arch::kimi_k31);
  s.dims.layers = 3;
  s.seed = 7;
  synth_direct(root, s, 3, SpineType::f32, 1);
  const auto ref = move_aside(root);
  synth_direct(root, s, 3, SpineType::f32, 4);
  expect_same_model(ref, root, 3);
  fs::remove_all(ref);
}

TEST(SynthPrepared, RefusesBeforeWritingWhenTheDiskIsTooSmall) {
  const auto root = test::fresh_dir("space");
  SynthPreparedOptions o;
  o.synth = small(Arch::kimi_k31);
  o.out = root / "model";
  o.expert_dirs = {root / "nvme0"};
  o.free_bytes = [](const fs::path&) { return int64_t(1) << 20; };
  try {
    synth_prepared(o);
    FAIL() << "expected LimitError";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("not enough free space"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root / "model"));
  EXPECT_FALSE(fs::exists(root / "nvme0"));
}

struct CliRun {
  int rc = -1;
  std::string out;
};

CliRun ferry(const std::string& args) {
  CliRun r;
  std::FILE* p = ::popen((std::string(FERRY_BINARY_DIR) + "/apps/ferry " + args + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(SynthPrepared, CliWritesAModelThatVerifies) {
  const auto root = test::fresh_dir("cli");
  const std::string dirs = " --expert-dir " + (root / "a").string() + " --expert-dir " + (root / "b").string();
  auto r = ferry("synth --arch kimi_k31 --quiet --threads 2 --prepared " + (root / "m").string() + dirs +
                 " --usage " + (kFix / "k3-expert-usage-2026-09-03.json").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("MB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("router bias fit"), std::string::npos) << r.out;
  r = ferry("verify " + (root / "m").string() + " --full --quiet");
  EXPECT_EQ(r.rc, 0) << r.out;
  r = ferry("synth --out " + (root / "hf").string() + " --prepared " + (root / "m2").string() + dirs);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("exactly one of --out"), std::string::npos) << r.out;
  r = ferry("synth --prepared " + (root / "m3").string());
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--expert-dir"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ferry
