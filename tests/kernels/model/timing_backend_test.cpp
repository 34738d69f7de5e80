// `ferry run --profile-ops`: the timing decorator changes no bit of the output, and its report accounts
// for the ops a decode runs (matmuls by type and shape, the MoE ops) within the span it measured.
#include <filesystem>

#include <gtest/gtest.h>

#include "actors/runtime/model_loader.hpp"
#include "tests/kernels/model/fixture_util.hpp"

namespace ferry::test {
namespace {

std::vector<uint64_t> hashes_of(LoadedModel& m) {
  return greedy_logits_hashes(*m.model, {768, 84, 257, 653, 384, 526}, 6, 64);
}

TEST(TimingBackend, ProfilingChangesNoOutputAndReportsEveryOpKind) {
  ModelOptions o;
  o.dir = (std::filesystem::path(FERRY_FIXTURES) / "k3-tiny-a/hf").string();
  o.threads = 2;
  LoadedModel plain = load_model(o, nullptr);
  const auto want = hashes_of(plain);
  o.profile_ops = true;
  LoadedModel timed = load_model(o, nullptr);
  ASSERT_NE(timed.timing, nullptr);
  EXPECT_EQ(timed.timing->report().ops.size(), 0u) << "loading is not part of the profile";
  EXPECT_EQ(hashes_of(timed), want);
  const auto r = timed.timing->report();
  uint64_t matmuls = 0;
  for (const auto& [label, t] : r.ops)
    if (label.rfind("matmul ", 0) == 0) matmuls += t.calls;
  EXPECT_GT(matmuls, 0u);
  EXPECT_TRUE(r.ops.count("expert_ffn (batches of 8+, 1 row each)") ||
              r.ops.count("expert_ffn (batches of 4, 1 row each)"))
      << "the resident experts of a layer arrive as one batch; a decode step's experts have one row each";
  bool prompt_batch = false;
  for (const auto& [label, t] : r.ops)
    prompt_batch = prompt_batch ||
                   (label.rfind("expert_ffn (batches of ", 0) == 0 && label.find(", more rows)") != std::string::npos);
  EXPECT_TRUE(prompt_batch) << "the 6-token prompt pass gives some expert several rows";
  // A KDA layer's delta rule: kda_chunked in a prompt pass, kda_decode (one label for gate, rule and gated norm)
  // for decode rows.
  const uint64_t kda = r.ops.count("kda_chunked") ? r.ops.at("kda_chunked").calls : 0;
  EXPECT_EQ(r.ops.count("kda_recurrent"), 0u) << "decode rows run the delta rule inside kda_decode";
  EXPECT_EQ(r.ops.at("moe_combine").calls * 4, (r.ops.at("kda_decode").calls + kda) * 5)
      << "k3-tiny-a runs 5 MoE layers and 4 KDA layers per forward";
  EXPECT_GT(r.busy_ms, 0.0);
  EXPECT_LE(r.busy_ms, r.span_ms * 1.001);
}

}  // namespace
}  // namespace ferry::test
