// The memory plan (io/store/memory_plan.hpp) on K3.1's real config: what streams, how the caches are
// sized from what is left, and each refusal naming the flag to change.
#include <gtest/gtest.h>

#include "io/errors.hpp"
#include "io/formats/model_config.hpp"
#include "io/store/memory_plan.hpp"
#include "io/store/sizing.hpp"

namespace ferry {
namespace {

constexpr uint64_t GB = 1'000'000'000;

PlanRequest k31(uint64_t gpu, uint64_t host, int64_t ctx = 8192) {
  PlanRequest r;
  r.model = model_footprint(load_model_config(std::string(FERRY_FIXTURES) + "/configs/kimi-k31-pro-config.json"),
                            SpineType::q8_0);
  r.model.prepared = true;
  r.ctx = ctx;
  r.gpu = gpu > 0;
  r.gpu_free = gpu;
  r.host_available = host;
  return r;
}

TEST(MemoryPlan, K31OnAnH200StreamsWithTheGpuCacheAndHostPoolFromWhatIsLeft) {
  const MemoryPlan p = plan_memory(k31(141 * GB, 120 * GB));
  ASSERT_TRUE(p.refusal.empty()) << format_plan(p);
  EXPECT_TRUE(p.streaming) << "1.45 TB of experts cannot sit in 141 GB";
  const uint64_t slot = 17547264;
  EXPECT_EQ(p.device_cache_experts, p.device.left() / slot) << format_plan(p);
  EXPECT_GT(p.device_cache_experts, 1000u);
  EXPECT_LE(p.device.needed() + p.device_cache_experts * slot, 141 * GB);
  EXPECT_LE(p.host_pool_bytes + p.host.needed(), 120 * GB);
  EXPECT_GT(p.host_pool_experts, 5000u);
  EXPECT_EQ(p.host_pool_bytes % slot, 0u) << "whole slots";
  const std::string text = format_plan(p);
  EXPECT_NE(text.find("--ssd-streaming --cache-experts " + std::to_string(p.device_cache_experts)), std::string::npos) << text;
  EXPECT_NE(text.find("--host-pool "), std::string::npos) << text;
}

TEST(MemoryPlan, ExplicitCachesAreKeptAndCheckedAgainstWhatIsLeft) {
  PlanRequest r = k31(141 * GB, 120 * GB);
  r.cache_set = true;
  r.cache_experts = 64;
  r.host_pool_set = true;
  r.host_pool_bytes = 10 * GB;
  MemoryPlan p = plan_memory(r);
  ASSERT_TRUE(p.refusal.empty()) << p.refusal;
  EXPECT_EQ(p.device_cache_experts, 64u);
  EXPECT_EQ(p.host_pool_bytes, 10 * GB);
  r.cache_experts = 100000;
  p = plan_memory(r);
  EXPECT_NE(p.refusal.find("--cache-experts"), std::string::npos) << p.refusal;
  EXPECT_NE(p.refusal.find("or less"), std::string::npos) << p.refusal;
  r.cache_experts = 64;
  r.host_pool_bytes = 500 * GB;
  EXPECT_NE(plan_memory(r).refusal.find("--host-pool"), std::string::npos);
}

TEST(MemoryPlan, ASpineLargerThanTheGpuIsRefusedNamingTheBackEnd) {
  const MemoryPlan p = plan_memory(k31(8 * GB, 120 * GB));
  EXPECT_NE(p.refusal.find("spine"), std::string::npos) << p.refusal;
  EXPECT_NE(p.refusal.find("--backend cpu"), std::string::npos) << p.refusal;
}

TEST(MemoryPlan, AContextTooLongForTheGpuIsRefusedWithTheLongestThatFits) {
  const MemoryPlan p = plan_memory(k31(141 * GB, 120 * GB, int64_t(1) << 26));
  ASSERT_NE(p.refusal.find("use -c "), std::string::npos) << p.refusal;
  const int64_t most = std::stoll(p.refusal.substr(p.refusal.find("use -c ") + 7));
  EXPECT_GT(most, 8192);
  EXPECT_TRUE(plan_memory(k31(141 * GB, 120 * GB, most)).refusal.empty()) << "the advised -c fits";
  EXPECT_FALSE(plan_memory(k31(141 * GB, 120 * GB, most + 1000)).refusal.empty());
}

// K3.1 on the 96 GB card of the results to beat: a prompt pass over a 64K context would need far more
// activations than the card has beside the spine, so the plan runs prompts in passes of fewer tokens
// (a multiple of 64) instead of refusing the context; a context whose pass fits keeps one pass.
TEST(MemoryPlan, ALongContextRunsItsPromptInPassesInsteadOfBeingRefused) {
  EXPECT_EQ(plan_memory(k31(141 * GB, 120 * GB, 4096)).prefill_chunk, 0) << "4096 tokens fit one pass on an H200";
  PlanRequest one = k31(96 * GB, 256 * GB, 65536);
  one.prefill_chunk = 65536;
  EXPECT_NE(plan_memory(one).refusal.find("use -c "), std::string::npos) << "one pass of 64K tokens does not fit";
  const MemoryPlan p = plan_memory(k31(96 * GB, 256 * GB, 65536));
  ASSERT_TRUE(p.refusal.empty()) << format_plan(p);
  EXPECT_GE(p.prefill_chunk, 64);
  EXPECT_LT(p.prefill_chunk, 65536);
  EXPECT_EQ(p.prefill_chunk % kPrefillChunkAlign, 0);
  EXPECT_LE(p.device.needed(), 96 * GB);
  const std::string text = format_plan(p);
  EXPECT_NE(text.find("prompts in passes of " + std::to_string(p.prefill_chunk) + " tokens"), std::string::npos) << text;
  EXPECT_NE(text.find("--prefill-chunk " + std::to_string(p.prefill_chunk)), std::string::npos) << text;
  // The longest pass that fits: 64 more rows would not (with the scratch slots streaming needs).
  PlanRequest longer = k31(96 * GB, 256 * GB, 65536);
  longer.prefill_chunk = p.prefill_chunk + kPrefillChunkAlign;
  const MemoryPlan q = plan_memory(longer);
  EXPECT_GT(q.device.needed(), 96 * GB) << format_plan(q);
}

TEST(MemoryPlan, AnExplicitPrefillChunkSizesThePromptPassActivations) {
  PlanRequest r = k31(141 * GB, 120 * GB, 8192);
  const uint64_t row = uint64_t(r.model.act_bytes_per_row), ctx = uint64_t(r.model.act_bytes_per_ctx);
  r.prefill_chunk = 512;
  MemoryPlan p = plan_memory(r);
  ASSERT_TRUE(p.refusal.empty()) << p.refusal;
  EXPECT_EQ(p.prefill_chunk, 512);
  EXPECT_EQ(p.device.activations, 512 * row + 8192 * ctx);
  r.prefill_chunk = 16384;
  p = plan_memory(r);
  EXPECT_EQ(p.prefill_chunk, 0) << "a pass longer than the context is one pass";
  EXPECT_EQ(p.device.activations, 8192 * (row + ctx));
  EXPECT_EQ(format_plan(p).find("--prefill-chunk"), std::string::npos);
}

// A drafted block's rollback point and the server's prompt cache each hold a copy of the KDA state
// (0.47 GB per sequence at K3.1's width): the plan counts them.
TEST(MemoryPlan, KdaStateSnapshotsOfDrafterAndPromptCacheAreCounted) {
  PlanRequest r = k31(141 * GB, 120 * GB);
  const uint64_t one = plan_memory(r).device.state;
  EXPECT_EQ(one, uint64_t(r.model.state_bytes));
  r.state_snapshots = 2;
  EXPECT_EQ(plan_memory(r).device.state, 3 * one);
}

TEST(MemoryPlan, AllExpertsInMemoryIsRefusedWhenTheyDoNotFitNamingSsdStreaming) {
  PlanRequest r = k31(141 * GB, 120 * GB);
  r.streaming = 0;
  EXPECT_NE(plan_memory(r).refusal.find("--ssd-streaming"), std::string::npos);
}

TEST(MemoryPlan, ASmallModelStaysInMemoryUnlessStreamingIsAsked) {
  PlanRequest r;
  r.model.prepared = true;
  r.model.spine_bytes = 4'000'000;
  r.model.expert_file_bytes = 16384;
  r.model.expert_files = 160;
  r.model.experts_bytes = 160 * 13000;
  r.model.kv_bytes_per_token = 100;
  r.model.top_k = 2;
  r.host_available = 8 * GB;
  MemoryPlan p = plan_memory(r);
  ASSERT_TRUE(p.refusal.empty()) << p.refusal;
  EXPECT_FALSE(p.streaming);
  EXPECT_NE(format_plan(p).find("--no-ssd-streaming"), std::string::npos);
  r.streaming = 1;
  p = plan_memory(r);
  EXPECT_TRUE(p.streaming);
  EXPECT_EQ(p.host_pool_experts, 160u) << "CPU: the host pool holds every expert when memory allows";
  r.streaming = -1;
  r.host_available = 600'000'000;  // the margin (512 MiB) and the spine leave less than the experts
  r.model.experts_bytes = 100'000'000;
  EXPECT_TRUE(plan_memory(r).streaming) << format_plan(plan_memory(r));
}

}  // namespace
}  // namespace ferry
