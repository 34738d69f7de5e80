// The checkpoint drafter (ferry's kernels on a dense Qwen3 checkpoint) against tests/fixtures/qwen3-a:
// its proposals are the reference's greedy continuation, also after rolling back its state.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "actors/drafter/sidecar/drafter_core.hpp"

namespace ferry::test {
namespace {

TEST(Qwen3Drafter, ReproducesTheFixtureGreedyIds) {
  const std::string dir = std::string(FERRY_FIXTURES) + "/qwen3-a";
  std::ifstream f(dir + "/reference.json");
  const auto ref = nlohmann::json::parse(f);
  const auto prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  const auto gen = ref.at("generated_ids").get<std::vector<int32_t>>();
  ASSERT_EQ(gen.size(), 16u);
  auto d = make_drafter("qwen3:" + dir, 1);
  EXPECT_EQ(d->vocab_size(), 512);
  const DraftProposal p = d->propose(prompt, 15, 0.0f);
  EXPECT_EQ(p.ids, std::vector<int32_t>(gen.begin(), gen.begin() + 15));
  for (float c : p.conf) {
    EXPECT_GT(c, 0.0f);
    EXPECT_LE(c, 1.0f);
  }
  // The history moves on past the drafts: the state catches up instead of starting over.
  std::vector<int32_t> h = prompt;
  h.insert(h.end(), gen.begin(), gen.begin() + 15);
  EXPECT_EQ(d->propose(h, 1, 0.0f).ids, std::vector<int32_t>{gen[15]});
  // A shorter history (a rejected block): rolled back, same answer as the first time.
  EXPECT_EQ(d->propose(prompt, 15, 0.0f).ids, p.ids);
}

TEST(Qwen3Drafter, StopsAtTheFirstTokenUnderTheGate) {
  const std::string dir = std::string(FERRY_FIXTURES) + "/qwen3-a";
  auto d = make_drafter("qwen3:" + dir, 1);
  const DraftProposal p = d->propose(std::vector<int32_t>{1, 2, 3, 4}, 15, 1.01f);
  EXPECT_EQ(p.ids.size(), 1u);  // no probability reaches 1.01
}

TEST(DrafterSpec, UnknownAndMalformedSpecsNameTheProblem) {
  EXPECT_THROW(make_drafter("magic"), std::exception);
  EXPECT_THROW(make_drafter("replay:/nonexistent.txt"), std::exception);
  EXPECT_THROW(parse_replay_spec("f,rate=x"), std::exception);
  EXPECT_THROW(parse_replay_spec("f,reject=sometimes"), std::exception);
  const ReplayOptions o = parse_replay_spec("f.txt,rate=0.5,reject=last,len=4,at=7,at=9");
  EXPECT_EQ(o.file, "f.txt");
  EXPECT_DOUBLE_EQ(o.rate, 0.5);
  EXPECT_EQ(o.len, 4);
  EXPECT_EQ(o.at, (std::vector<int64_t>{7, 9}));
}

}  // namespace
}  // namespace ferry::test
