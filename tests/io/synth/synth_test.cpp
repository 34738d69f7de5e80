// ferry synth: the written checkpoint is the layout, parses, is deterministic, and with a usage file
// its routers' selection follows the counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/formats/checkpoint.hpp"
#include "io/formats/ct_mxfp4.hpp"
#include "io/formats/convert.hpp"
#include "io/errors.hpp"
#include "io/store/expert_store.hpp"
#include "io/formats/model_config.hpp"
#include "io/synth/synth.hpp"
#include "io/synth/synth_layout.hpp"
#include "io/synth/synth_tokenizer_data.hpp"
#include "io/synth/synth_values.hpp"
#include "tests/io/store/store_test_util.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SynthOptions quiet(Arch a) {
  SynthOptions o;
  o.arch = a;
  o.progress = false;
  return o;
}

void expect_checkpoint_is_layout(const fs::path& dir) {
  const auto c = load_model_config(dir / "config.json");
  const auto src = open_safetensors_checkpoint(dir);
  int64_t n = 0;
  visit_checkpoint_layout(c, [&](const TensorSpec& t) {
    ++n;
    const auto v = src->get(t.name);
    EXPECT_EQ(v.dtype, t.dtype) << t.name;
    EXPECT_EQ(v.shape, t.shape) << t.name;
  });
  EXPECT_EQ(int64_t(src->names().size()), n);
}

TEST(Synth, EveryArchWritesItsLayoutAsAShardedCheckpoint) {
  for (Arch a : {Arch::kimi_k31, Arch::kimi_k3, Arch::kimi_linear, Arch::deepseek_v3, Arch::deepseek_v32}) {
    const auto dir = test::fresh_dir(to_string(a));
    const auto r = synth_checkpoint(dir, quiet(a));
    EXPECT_EQ(load_model_config(dir / "config.json").arch, a);
    EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json")) << to_string(a);
    expect_checkpoint_is_layout(dir);
    EXPECT_LT(r.bytes, 20'000'000) << "default size is CPU-sized";
  }
}

TEST(Synth, KimiGetsTheFixtureTokenizer) {
  const auto dir = test::fresh_dir("tok");
  synth_checkpoint(dir, quiet(Arch::kimi_k31));
  const fs::path fix = fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
  for (const char* f : {"tiktoken.model", "tokenizer_config.json", "special_tokens_map.json"})
    EXPECT_EQ(slurp(dir / f), slurp(fix / f)) << f << " (regenerate io/synth/synth_tokenizer_data.hpp)";
}

TEST(Synth, K31HasTheDsaIndexerAndDsaConfig) {
  const auto dir = test::fresh_dir("k31");
  synth_checkpoint(dir, quiet(Arch::kimi_k31));
  const auto c = load_model_config(dir / "config.json");
  EXPECT_EQ(c.count(Mixer::dsa), 2);  // layers 4 and 6 (1-based) of 6
  const auto src = open_safetensors_checkpoint(dir);
  EXPECT_TRUE(src->has("language_model.model.layers.3.self_attn.indexer.wq_b.weight"));
  EXPECT_TRUE(src->has("language_model.model.layers.5.self_attn.indexer.k_norm.bias"));
}

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  const auto a = test::fresh_dir("a"), b = test::fresh_dir("b"), c = test::fresh_dir("c");
  auto o = quiet(Arch::deepseek_v3);
  synth_checkpoint(a, o);
  synth_checkpoint(b, o);
  o.seed = 7;
  synth_checkpoint(c, o);
  int shards = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    if (e.path().extension() != ".safetensors") continue;
    ++shards;
    const auto f = e.path().filename();
    EXPECT_EQ(xxh64_file(a / f), xxh64_file(b / f)) << f;
    EXPECT_NE(xxh64_file(a / f), xxh64_file(c / f)) << f;
  }
  EXPECT_GE(shards, 3);
}

TEST(Synth, ExpertValuesHaveTheMatrixScale) {
  const auto dir = test::fresh_dir("scale");
  synth_checkpoint(dir, quiet(Arch::kimi_k31));
  const auto c = load_model_config(dir / "config.json");
  const auto src = open_safetensors_checkpoint(dir);
  const auto [rows, cols] = expert_matrix_shape(c, ExpertMatrix::down);
  const auto w = find_ct_mxfp4(*src, expert_matrix_name(c, 2, 3, ExpertMatrix::down), rows, cols);
  std::vector<float> v(size_t(rows * cols));
  dequant_ct_mxfp4(w.packed.data, w.scale.data, rows, cols, v.data());
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  const double rms = std::sqrt(ss / double(v.size()));
  EXPECT_NEAR(rms * std::sqrt(double(cols)), 1.0, 0.1) << "N(0,1)/sqrt(cols) after MXFP4 rounding";
}

TEST(Synth, UsageBiasesMakeSelectionTrackTheCounts) {
  const auto dir = test::fresh_dir("usage");
  auto o = quiet(Arch::kimi_k31);
  o.usage = fs::path(FERRY_FIXTURES) / "k3-expert-usage-2026-09-03.json";
  const auto r = synth_checkpoint(dir, o);
  ASSERT_EQ(r.tracking.size(), 5u);
  for (const auto& t : r.tracking) {
    EXPECT_EQ(t.usage_layer, t.layer) << "our MoE layers 1..5 take the file's layers 1..5";
    EXPECT_GT(t.correlation, 0.9) << "layer " << t.layer;
    EXPECT_LT(t.tv_distance, 0.15) << "layer " << t.layer;
  }
}

TEST(Synth, ImpossibleDimensionsAreConfigErrors) {
  auto o = quiet(Arch::kimi_k31);
  o.dims.top_k = 64;
  EXPECT_THROW(synth_config_json(o), ConfigError);
  o = quiet(Arch::deepseek_v3);
  o.full_width = true;
  EXPECT_THROW(synth_config_json(o), ConfigError);
  EXPECT_THROW(parse_synth_arch("kimi_k9"), ConfigError);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(SynthValues, FastExpertQuantizerAgreesWithConvertQuantizeMxfp4) {
  // The synth path quantizes with its own fast loop; on random values (no exact ties) it must give
  // the same blocks as the reference quantizer in io/formats/convert.hpp.
  const auto fast = synth_expert_blocks(64, 256, 5, "x");
  SynthRng rng(5, "x");
  const float s = 1.0f / 16.0f;
  std::vector<float> v(64 * 256);
  for (auto& x : v) x = rng.fast_normal() * s;
  std::vector<BlockMxfp4> ref(v.size() / kQK);
  quantize_mxfp4(v.data(), ref.data(), int64_t(v.size()));
  ASSERT_EQ(ref.size(), fast.size());
  EXPECT_EQ(std::memcmp(ref.data(), fast.data(), ref.size() * sizeof(BlockMxfp4)), 0);
}

}  // namespace
}  // namespace ferry
