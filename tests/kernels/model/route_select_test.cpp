// The model's routing through a back-end that selects itself (Backend::route_select_start, CUDA's device_route):
// a back-end that takes the call gets the same logits, bit for bit, as the host's selection from downloaded
// scores, for K3's rule and DeepSeek-V3's groups, in a 70-row prompt pass (the host side fans out over threads
// from 64 rows) and in decode steps. The stand-in back-end is the CPU's, behind the timing decorator, answering
// route_select_start with route_rows (the rule the CUDA kernel is held to: RouteBits.*, Ops.RouterSelection*).
#include <filesystem>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "actors/runtime/model_loader.hpp"
#include "kernels/model/top_k.hpp"
#include "kernels/timing_backend.hpp"
#include "tests/kernels/model/fixture_util.hpp"

namespace ferry::test {
namespace {

class SelfRoutingBackend : public TimingBackend {
 public:
  using TimingBackend::TimingBackend;
  bool route_select_start(const float* scores, const float* bias, const RouteRule& rule, int64_t n,
                          uint32_t* picked_host) override {
    const size_t nk = static_cast<size_t>(n * rule.k);
    std::vector<int32_t> ids(nk);
    std::vector<float> wts(nk);
    route_rows(scores, bias, rule, 0, n, ids.data(), wts.data());  // the CPU's memory is the host's
    std::memcpy(picked_host, ids.data(), nk * sizeof(int32_t));
    std::memcpy(picked_host + nk, wts.data(), nk * sizeof(float));
    ++calls;
    rows += n;
    return true;
  }
  int calls = 0;
  int64_t rows = 0;
};

std::vector<uint64_t> hashes_of(LoadedModel& m) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 70; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 11) % (m.cfg.vocab - 1)));
  return greedy_logits_hashes(*m.model, prompt, 4, 128);
}

class RouteSelect : public ::testing::TestWithParam<std::string> {};

TEST_P(RouteSelect, ABackEndThatSelectsItselfGivesTheHostSelectionsLogitsBitForBit) {
  ModelOptions o;
  o.dir = (std::filesystem::path(FERRY_FIXTURES) / GetParam()).string();
  o.threads = 2;
  LoadedModel plain = load_model(o, nullptr);
  const auto want = hashes_of(plain);
  auto be = std::make_unique<SelfRoutingBackend>(make_backend("cpu", 2));
  SelfRoutingBackend* self = be.get();
  LoadedModel routed = load_model(o, nullptr, std::move(be));
  EXPECT_EQ(hashes_of(routed), want);
  EXPECT_GT(self->calls, 0);
  EXPECT_GE(self->rows, 70) << "the prompt pass's rows were selected by the back-end";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RouteSelect, ::testing::Values("k3-tiny-a/hf", "deepseek_v3-a"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-' || c == '/') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace ferry::test
