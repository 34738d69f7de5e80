// How many back-end calls one decoded token costs on the K3 architecture (tests/fixtures/k3-tiny-a:
// latent MoE, SiTU, top-4 of 32 experts, 2 shared experts), counted by a decorator around the CPU
// back-end. On CUDA every call is one or more API calls of a few microseconds of host time, so this is
// the number the MoE batching work drives down; the printed table is the measurement in the report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "io/errors.hpp"
#include "io/formats/checkpoint.hpp"
#include "io/formats/model_config.hpp"
#include "kernels/model/model.hpp"
#include "tests/kernels/cpu/counting_backend.hpp"

namespace ferry {
namespace {

// k3-tiny-a on the CPU back-end behind a CountingBackend.
struct CountedK3 {
  std::filesystem::path dir = std::filesystem::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
  ModelConfig cfg = load_model_config(dir);
  std::unique_ptr<TensorSource> src = open_safetensors_checkpoint(dir);
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  test::CountingBackend be{*cpu};
  Model model{cfg, *src, be, LoadOptions{}};
};

TEST(MoeCallCount, DecodeStepRunsEachMoeLayerAsOneExpertBatchAndOneCombine) {
  CountedK3 k3;
  const ModelConfig& cfg = k3.cfg;
  test::CountingBackend& be = k3.be;
  Model& model = k3.model;
  auto st = model.new_state(64);
  ForwardOptions pre;
  pre.prefill = true;
  model.forward(*st, std::vector<int32_t>{1, 2, 3, 4, 5}, pre);

  be.counts.clear();
  model.forward(*st, std::vector<int32_t>{6});
  const int64_t moe_layers = cfg.count(Ffn::moe);
  std::printf("[moe-calls] one decode step, %lld layers (%lld MoE, top-%lld): %lld back-end calls\n",
              static_cast<long long>(cfg.n_layers), static_cast<long long>(moe_layers),
              static_cast<long long>(cfg.moe.top_k), static_cast<long long>(be.total()));
  for (const auto& [op, n] : be.counts) std::printf("[moe-calls]   %-14s %lld\n", op.c_str(), static_cast<long long>(n));
  ASSERT_GT(moe_layers, 0);
  // Resident experts arrive as one batch per layer: one expert_ffn and one combine per MoE layer,
  // and no per-rank axpy.
  EXPECT_EQ(be.counts["expert_ffn"], moe_layers);
  EXPECT_EQ(be.counts["moe_combine"], moe_layers);
  EXPECT_EQ(be.counts["axpy"], 0);
}

// Backend::set_prompt_pass brackets exactly the prompt passes (the CUDA back-end runs their matmuls on
// the tensor cores): each pass of a chunked prompt once, never a decode step or a verify block.
TEST(PromptPassFlag, ModelHoldsItForEachPromptPassAndNeverForDecodeStepsOrBlocks) {
  CountedK3 k3;
  const ModelConfig& cfg = k3.cfg;
  test::CountingBackend& be = k3.be;
  Model& model = k3.model;
  model.set_prefill_chunk(64);
  auto st = model.new_state(256);
  std::vector<int32_t> prompt(150);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + i % 50);
  ForwardOptions pre;
  pre.prefill = true;
  model.forward(*st, prompt, pre);  // passes of 64, 64 and 22 rows
  EXPECT_EQ(be.counts["prompt_pass on"], 3);
  EXPECT_EQ(be.counts["prompt_pass off"], 3);
  EXPECT_GT(be.counts["matmul (prompt)"], 0);
  EXPECT_EQ(be.counts["matmul"], 0) << "a matmul of the prompt pass ran outside it";

  be.counts.clear();
  model.forward(*st, std::vector<int32_t>{7});                 // a decode step
  model.forward(*st, std::vector<int32_t>{8, 9, 10, 11});     // a verify block
  EXPECT_EQ(be.counts["prompt_pass on"], 0);
  EXPECT_EQ(be.counts["matmul (prompt)"], 0);
  EXPECT_GT(be.counts["matmul"], 0);

  // A refused prompt (an id outside the vocabulary) never starts a pass, and leaves the flag off.
  be.counts.clear();
  EXPECT_THROW(model.forward(*st, std::vector<int32_t>{1, static_cast<int32_t>(cfg.vocab)}, pre), LimitError);
  EXPECT_EQ(be.counts["prompt_pass on"], 0);
  model.forward(*st, std::vector<int32_t>{12});
  EXPECT_EQ(be.counts["matmul (prompt)"], 0);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// load_spine hands Backend::prepare_matmul_weight exactly the weights that only ever go to matmul (the
// CUDA back-end repacks those into q8_0 tiles, which no other op reads): with the decorator marking
// every q8_0 weight it is handed and unmarking it in matmul alone, a prompt pass, decode steps (MLA's
// kv_b goes to matmul_heads there) and a block of rows run through the CPU back-end, which refuses a
// marked weight anywhere else, and give the logits of the same model unmarked.
TEST(PrepareMatmulWeight, OnlyWeightsThatGoToMatmulAreHandedOverAndLogitsStayTheSame) {
  const std::filesystem::path dir = std::filesystem::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
  const ModelConfig cfg = load_model_config(dir);
  const auto src = open_safetensors_checkpoint(dir);
  LoadOptions lo;
  lo.spine_type = SpineType::q8_0;
  auto run = [&](bool mark, size_t* prepared) {
    std::unique_ptr<Backend> cpu = make_cpu_backend(1);
    test::CountingBackend be{*cpu};
    be.mark_prepared = mark;
    Model model{cfg, *src, be, lo};
    if (prepared) *prepared = be.prepared.size();
    auto st = model.new_state(64);
    ForwardOptions pre;
    pre.prefill = true;
    std::vector<float> out = model.forward(*st, std::vector<int32_t>{1, 2, 3, 4, 5}, pre);
    for (int32_t id : {6, 7}) {
      const auto l = model.forward(*st, std::vector<int32_t>{id});
      out.insert(out.end(), l.begin(), l.end());
    }
    const auto b = model.forward(*st, std::vector<int32_t>{8, 9, 10});
    out.insert(out.end(), b.begin(), b.end());
    return out;
  };
  size_t prepared = 0;
  const auto plain = run(false, nullptr);
  const auto marked = run(true, &prepared);
  // k3-tiny-a hands over several matrices per layer (the mixer's projections, the shared experts, the
  // latent pair) and lm_head.
  EXPECT_GT(prepared, static_cast<size_t>(cfg.n_layers) * 3);
  ASSERT_EQ(marked.size(), plain.size());
  EXPECT_EQ(std::memcmp(marked.data(), plain.data(), plain.size() * sizeof(float)), 0);
}

// Resident experts (ResidentExperts, built by Model when no expert source is given) hand every routed
// expert matrix to Backend::prepare_expert_weights exactly once, in one call, after all are loaded (the
// CUDA back-end lays them out as mxfp4 tiles there; the CPU back-end keeps them).
TEST(PrepareExpertWeights, ResidentExpertsHandOverEveryMatrixOnceAfterLoading) {
  const std::filesystem::path dir = std::filesystem::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
  const ModelConfig cfg = load_model_config(dir);
  const auto src = open_safetensors_checkpoint(dir);
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  test::CountingBackend be{*cpu};
  Model model{cfg, *src, be, LoadOptions{}};
  EXPECT_EQ(be.counts["prepare_expert_weights"], 1);
  const size_t want = 3 * static_cast<size_t>(cfg.count(Ffn::moe) * cfg.moe.n_experts);
  ASSERT_GT(want, 0u);
  EXPECT_EQ(be.expert_prepared.size(), want);
  std::vector<const void*> seen = be.expert_prepared;
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "a matrix was handed over twice";
  EXPECT_EQ(std::count(seen.begin(), seen.end(), nullptr), 0);
}

}  // namespace
}  // namespace ferry
