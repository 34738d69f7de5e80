// Config parsing of every fixture and of the real K3 / K3.1 configs, with the values asserted, and
// bad configs whose errors must name the offending field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/errors.hpp"
#include "io/formats/model_config.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {
const fs::path kFix = FERRY_FIXTURES;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses `j` after `edit`, expecting a ConfigError whose message contains every one of `needles`.
template <class Edit>
void expect_config_error(nlohmann::json j, Edit edit, std::initializer_list<const char*> needles) {
  edit(j);
  try {
    parse_model_config(j.dump(), "test-config.json");
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("test-config.json"), std::string::npos) << msg;
    for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

nlohmann::json fixture_json(const char* rel) { return nlohmann::json::parse(slurp(kFix / rel)); }
}  // namespace

TEST(ModelConfig, KimiK3RealConfigHas69KdaAnd24MlaLayers) {
  auto c = load_model_config(kFix / "configs/kimi-k3-config.json");
  EXPECT_EQ(c.arch, Arch::kimi_k3);
  EXPECT_EQ(c.tensor_prefix, "language_model.");
  EXPECT_EQ(c.n_layers, 93);
  EXPECT_EQ(c.count(Mixer::kda), 69);
  EXPECT_EQ(c.count(Mixer::mla), 24);
  EXPECT_EQ(c.mixer[3], Mixer::mla);  // 1-indexed 4
  EXPECT_EQ(c.mixer[92], Mixer::mla);
  EXPECT_EQ(c.mixer[0], Mixer::kda);
  EXPECT_EQ(c.count(Ffn::moe), 92);
  EXPECT_EQ(c.ffn[0], Ffn::dense);
  EXPECT_EQ(c.hidden, 7168);
  EXPECT_EQ(c.vocab, 163840);
  EXPECT_EQ(c.intermediate, 33792);
  EXPECT_EQ(c.moe.n_experts, 896);
  EXPECT_EQ(c.moe.top_k, 16);
  EXPECT_EQ(c.moe.n_shared, 2);
  EXPECT_EQ(c.moe.moe_inter, 3072);
  EXPECT_EQ(c.moe.latent_dim, 3584);
  EXPECT_TRUE(c.moe.latent_norm);
  EXPECT_TRUE(c.moe.experts_mxfp4);
  EXPECT_EQ(c.act, Activation::situ);
  EXPECT_DOUBLE_EQ(c.situ_beta, 4.0);
  EXPECT_DOUBLE_EQ(c.situ_linear_beta, 25.0);
  EXPECT_EQ(c.attn_res_block, 12);
  EXPECT_TRUE(c.mla_nope);
  EXPECT_TRUE(c.mla_output_gate);
  EXPECT_EQ(c.rope.type, RopeType::none);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.kda.n_heads, 96);
  EXPECT_EQ(c.kda.head_dim, 128);
  EXPECT_TRUE(c.kda.full_rank_gate);
  EXPECT_TRUE(c.kda.has_lower_bound);
  EXPECT_DOUBLE_EQ(c.kda.gate_lower_bound, -5.0);
  EXPECT_EQ(c.bos_id, 163584);
  EXPECT_EQ(c.eos_id, 163586);
  EXPECT_EQ(c.pad_id, 163839);
  EXPECT_DOUBLE_EQ(c.rms_eps, 1e-5);
  EXPECT_EQ(c.max_positions, 1048576);
}

TEST(ModelConfig, KimiK31RealConfigHas69KdaAnd24DsaLayers) {
  auto c = load_model_config(kFix / "configs/kimi-k31-pro-config.json");
  EXPECT_EQ(c.arch, Arch::kimi_k31);
  EXPECT_EQ(c.count(Mixer::kda), 69);
  EXPECT_EQ(c.count(Mixer::dsa), 24);
  EXPECT_EQ(c.count(Mixer::mla), 0);
  EXPECT_EQ(c.mixer[3], Mixer::dsa);
  EXPECT_EQ(c.mixer[2], Mixer::kda);
  EXPECT_EQ(c.count(Ffn::moe), 92);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 2048);
  EXPECT_TRUE(c.moe.experts_mxfp4);
  EXPECT_STREQ(to_string(c.arch), "kimi_k31");
  EXPECT_STREQ(to_string(c.mixer[3]), "dsa");
}

TEST(ModelConfig, TinyK3FixtureLayout) {
  auto c = load_model_config(kFix / "k3-tiny-a/hf");
  EXPECT_EQ(c.arch, Arch::kimi_k3);
  ASSERT_EQ(c.n_layers, 6);
  std::vector<Mixer> want{Mixer::kda, Mixer::kda, Mixer::kda, Mixer::mla, Mixer::kda, Mixer::mla};
  EXPECT_EQ(c.mixer, want);
  std::vector<Ffn> ffn{Ffn::dense, Ffn::moe, Ffn::moe, Ffn::moe, Ffn::moe, Ffn::moe};
  EXPECT_EQ(c.ffn, ffn);
  EXPECT_EQ(c.moe.n_experts, 32);
  EXPECT_EQ(c.moe.latent_dim, 128);
  EXPECT_EQ(c.attn_res_block, 2);
  EXPECT_EQ(c.kda_width(), 256);
  EXPECT_TRUE(c.moe.experts_mxfp4);  // quantization_config at the wrapper's top level
}

TEST(ModelConfig, KimiLinearFixtureIsNopeWithoutQLora) {
  auto c = load_model_config(kFix / "kimi_linear-a");
  EXPECT_EQ(c.arch, Arch::kimi_linear);
  EXPECT_EQ(c.tensor_prefix, "");
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_TRUE(c.mla_nope);
  EXPECT_EQ(c.rope.type, RopeType::none);
  EXPECT_FALSE(c.mla_output_gate);
  EXPECT_EQ(c.act, Activation::silu);
  EXPECT_FALSE(c.kda.has_lower_bound);
  EXPECT_FALSE(c.kda.full_rank_gate);
  std::vector<Mixer> want{Mixer::kda, Mixer::kda, Mixer::kda, Mixer::mla, Mixer::mla};
  EXPECT_EQ(c.mixer, want);
  EXPECT_EQ(c.count(Ffn::moe), 4);
  EXPECT_EQ(c.moe.n_experts, 16);
  EXPECT_EQ(c.moe.n_shared, 1);
  EXPECT_DOUBLE_EQ(c.moe.routed_scale, 2.446);
  EXPECT_EQ(c.max_positions, 4096);  // model_max_length
  EXPECT_TRUE(c.moe.experts_mxfp4);
}

TEST(ModelConfig, DeepseekV3FixtureHasYarnAndGroups) {
  auto c = load_model_config(kFix / "deepseek_v3-a/config.json");
  EXPECT_EQ(c.arch, Arch::deepseek_v3);
  EXPECT_EQ(c.count(Mixer::mla), 5);
  EXPECT_EQ(c.count(Ffn::moe), 4);
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.rope.type, RopeType::yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 50000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position, 64);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 1.0);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_EQ(c.moe.n_group, 4);
  EXPECT_EQ(c.moe.topk_group, 2);
  EXPECT_TRUE(c.moe.renormalize);
  EXPECT_DOUBLE_EQ(c.moe.routed_scale, 2.827);
  EXPECT_DOUBLE_EQ(c.rms_eps, 1e-6);
}

TEST(ModelConfig, DeepseekV3OlderRopeScalingForm) {
  auto j = fixture_json("deepseek_v3-a/config.json");
  j.erase("rope_parameters");
  j["rope_theta"] = 50000.0;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
                       {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"beta_fast", 1.0}, {"beta_slow", 1.0}};
  auto c = parse_model_config(j.dump());
  EXPECT_EQ(c.rope.type, RopeType::yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 50000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 1.0);
  EXPECT_EQ(c.rope.original_max_position, 4096);
}

TEST(ModelConfig, DeepseekV32FixtureIsAllDsa) {
  auto c = load_model_config(kFix / "deepseek_v32-a");
  EXPECT_EQ(c.arch, Arch::deepseek_v32);
  EXPECT_EQ(c.count(Mixer::dsa), 5);
  EXPECT_EQ(c.index_n_heads, 2);
  EXPECT_EQ(c.index_head_dim, 32);
  EXPECT_EQ(c.index_topk, 8);
}

TEST(ModelConfig, Qwen3FixtureIsGqaDenseTied) {
  auto c = load_model_config(kFix / "qwen3-a");
  EXPECT_EQ(c.arch, Arch::qwen3);
  EXPECT_EQ(c.count(Mixer::gqa), 4);
  EXPECT_EQ(c.count(Ffn::dense), 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope.type, RopeType::default_);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_FALSE(c.rope.interleaved);
  EXPECT_FALSE(c.moe.experts_mxfp4);
}

TEST(ModelConfigErrors, UnknownModelTypeNamesValueAndSupported) {
  expect_config_error(fixture_json("qwen3-a/config.json"), [](auto& j) { j["model_type"] = "llama"; },
                      {"model_type", "llama", "kimi_k3", "qwen3"});
}

TEST(ModelConfigErrors, MissingFieldIsNamedWithItsPath) {
  expect_config_error(fixture_json("k3-tiny-a/hf/config.json"), [](auto& j) { j["text_config"].erase("hidden_size"); },
                      {"text_config.hidden_size", "missing"});
  expect_config_error(fixture_json("deepseek_v3-a/config.json"), [](auto& j) { j.erase("n_routed_experts"); },
                      {"n_routed_experts", "missing"});
}

TEST(ModelConfigErrors, WrongJsonTypeIsNamed) {
  expect_config_error(fixture_json("qwen3-a/config.json"), [](auto& j) { j["num_hidden_layers"] = "four"; },
                      {"num_hidden_layers", "integer"});
  expect_config_error(fixture_json("kimi_linear-a/config.json"), [](auto& j) { j["moe_renormalize"] = 1; },
                      {"moe_renormalize"});
}

TEST(ModelConfigErrors, LayerInBothKdaAndFullAttentionLists) {
  expect_config_error(fixture_json("k3-tiny-a/hf/config.json"),
                      [](auto& j) { j["text_config"]["linear_attn_config"]["full_attn_layers"] = {3, 4, 6}; },
                      {"full_attn_layers", "layer 3", "kda_layers"});
}

TEST(ModelConfigErrors, LayerInNeitherList) {
  expect_config_error(fixture_json("k3-tiny-a/hf/config.json"),
                      [](auto& j) { j["text_config"]["linear_attn_config"]["kda_layers"] = {1, 2, 3}; },
                      {"layer 5", "neither"});
}

TEST(ModelConfigErrors, LayerListOutOfRangeSaysOneIndexed) {
  expect_config_error(fixture_json("k3-tiny-a/hf/config.json"),
                      [](auto& j) { j["text_config"]["linear_attn_config"]["kda_layers"] = {0, 1, 2, 3, 5}; },
                      {"kda_layers", "1-indexed"});
  expect_config_error(fixture_json("kimi_linear-a/config.json"),
                      [](auto& j) { j["linear_attn_config"]["full_attn_layers"] = {4, 5, 6}; },
                      {"linear_attn_config.full_attn_layers", "layer 6"});
}

TEST(ModelConfigErrors, TopKAboveExpertCount) {
  expect_config_error(fixture_json("kimi_linear-a/config.json"), [](auto& j) { j["num_experts_per_token"] = 17; },
                      {"num_experts_per_token", "17"});
  expect_config_error(fixture_json("deepseek_v3-a/config.json"), [](auto& j) { j["topk_group"] = 5; },
                      {"topk_group"});
}

TEST(ModelConfigErrors, InconsistentHeadDims) {
  expect_config_error(fixture_json("deepseek_v3-a/config.json"), [](auto& j) { j["qk_head_dim"] = 40; },
                      {"qk_head_dim", "40"});
  expect_config_error(fixture_json("kimi_linear-a/config.json"), [](auto& j) { j["linear_num_heads"] = 3; },
                      {"linear_num_heads", "linear_attn_config.num_heads"});
  expect_config_error(fixture_json("qwen3-a/config.json"), [](auto& j) { j["num_key_value_heads"] = 3; },
                      {"num_key_value_heads"});
}

TEST(ModelConfigErrors, LayerTypesDisagreeWithLayout) {
  expect_config_error(fixture_json("deepseek_v32-a/config.json"), [](auto& j) { j["layer_types"][2] = "full_attention"; },
                      {"layer_types", "entry 2"});
  expect_config_error(fixture_json("kimi_linear-a/config.json"), [](auto& j) { j["mlp_layer_types"][0] = "sparse"; },
                      {"mlp_layer_types"});
}

TEST(ModelConfigErrors, K31DsaLayerAlsoKda) {
  expect_config_error(fixture_json("configs/kimi-k31-pro-config.json"),
                      [](auto& j) { j["text_config"]["dsa_config"]["dsa_layers"].push_back(1); },
                      {"dsa_config.dsa_layers", "layer 1"});
  expect_config_error(fixture_json("configs/kimi-k31-pro-config.json"),
                      [](auto& j) { j["text_config"]["dsa_config"].erase("index_topk"); },
                      {"text_config.dsa_config.index_topk", "missing"});
}

TEST(ModelConfigErrors, UnsupportedQuantizationAndActivation) {
  expect_config_error(fixture_json("deepseek_v3-a/config.json"),
                      [](auto& j) { j["quantization_config"] = {{"quant_method", "fp8"}}; },
                      {"quantization_config.quant_method", "fp8"});
  expect_config_error(fixture_json("qwen3-a/config.json"), [](auto& j) { j["hidden_act"] = "gelu"; },
                      {"hidden_act", "gelu"});
}

TEST(ModelConfigErrors, InvalidJsonAndMissingFile) {
  EXPECT_THROW(parse_model_config("{ not json"), ConfigError);
  EXPECT_THROW(load_model_config(kFix / "no-such-dir/config.json"), ConfigError);
}
