// Helpers of the GPU tests: a CUDA and a CPU back-end side by side, inputs uploaded to both, outputs
// poisoned with NaN before each op, and error measures of the CUDA result against the CPU one.
// Every test skips (GTEST_SKIP) when this build has no CUDA back-end or the machine has no device.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "tests/kernels/cpu/test_util.hpp"
#if FERRY_WITH_CUDA
#include "kernels/cuda/kda.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_mma_launch.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/switches.hpp"
#include "kernels/cuda_backend.hpp"
#endif

namespace ferry::test {

inline bool have_cuda() {
#if FERRY_WITH_CUDA
  return cuda_available();
#else
  return false;
#endif
}

inline std::unique_ptr<Backend> cuda_backend() {
#if FERRY_WITH_CUDA
  return make_cuda_backend();
#else
  return nullptr;
#endif
}

#define FERRY_SKIP_WITHOUT_CUDA() \
  if (!::ferry::test::have_cuda()) GTEST_SKIP() << "no CUDA device (or no CUDA back-end in this build)"

// tests/fixtures, or $FERRY_FIXTURES_DIR where the binary runs away from its source tree (GPU machine).
inline std::filesystem::path gpu_fixture(const std::string& rel) {
  const char* env = std::getenv("FERRY_FIXTURES_DIR");
  return std::filesystem::path(env && *env ? env : FERRY_FIXTURES) / rel;
}

// The decode kernels on the tensor cores (kernels/cuda/matmul_dec.cuh) for every shape they take, for a
// scope (by default they run only where they were measured faster).
struct DecodeOnTensorCores {
#if FERRY_WITH_CUDA
  cuda::DecMode old;
  DecodeOnTensorCores() : old(cuda::matmul_dec_mode(cuda::DecMode::all)) {}
  ~DecodeOnTensorCores() { cuda::matmul_dec_mode(old); }
#endif
};

// Every switch that changes speed only (kernels/cuda/switches.hpp, kernels/cuda/matmul.cuh): programmatic
// launches of the small kernels, the attention and indexer kernels' wider loops, the DSA and router selections
// on the device, the q8_0 tiles' early dependents, one-launch groups (split weights too) and swizzled prompt x,
// the one-row f32 kernel, the mxfp4 tiles' x in shared memory, a prompt pass's expert waves in one launch, the
// delta rule's and the norms' variants, all on (1) or all off (0) for a scope; the defaults (each one's
// environment) again after it. Some are on by default, so tests compare all off with all on.
struct AllSameBitsSwitches {
#if FERRY_WITH_CUDA
  explicit AllSameBitsSwitches(int on = 1) { set(on); }
  ~AllSameBitsSwitches() { set(-1); }
  static void set(int on) {
    cuda::launch_pdl_tune(on);
    cuda::matmul_q8t_early_tune(on);
    cuda::matmul_q8t_prompt_swz_tune(on);
    cuda::matmul_q8t_prompt_wgmma_tune(on == 1 ? 2 : on);  // on: with the tiles' batches overlapped
    cuda::matmul_group_launch_tune(on);
    cuda::matmul_group_split_tune(on);
    cuda::matmul_mxt_xsmem_tune(on);
    cuda::matmul_mxt_lean_tune(on);
    cuda::matmul_f32_row1_tune(on);
    cuda::matmul_f32_row_bulk_tune(on);
    cuda::matmul_f32_tile_tune(on);
    cuda::attention_ilp_tune(on);
    cuda::device_select_tune(on);
    cuda::device_route_tune(on);
    cuda::attention_multi_tune(on);
    cuda::attention_split_tune(on);
    cuda::attention_reg_tune(on == 1 ? 2 : on);  // on: the shared-memory fold
    cuda::fused_ops_tune(on);
    cuda::fused_gate_tune(on);
    cuda::kda_recurrent_reg_tune(on);
    cuda::kda_fuse_tune(on == 1 ? 3 : on);  // on: both KDA decode fusions
    cuda::kda_chunked_ilp_tune(on);
    cuda::kda_chunked_cluster_tune(on);
    cuda::kda_chunked_block_tune(on);
    cuda::kda_chunked_prepass_tune(on);
    cuda::kda_chunked_walk2_tune(on);
    cuda::conv1d_chunks_tune(on);
    cuda::rownorm::row_cluster_tune(on);
    cuda::rownorm::fused_add_tune(on);
    cuda::rownorm::row_reg_inputs_tune(on);
    cuda::rownorm::row_push_tune(on);
    cuda::moe_wave_tune(on);
    cuda::moe_wave_wgmma_tune(on);
  }
#endif
};

// A buffer of the same contents on the CPU and on the GPU back-end.
struct Pair {
  Buf c, g;
  float* cpu() const { return c.get(); }
  float* gpu() const { return g.get(); }
};

class GpuOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_cuda()) return;
    gpu_ = cuda_backend().release();
    cpu_ = make_cpu_backend().release();
  }
  static void TearDownTestSuite() {
    delete gpu_;
    delete cpu_;
    gpu_ = cpu_ = nullptr;
  }
  void SetUp() override { FERRY_SKIP_WITHOUT_CUDA(); }

  static Backend& gpu() { return *gpu_; }
  static Backend& cpu() { return *cpu_; }

  static Pair both(const std::vector<float>& v) {
    Pair p{Buf(*cpu_, v.size()), Buf(*gpu_, v.size())};
    cpu_->upload(p.c, v.data(), v.size() * 4);
    gpu_->upload(p.g, v.data(), v.size() * 4);
    return p;
  }
  static Pair poisoned_pair(size_t n) { return both(poisoned(n)); }
  static std::vector<float> get(Backend& be, const float* p, size_t n) {
    std::vector<float> v(n);
    be.download(v.data(), p, n * 4);
    return v;
  }
  // (cpu result, gpu result) of a pair.
  static std::pair<std::vector<float>, std::vector<float>> results(const Pair& p) {
    return {get(*cpu_, p.cpu(), p.c.size()), get(*gpu_, p.gpu(), p.g.size())};
  }

  // Raw bytes (weights) on both back-ends; freed by the suite's owners through release().
  struct Bytes {
    void* c = nullptr;
    void* g = nullptr;
    ~Bytes() {
      if (c) cpu_->release(c);
      if (g) gpu_->release(g);
    }
  };
  static std::unique_ptr<Bytes> both_bytes(const void* data, size_t n) {
    auto b = std::make_unique<Bytes>();
    b->c = cpu_->alloc(n);
    b->g = gpu_->alloc(n);
    cpu_->upload(b->c, data, n);
    gpu_->upload(b->g, data, n);
    return b;
  }

  static Backend* gpu_;
  static Backend* cpu_;
};
inline Backend* GpuOps::gpu_ = nullptr;
inline Backend* GpuOps::cpu_ = nullptr;

// max |gpu - cpu| / max |cpu| (NaN anywhere in gpu: infinity). Prints the numbers for the report.
inline double rel_err(const char* what, const std::vector<float>& cpu, const std::vector<float>& gpu) {
  double d = 0, m = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double e = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    if (std::isnan(e)) d = INFINITY;
    else d = std::max(d, e);
    m = std::max(m, std::fabs(static_cast<double>(cpu[i])));
  }
  const double r = m > 0 ? d / m : d;
  std::printf("[gpu-op] %-28s n=%-8zu max|d| %.3g  max|d|/max|cpu| %.3g\n", what, cpu.size(), d, r);
  return r;
}

inline bool bits_equal(const char* what, const std::vector<float>& cpu, const std::vector<float>& gpu) {
  const int64_t i = first_bit_diff(cpu.data(), gpu.data(), static_cast<int64_t>(cpu.size()));
  std::printf("[gpu-op] %-28s n=%-8zu %s\n", what, cpu.size(),
              i < 0 ? "bit-identical to cpu" : ("first difference at " + std::to_string(i)).c_str());
  return cpu.size() == gpu.size() && i < 0;
}

}  // namespace ferry::test
