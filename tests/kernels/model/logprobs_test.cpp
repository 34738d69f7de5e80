// GenerateParams::logprobs (the server's OpenAI `logprobs` / `top_logprobs`): each token carries its
// log-probability under the model and the N most likely tokens; asking for them changes no id and no
// logit hash, and a drafted run (whose tokens come from verification blocks) reports the plain run's
// numbers bit for bit.
#include <cmath>
#include <cstring>

#include "kernels/decoding/generate.hpp"
#include "kernels/decoding/verify.hpp"
#include "tests/kernels/model/fixture_util.hpp"

namespace ferry::test {
namespace {

std::vector<GeneratedToken> run(Loaded& m, const std::vector<int32_t>& prompt, int logprobs, const ProposeFn& drafter = {}) {
  auto st = m.model->new_state(256);
  GenerateParams p;
  p.n_predict = 12;
  p.logprobs = logprobs;
  GenerateMetrics gm;
  if (!drafter) return generate(*m.model, *st, prompt, p, gm);
  SpecParams sp;
  sp.gate = {false, 0.0f};
  sp.cost_gate = false;
  SpecStats ss;
  auto out = generate_speculative(*m.model, *st, prompt, p, sp, drafter, gm, ss);
  EXPECT_GT(ss.accepted, 0) << "the drafter's tokens were verified in blocks";
  return out;
}

TEST(Logprobs, EachTokenHasItsLogProbabilityAndTheMostLikelyOthersAndNothingElseChanges) {
  Loaded m = load(fixture("k3-tiny-a/hf"));
  const std::vector<int32_t> prompt{5, 77, 300, 12, 9};
  const auto plain = run(m, prompt, -1), with = run(m, prompt, 5);
  ASSERT_EQ(plain.size(), with.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    EXPECT_EQ(with[i].id, plain[i].id);
    EXPECT_EQ(with[i].logits_hash, plain[i].logits_hash);
    EXPECT_TRUE(plain[i].top.empty());
    ASSERT_EQ(with[i].top.size(), 5u);
    EXPECT_LE(with[i].logprob, 0.0f);
    // Greedy: the token is the most likely one.
    EXPECT_EQ(with[i].top[0].id, with[i].id);
    EXPECT_EQ(with[i].top[0].logprob, with[i].logprob);
    double mass = 0;
    for (size_t k = 0; k < 5; ++k) {
      mass += std::exp(double(with[i].top[k].logprob));
      if (k) {
        EXPECT_GE(with[i].top[k - 1].logprob, with[i].top[k].logprob);
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-6);
    EXPECT_GT(mass, 0.0);
  }
}

TEST(Logprobs, ADraftedRunReportsThePlainRunsLogprobsBitForBit) {
  Loaded m = load(fixture("k3-tiny-a/hf"));
  const std::vector<int32_t> prompt{5, 77, 300, 12, 9};
  const auto plain = run(m, prompt, 3);
  std::vector<int32_t> ids;
  for (const auto& t : plain) ids.push_back(t.id);
  // A drafter that always proposes the plain run's next tokens.
  ProposeFn replay = [&](std::span<const int32_t> history, int max_tokens, float) -> std::optional<DraftProposal> {
    const size_t done = history.size() - prompt.size();
    DraftProposal d;
    for (size_t k = done; k < ids.size() && d.ids.size() < size_t(max_tokens); ++k) {
      d.ids.push_back(ids[k]);
      d.conf.push_back(1.0f);
    }
    return d;
  };
  const auto drafted = run(m, prompt, 3, replay);
  ASSERT_EQ(drafted.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(drafted[i].id, plain[i].id) << i;
    EXPECT_EQ(std::memcmp(&drafted[i].logprob, &plain[i].logprob, sizeof(float)), 0) << i;
    ASSERT_EQ(drafted[i].top.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(drafted[i].top[k].id, plain[i].top[k].id) << i;
      EXPECT_EQ(std::memcmp(&drafted[i].top[k].logprob, &plain[i].top[k].logprob, sizeof(float)), 0) << i;
    }
  }
}

TEST(Logprobs, TiesAreBrokenByTheLowerIdAndTheLogSoftmaxIsExactOnKnownLogits) {
  Sampler greedy(SamplingParams{});
  const std::vector<float> logits{0.0f, 2.0f, 2.0f, std::log(2.0f)};
  const GeneratedToken t = choose_token(7, logits, greedy, 3);
  EXPECT_EQ(t.pos, 7);
  EXPECT_EQ(t.id, 1);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].id, 1);
  EXPECT_EQ(t.top[1].id, 2);
  EXPECT_EQ(t.top[2].id, 3);
  const double z = 1 + 2 * std::exp(2.0) + 2;  // sum of exp(logits)
  EXPECT_NEAR(t.logprob, 2.0 - std::log(z), 1e-6);
  EXPECT_NEAR(t.top[2].logprob, std::log(2.0) - std::log(z), 1e-6);
  EXPECT_TRUE(choose_token(0, logits, greedy, -1).top.empty());
}

}  // namespace
}  // namespace ferry::test
