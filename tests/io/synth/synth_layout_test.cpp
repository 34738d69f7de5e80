// The tensor inventory against checkpoints written by others: make_tiny_k3.py's layout.json and the
// transformers-made fixtures' safetensors headers.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/formats/model_config.hpp"
#include "io/formats/safetensors.hpp"
#include "io/synth/synth_layout.hpp"

namespace ferry {
namespace {

const std::string kFix = FERRY_FIXTURES;

struct Entry {
  std::string dtype;
  std::vector<int64_t> shape;
  bool operator==(const Entry&) const = default;
};

std::map<std::string, Entry> ours(const ModelConfig& c) {
  std::map<std::string, Entry> m;
  visit_checkpoint_layout(c, [&](const TensorSpec& t) { m[t.name] = {safetensors_dtype_name(t.dtype), t.shape}; });
  return m;
}

TEST(SynthLayout, K3TinyMatchesMakeTinyK3LayoutJsonExactly) {
  const auto c = load_model_config(kFix + "/k3-tiny-a/hf/config.json");
  std::ifstream in(kFix + "/k3-tiny-a/hf/layout.json");
  const auto j = nlohmann::json::parse(in);
  std::map<std::string, Entry> ref;
  for (const auto& t : j["tensors"]) ref[t["name"]] = {t["dtype"], t["shape"].get<std::vector<int64_t>>()};
  const auto mine = ours(c);
  EXPECT_EQ(mine.size(), ref.size());
  for (const auto& [name, e] : ref) {
    auto it = mine.find(name);
    ASSERT_NE(it, mine.end()) << "missing " << name;
    EXPECT_EQ(it->second, e) << name;
  }
}

// transformers writes e_score_correction_bias in the model dtype (BF16 here); ours is F32 as in the
// released K3/DeepSeek checkpoints. Everything else must match name, dtype and shape.
void expect_matches_fixture(const std::string& dir) {
  const auto c = load_model_config(kFix + "/" + dir + "/config.json");
  SafetensorsFile f(kFix + "/" + dir + "/model.safetensors");
  const auto mine = ours(c);
  EXPECT_EQ(mine.size(), f.names().size()) << dir;
  for (const auto& name : f.names()) {
    const auto v = f.get(name);
    auto it = mine.find(name);
    ASSERT_NE(it, mine.end()) << dir << ": missing " << name;
    EXPECT_EQ(it->second.shape, v.shape) << name;
    if (name.find("e_score_correction_bias") == std::string::npos) {
      EXPECT_EQ(it->second.dtype, safetensors_dtype_name(v.dtype)) << name;
    }
  }
}

TEST(SynthLayout, DeepseekV3MatchesTransformersFixture) { expect_matches_fixture("deepseek_v3-a"); }
TEST(SynthLayout, DeepseekV32MatchesTransformersFixture) { expect_matches_fixture("deepseek_v32-a"); }
TEST(SynthLayout, KimiLinearMatchesTransformersFixture) { expect_matches_fixture("kimi_linear-a"); }

TEST(SynthLayout, K31AddsTheDsaIndexerPerDsaLayer) {
  const auto c = load_model_config(kFix + "/configs/kimi-k31-pro-config.json");
  int64_t n = 0;
  std::vector<int64_t> wq;
  visit_checkpoint_layout(c, [&](const TensorSpec& t) {
    if (t.name.find(".indexer.") != std::string::npos) ++n;
    if (t.name == "language_model.model.layers.3.self_attn.indexer.wq_b.weight") wq = t.shape;
  });
  EXPECT_EQ(n, 24 * 5);
  EXPECT_EQ(wq, (std::vector<int64_t>{64 * 128, 1536}));
}

}  // namespace
}  // namespace ferry
