// A prepared model whose experts are all kept in memory (FileExperts, the plan's choice when they fit)
// hands every routed expert matrix, once loaded, to Backend::prepare_expert_weights in one call (the CUDA
// back-end lays them out as mxfp4 tiles there, kernels/cuda/matmul_mxt.cuh), and a streamed one never
// does (the device cache holds rows). ResidentExperts (checkpoints) is covered in
// tests/kernels/cpu/moe_calls_test.cpp.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "actors/runtime/model_loader.hpp"
#include "io/formats/model_config.hpp"
#include "io/store/expert_store_prepare.hpp"
#include "kernels/backend.hpp"
#include "tests/kernels/cpu/counting_backend.hpp"

namespace ferry::test {
namespace {

namespace fs = std::filesystem;

TEST(FileExperts, APreparedModelInMemoryHandsEveryExpertMatrixToPrepareExpertWeightsOnce) {
  const fs::path root = fs::temp_directory_path() / ("ferry-file-experts-" + std::to_string(::getpid()));
  fs::remove_all(root);
  PrepareOptions p;
  p.checkpoint = fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
  p.out = root / "model";
  p.expert_dirs = {root / "nvme0"};
  p.progress = false;
  prepare_model(p);
  const ModelConfig cfg = load_model_config(p.checkpoint);
  ModelOptions o;
  o.dir = p.out.string();
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  auto counting = std::make_unique<CountingBackend>(*cpu);
  CountingBackend* be = counting.get();
  {
    LoadedModel m = load_model(o, nullptr, std::move(counting));
    EXPECT_EQ(be->counts["prepare_expert_weights"], 1);
    EXPECT_EQ(be->expert_prepared.size(), 3 * static_cast<size_t>(cfg.count(Ffn::moe) * cfg.moe.n_experts));
    // The model still decodes (the CPU back-end keeps rows).
    auto st = m.model->new_state(16);
    const auto logits = m.model->forward(*st, std::vector<int32_t>{1, 2, 3});
    EXPECT_FALSE(logits.empty());
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace ferry::test
