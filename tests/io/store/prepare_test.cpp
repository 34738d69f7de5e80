// ferry prepare on the fixtures: exact expert repack, spine contents and types, manifest, placement
// with replicas, resume, and the free-space check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "io/formats/checkpoint.hpp"
#include "io/formats/convert.hpp"
#include "io/formats/ct_mxfp4.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/store/expert_store_prepare.hpp"
#include "io/formats/gguf.hpp"
#include "io/formats/mapped_file.hpp"
#include "io/formats/model_config.hpp"
#include "io/synth/synth_layout.hpp"
#include "tests/io/store/store_test_util.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;
const fs::path kFix = FERRY_FIXTURES;

PrepareOptions options(const fs::path& hf, const fs::path& root, SpineType t, int n_dirs = 1) {
  PrepareOptions o;
  o.checkpoint = hf;
  o.out = root / "model";
  for (int i = 0; i < n_dirs; ++i) o.expert_dirs.push_back(root / ("nvme" + std::to_string(i)));
  o.spine = t;
  o.progress = false;
  return o;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  MappedFile f(p);
  return {f.data(), f.data() + f.size()};
}

// Every expert file dequantizes to exactly the checkpoint's compressed-tensors values.
void expect_exact_experts(const fs::path& hf, const fs::path& model_dir) {
  const auto c = load_model_config(hf / "config.json");
  const auto src = open_safetensors_checkpoint(hf);
  const auto m = read_manifest(model_dir / "manifest.json");
  ASSERT_EQ(int64_t(m.experts.size()), c.count(Ffn::moe) * c.moe.n_experts);
  for (const auto& e : m.experts) {
    const auto bytes = read_bytes(fs::path(m.dirs[e.dirs[0]]) / expert_file_name(e.layer, e.expert));
    ASSERT_EQ(int64_t(bytes.size()), m.file_bytes);
    size_t at = 0;
    for (ExpertMatrix mx : {ExpertMatrix::gate, ExpertMatrix::up, ExpertMatrix::down}) {
      const auto [rows, cols] = expert_matrix_shape(c, mx);
      const auto w = find_ct_mxfp4(*src, expert_matrix_name(c, e.layer, e.expert, mx), rows, cols);
      std::vector<float> want(size_t(rows * cols)), got(size_t(rows * cols));
      dequant_ct_mxfp4(w.packed.data, w.scale.data, rows, cols, want.data());
      dequant_mxfp4(reinterpret_cast<const BlockMxfp4*>(bytes.data() + at), got.data(), rows * cols);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << expert_file_name(e.layer, e.expert);
      at += size_t(rows * cols / kQK) * sizeof(BlockMxfp4);
    }
    for (size_t i = at; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], 0) << "padding is zero";
    EXPECT_EQ(xxh64_bytes(bytes.data(), bytes.size()), e.xxh64);
  }
}

TEST(Prepare, K3TinyExpertsDequantizeToExactlyTheCheckpointValues) {
  const auto root = test::fresh_dir("k3");
  const fs::path hf = kFix / "k3-tiny-a/hf";
  const auto r = prepare_model(options(hf, root, SpineType::bf16, 2));
  EXPECT_EQ(r.experts, 5 * 32);
  EXPECT_EQ(r.copies_written, 160);
  expect_exact_experts(hf, root / "model");
  EXPECT_TRUE(verify_store(root / "model", {VerifyMode::full, 0, 0}, nullptr).ok());
  for (const char* f : {"config.json", "tiktoken.model", "tokenizer_config.json", "special_tokens_map.json"})
    EXPECT_TRUE(fs::exists(root / "model" / f)) << f;
}

TEST(Prepare, BF16SpineHoldsEveryNonRoutedTensorAtItsStoredPrecision) {
  const auto root = test::fresh_dir("k3");
  const fs::path hf = kFix / "k3-tiny-a/hf";
  prepare_model(options(hf, root, SpineType::bf16));
  const auto c = load_model_config(hf / "config.json");
  const auto src = open_safetensors_checkpoint(hf);
  GgufFile g(root / "model/spine.gguf");
  EXPECT_EQ(g.get_value<std::string>("general.architecture"), "ferry");
  EXPECT_EQ(g.get_value<std::string>("ferry.spine_type"), "bf16");
  EXPECT_EQ(g.get_array<std::string>("ferry.expert_dirs").size(), 1u);
  int64_t n = 0;
  for (const auto& name : src->names()) {
    if (is_routed_expert_tensor(name)) continue;
    ++n;
    const auto want = src->get(name);
    const auto gname = spine_gguf_name(name, c.tensor_prefix);
    EXPECT_EQ(hf_name_from_spine(gname, c.tensor_prefix), name);
    const auto got = g.get(gname);
    EXPECT_EQ(got.shape, want.shape) << name;
    std::vector<float> a(size_t(want.numel())), b(size_t(want.numel()));
    if (want.dtype == DType::bf16) bf16_to_f32_n(reinterpret_cast<const uint16_t*>(want.data), a.data(), a.size());
    else std::memcpy(a.data(), want.data, a.size() * 4);
    if (got.dtype == DType::bf16) bf16_to_f32_n(reinterpret_cast<const uint16_t*>(got.data), b.data(), b.size());
    else std::memcpy(b.data(), got.data, b.size() * 4);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << name;
  }
  EXPECT_EQ(int64_t(g.names().size()), n);
}

TEST(Prepare, DeepseekV3Q8SpineTypesAndExactExperts) {
  const auto root = test::fresh_dir("dsv3");
  const fs::path hf = kFix / "deepseek_v3-a";
  prepare_model(options(hf, root, SpineType::q8_0));
  GgufFile g(root / "model/spine.gguf");
  EXPECT_EQ(g.get("layers.1.mlp.gate.weight").dtype, DType::f32) << "router stays F32";
  EXPECT_EQ(g.get("layers.1.mlp.shared_experts.gate_proj.weight").dtype, DType::q8_0);
  EXPECT_EQ(g.get("layers.0.input_layernorm.weight").dtype, DType::f32);
  EXPECT_EQ(g.get("lm_head.weight").dtype, DType::q8_0);
  expect_exact_experts(hf, root / "model");
}

TEST(Prepare, ReplicaDirectoryGetsTheMostUsedExpertsWithinItsBudget) {
  const auto root = test::fresh_dir("rep");
  const fs::path hf = kFix / "k3-tiny-a/hf";
  auto o = options(hf, root, SpineType::q8_0);
  o.replicas_usage = kFix / "k3-expert-usage-2026-09-03.json";
  const int64_t fb = expert_file_bytes(load_model_config(hf / "config.json"));
  o.replica_budgets = {{root / "fast", 10 * fb + fb / 2}};
  prepare_model(o);
  const auto m = read_manifest(root / "model/manifest.json");
  ASSERT_EQ(m.dirs.size(), 2u);
  const auto usage = load_usage(o.replicas_usage);
  std::vector<std::pair<int64_t, uint64_t>> ranked;  // (count, key) over the model's experts
  for (const auto& e : m.experts) {
    auto it = usage.find(key_id({e.layer, e.expert}));
    ranked.push_back({it == usage.end() ? 0 : it->second, key_id({e.layer, e.expert})});
  }
  std::sort(ranked.begin(), ranked.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::set<uint64_t> top10, on_fast;
  for (int i = 0; i < 10; ++i) top10.insert(ranked[size_t(i)].second);
  for (const auto& e : m.experts)
    if (e.dirs.size() == 2) on_fast.insert(key_id({e.layer, e.expert}));
  EXPECT_EQ(on_fast, top10);
  EXPECT_EQ(std::distance(fs::directory_iterator(root / "fast"), fs::directory_iterator{}), 10);
}

TEST(Prepare, TooSmallDiskFailsBeforeWritingAnything) {
  const auto root = test::fresh_dir("small");
  auto o = options(kFix / "k3-tiny-a/hf", root, SpineType::q8_0);
  o.free_bytes = [](const fs::path&) { return int64_t(1) << 20; };  // 1 MiB free; the model needs ~6 MB
  try {
    prepare_model(o);
    FAIL() << "expected LimitError";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("not enough free space"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root / "model"));
  EXPECT_FALSE(fs::exists(root / "nvme0"));
}

TEST(Prepare, RerunSkipsFinishedFilesAndRewritesOnlyWhatIsMissing) {
  const auto root = test::fresh_dir("rerun");
  const auto o = options(kFix / "deepseek_v3-a", root, SpineType::q8_0);
  const auto first = prepare_model(o);
  fs::remove(root / "nvme0" / "L2-E5.bin");
  fs::resize_file(root / "nvme0" / "L3-E1.bin", 100);
  const auto again = prepare_model(o);
  EXPECT_FALSE(again.spine_written);
  EXPECT_EQ(again.copies_written, 2);
  EXPECT_EQ(again.copies_skipped, first.copies_written - 2);
  EXPECT_TRUE(verify_store(root / "model", {VerifyMode::full, 0, 0}, nullptr).ok());
}

}  // namespace
}  // namespace ferry
