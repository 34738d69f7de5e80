// Hostile sizes: the crafted configs of issue 16 (dimensions whose products wrap, a layer count that
// allocated 8 GB before failing, a non-positive context), manifests with truncating integers, and a
// safetensors file whose odd header length puts bf16 data at an odd address. Each must give a clear
// error naming the field (or convert correctly), never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/formats/convert.hpp"
#include "io/formats/model_config.hpp"
#include "io/formats/safetensors.hpp"
#include "io/formats/size_limits.hpp"
#include "io/store/expert_store.hpp"
#include "tests/io/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {
const fs::path kFix = FERRY_FIXTURES;

nlohmann::json fixture_json(const char* rel) {
  std::ifstream in(kFix / rel);
  std::ostringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// Parses `j`, expecting a ConfigError whose message holds `field`.
void expect_refused(const nlohmann::json& j, const std::string& field) {
  try {
    parse_model_config(j.dump(), "crafted.json");
    FAIL() << "accepted a config with a hostile " << field;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("crafted.json"), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(SizeLimits, DeepseekVHeadDimThatWrapsTheKvBProductIsRefused) {
  auto j = fixture_json("deepseek_v3-a/config.json");
  j["v_head_dim"] = (uint64_t(1) << 62) + 16;  // h*(dn+dv) wraps to a small size in 64 bits
  expect_refused(j, "v_head_dim");
}

TEST(SizeLimits, K3AttentionHeadsThatWrapTheQProductAreRefused) {
  auto j = fixture_json("k3-tiny-a/hf/config.json");
  j["text_config"]["num_attention_heads"] = (uint64_t(1) << 62) + 4;
  expect_refused(j, "num_attention_heads");
}

TEST(SizeLimits, TwoToTheThirtyOnePlusSevenLayersAreRefusedBeforeAllocating) {
  auto j = fixture_json("deepseek_v3-a/config.json");
  j["num_hidden_layers"] = (int64_t(1) << 31) + 7;
  expect_refused(j, "num_hidden_layers");
}

TEST(SizeLimits, NonPositiveMaxPositionEmbeddingsIsRefused) {
  for (int64_t v : {int64_t(0), int64_t(-5)}) {
    auto j = fixture_json("deepseek_v3-a/config.json");
    j["max_position_embeddings"] = v;
    expect_refused(j, "max_position_embeddings");
  }
}

TEST(SizeLimits, IntegerAboveInt64IsRefusedNotWrapped) {
  auto j = fixture_json("deepseek_v3-a/config.json");
  j["hidden_size"] = uint64_t(1) << 63;  // read as int64 this would be negative
  expect_refused(j, "hidden_size");
  j = fixture_json("deepseek_v3-a/config.json");
  j["vocab_size"] = 1e300;  // a float far outside int64: casting it is undefined behaviour
  expect_refused(j, "vocab_size");
}

TEST(SizeLimits, EveryNamedLimitIsEnforcedWithItsReason) {
  auto j = fixture_json("deepseek_v3-a/config.json");
  j["n_routed_experts"] = limits::kMaxExperts * 2;
  j["n_group"] = 1;
  j["topk_group"] = 1;
  expect_refused(j, "n_routed_experts");
  j = fixture_json("deepseek_v3-a/config.json");
  j["vocab_size"] = limits::kMaxVocab + 1;
  expect_refused(j, "vocab_size");
  j = fixture_json("deepseek_v3-a/config.json");
  j["hidden_size"] = limits::kMaxHidden + 1;
  expect_refused(j, "hidden_size");
}

TEST(SizeLimits, RealConfigsAtTheirSizesPass) {
  EXPECT_NO_THROW(load_model_config(kFix / "configs/kimi-k3-config.json"));
  EXPECT_NO_THROW(load_model_config(kFix / "configs/kimi-k31-pro-config.json"));
  EXPECT_NO_THROW(load_model_config(kFix / "deepseek_v32-a/config.json"));
}

TEST(SizeLimits, CheckedArithmeticThrowsInsteadOfWrapping) {
  EXPECT_EQ(checked_mul(int64_t(1) << 30, int64_t(1) << 30, "x"), int64_t(1) << 60);
  EXPECT_THROW(checked_mul(int64_t(1) << 32, int64_t(1) << 32, "x"), FormatError);
  EXPECT_THROW(checked_add(INT64_MAX, int64_t(1), "x"), FormatError);
  EXPECT_THROW(checked_mul(int64_t(-1), int64_t(2), "x"), FormatError);
}

namespace {
fs::path write_manifest_text(const std::string& name, const std::string& text) {
  auto d = test::temp_dir("limits_" + name);
  std::ofstream(d / "manifest.json") << text;
  return d / "manifest.json";
}
std::string manifest_with(const std::string& experts, const std::string& n_layers = "2") {
  return R"({"format":"ferry-experts/1","config_hash":"0","n_layers":)" + n_layers +
         R"(,"n_experts":4,"expert_bytes":4096,"file_bytes":4096,"dirs":["/a"],"experts":[)" + experts + "]}";
}
}  // namespace

TEST(SizeLimits, ManifestLayerThatWouldTruncateTo32BitsIsRefused) {
  auto f = write_manifest_text("trunc", manifest_with(R"({"layer":4294967297,"expert":0,"xxh64":"0000000000000000","dirs":[0]})"));
  try {
    read_manifest(f);
    FAIL() << "layer 2^32+1 was accepted (it truncates to 1)";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("layer"), std::string::npos) << e.what();
  }
}

TEST(SizeLimits, ManifestCountsOutsideTheLimitsAreRefused) {
  EXPECT_THROW(read_manifest(write_manifest_text("layers", manifest_with("", "100000"))), FormatError);
  EXPECT_THROW(read_manifest(write_manifest_text("dir", manifest_with(R"({"layer":0,"expert":0,"xxh64":"0000000000000000","dirs":[70000]})"))),
               FormatError);
  EXPECT_THROW(read_manifest(write_manifest_text("neg", manifest_with(R"({"layer":-1,"expert":0,"xxh64":"0000000000000000","dirs":[0]})"))),
               FormatError);
}

TEST(SizeLimits, Bf16DataAtAnOddAddressConvertsExactly) {
  // A header of odd length (JSON without padding) puts the data buffer at an odd file offset.
  const std::string header = R"({"t":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})";
  ASSERT_EQ(header.size() % 2, 1u) << "the test needs an odd header length";
  const uint16_t vals[3] = {0x3f80, 0xc000, 0x4049};  // 1, -2, 3.140625
  auto d = test::temp_dir("odd_header");
  {
    std::ofstream out(d / "odd.safetensors", std::ios::binary);
    const uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
    out.write(reinterpret_cast<const char*>(vals), sizeof vals);
  }
  SafetensorsFile f(d / "odd.safetensors");
  auto v = f.get("t");
  ASSERT_EQ(reinterpret_cast<uintptr_t>(v.data) % 2, 1u);
  float out[3];
  bf16_to_f32_n(v.data, out, 3);  // UBSan (scripts/sanitize.sh) reports a misaligned load here if it regresses
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 3.140625f);
}
