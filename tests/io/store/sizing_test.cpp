#include <gtest/gtest.h>

#include "io/errors.hpp"
#include "io/formats/model_config.hpp"
#include "io/store/sizing.hpp"

namespace ferry {
namespace {

const std::string kConfigs = std::string(FERRY_FIXTURES) + "/configs/";

TEST(Sizing, K31ReproducesThePublished33792BytesPerTokenAnd043GBKdaState) {
  const auto s = size_model(load_model_config(kConfigs + "kimi-k31-pro-config.json"));
  EXPECT_EQ(s.n_kda, 69);
  EXPECT_EQ(s.n_dsa, 24);
  EXPECT_EQ(s.n_mla, 0);
  EXPECT_EQ(s.n_moe, 92);
  EXPECT_EQ(s.kv_bytes_per_token, 33792);  // 24 x (512 + 64) x 2 + 24 x 128 x 2
  EXPECT_EQ(s.kda_state_bytes, int64_t(69) * 96 * 128 * 128 * 4);
  const auto text = sizing_report(s, {});
  EXPECT_NE(text.find("KV cache       33,792 B per token"), std::string::npos) << text;
  EXPECT_NE(text.find("KDA state      0.43 GB per sequence"), std::string::npos) << text;
}

TEST(Sizing, K31ExpertFilesMatchTheSpec) {
  const auto s = size_model(load_model_config(kConfigs + "kimi-k31-pro-config.json"));
  EXPECT_EQ(s.expert_bytes, 17547264);
  EXPECT_EQ(s.expert_file_bytes, 17547264) << "4,284 x 4096: no padding";
  EXPECT_EQ(s.expert_files, 82432);
  EXPECT_EQ(format_bytes(s.experts_total_bytes), "1.45 TB");
  // 2.72 T parameters are routed MXFP4 (MODEL_SPEC §14).
  ASSERT_FALSE(s.by_dtype.empty());
  int64_t mx = 0;
  for (const auto& d : s.by_dtype)
    if (d.dtype.rfind("mxfp4", 0) == 0) mx = d.params;
  EXPECT_EQ(mx, int64_t(82432) * 33030144);
}

TEST(Sizing, K3HasMlaWhereK31HasDsaAndNoIndexerKey) {
  const auto s = size_model(load_model_config(kConfigs + "kimi-k3-config.json"));
  EXPECT_EQ(s.n_mla, 24);
  EXPECT_EQ(s.n_dsa, 0);
  EXPECT_EQ(s.kv_bytes_per_token, 24 * 576 * 2);
}

TEST(Sizing, MemoryTableHasFourContextsTimesTwoSequenceCountsAndFitsOnAGpu) {
  const auto s = size_model(load_model_config(kConfigs + "kimi-k31-pro-config.json"));
  FitInput in;
  in.gpu_mem = int64_t(parse_size("96GiB"));
  in.host_mem = int64_t(parse_size("256GiB"));
  const auto rows = memory_table(s, in);
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_EQ(rows[0].context, 32768);
  EXPECT_EQ(rows[7].context, 1048576);
  EXPECT_EQ(rows[7].seqs, 8);
  EXPECT_EQ(rows[0].kv_bytes, int64_t(32768) * 33792);
  EXPECT_EQ(rows[1].state_bytes, 8 * (s.kda_state_bytes + s.conv_state_bytes));
  EXPECT_TRUE(rows[0].fits);
  EXPECT_GT(rows[0].gpu_expert_slots, 0);
  EXPECT_FALSE(rows[7].fits) << "8 x 1M tokens x 33,792 B = 283 GB";
  EXPECT_EQ(host_expert_slots(s, in), int64_t(parse_size("256GiB")) / 17547264);
  in.host_mem = int64_t(parse_size("4TiB"));
  EXPECT_EQ(host_expert_slots(s, in), 82432) << "capped at all experts";
  const auto j = sizing_json(s, in);
  EXPECT_EQ(j["kv_bytes_per_token"], 33792);
  EXPECT_EQ(j["memory"].size(), 8u);
}

TEST(Sizing, SpineTypeRuleKeepsRouterAndVectorsF32) {
  EXPECT_EQ(spine_tensor_type("model.layers.1.mlp.gate.weight", {16, 128}, SpineType::q8_0), GgmlType::f32);
  EXPECT_EQ(spine_tensor_type("model.layers.1.mlp.gate_proj.weight", {64, 128}, SpineType::q8_0), GgmlType::q8_0);
  EXPECT_EQ(spine_tensor_type("x.self_attention_res_proj.weight", {1, 256}, SpineType::q8_0), GgmlType::f32);
  EXPECT_EQ(spine_tensor_type("x.q_conv1d.weight", {256, 1, 4}, SpineType::bf16), GgmlType::f32);
  EXPECT_EQ(spine_tensor_type("x.o_proj.weight", {256, 48}, SpineType::bf16), GgmlType::f32) << "48 % 32 != 0";
  EXPECT_EQ(spine_tensor_type("x.o_proj.weight", {256, 64}, SpineType::bf16), GgmlType::bf16);
}

TEST(ParseSize, GbIsDecimalGibIsBinaryAndBothSpellingsReadBack) {
  EXPECT_EQ(parse_size("96GiB"), uint64_t(96) << 30);
  EXPECT_EQ(parse_size("96GB"), uint64_t(96'000'000'000));
  EXPECT_EQ(parse_size("96 gb"), uint64_t(96'000'000'000));
  EXPECT_EQ(parse_size("1.5TiB"), uint64_t(3) << 39);
  EXPECT_EQ(parse_size("512MiB"), uint64_t(512) << 20);
  EXPECT_EQ(parse_size("4096B"), 4096u);
  EXPECT_EQ(parse_size("2KB"), 2000u);
  for (uint64_t b : {uint64_t(17'500'000), uint64_t(1'450'000'000'000), uint64_t(512)})
    EXPECT_EQ(parse_size(format_bytes(int64_t(b))), b) << "a printed size reads back: " << format_bytes(int64_t(b));
  EXPECT_EQ(parse_size(size_flag_value(118'430'123'456)), 118'430'000'000u);
}

TEST(ParseSize, BareNumbersOneLetterUnitsAndNonsenseAreRefusedNamingTheFlag) {
  auto message = [](const std::string& text) {
    try {
      parse_size(text, "--host-pool");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("96").find("bare number"), std::string::npos) << message("96");
  EXPECT_NE(message("96G").find("GB (decimal) or GiB (binary)"), std::string::npos) << message("96G");
  EXPECT_NE(message("96").find("--host-pool"), std::string::npos);
  for (const char* bad : {"lots", "5X", "-1GB", "nanGB", "infGB", "0x10GB", "1e30TB", "GB", ""})
    EXPECT_NE(message(bad), "accepted") << bad;
}

}  // namespace
}  // namespace ferry
