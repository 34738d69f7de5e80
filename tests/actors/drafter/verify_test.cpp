// Exactness of speculative decoding (DESIGN.md "Exactness"): with the drafter on, every position's
// token and logits hash equal plain decoding's, on k3-tiny-a (KDA + MLA + latent MoE), whatever the
// drafter proposes. Drafters run in-process here; drafter_bridge_test.cpp runs them as a sidecar.
#include <cstring>

#include "actors/drafter/sidecar/drafter_core.hpp"
#include "tests/actors/drafter/drafter_util.hpp"

namespace ferry::test {
namespace {

ProposeFn fn(Drafter& d) {
  return [&d](std::span<const int32_t> h, int k, float g) -> std::optional<DraftProposal> { return d.propose(h, k, g); };
}

std::unique_ptr<Drafter> replay(const std::string& opts, int64_t n) {
  ReplayOptions o = parse_replay_spec("mem" + opts);
  return make_replay_drafter(K3::get().sequence(n), o);
}

class ReplayLength : public ::testing::TestWithParam<int64_t> {};

TEST_P(ReplayLength, LogitHashesIdenticalWithDrafterOffAndOn) {
  K3& k = K3::get();
  const int64_t n = GetParam();
  auto d = replay(",rate=0.8,len=8,seed=5", n);
  SpecStats st;
  const auto got = k.spec(n, fn(*d), st);
  EXPECT_EQ(0, mismatches(k.ref(n), got));
  EXPECT_GT(st.full, 0);
  EXPECT_GT(st.partial + st.zero, 0);  // rejections happened and were rolled back
  EXPECT_LT(st.blocks + st.plain_steps, n / 2) << "blocks must save model passes";
}
INSTANTIATE_TEST_SUITE_P(Tokens, ReplayLength, ::testing::Values(128, 200, 512));

class ForcedRejection : public ::testing::TestWithParam<std::string> {};

TEST_P(ForcedRejection, RejectedDraftAtThatIndexLeavesOutputUnchanged) {
  K3& k = K3::get();
  auto d = replay(",len=6,reject=" + GetParam(), 128);
  SpecStats st;
  const auto got = k.spec(128, fn(*d), st);
  EXPECT_EQ(0, mismatches(k.ref(128), got));
  EXPECT_EQ(st.full, 0) << "every block has a forced wrong draft";
  if (GetParam() == "first") {
    EXPECT_EQ(st.accepted, 0);
  }
  if (GetParam() == "last") {
    EXPECT_GT(st.partial, 0);
  }
}
INSTANTIATE_TEST_SUITE_P(Index, ForcedRejection, ::testing::Values("first", "middle", "last"));

TEST(Speculative, ShortProposalsAndGateCutsMatchPlain) {
  K3& k = K3::get();
  auto shorter = replay(",len=2", 200);
  SpecStats a;
  EXPECT_EQ(0, mismatches(k.ref(200), k.spec(200, fn(*shorter), a)));
  EXPECT_LE(a.drafts, 2 * a.blocks);
  EXPECT_GE(a.drafts, 2 * a.blocks - 1);  // the last block may be shorter
  // Draft index 1 has confidence 0.05: a fixed gate of 0.5 cuts every proposal to one draft.
  auto low = replay(",lowconf=1", 200);
  SpecParams sp;
  sp.gate = {false, 0.5f};
  SpecStats b;
  EXPECT_EQ(0, mismatches(k.ref(200), k.spec(200, fn(*low), b, {}, sp)));
  EXPECT_EQ(b.drafts, b.blocks);
  // lowconf=0: nothing passes the gate, every step is plain.
  auto none = replay(",lowconf=0", 128);
  SpecStats c;
  EXPECT_EQ(0, mismatches(k.ref(128), k.spec(128, fn(*none), c, {}, sp)));
  EXPECT_EQ(c.blocks, 0);
  EXPECT_EQ(c.plain_steps, 127);
}

// The cost gate (SpecParams::cost_gate, `--draft-cost-gate`, on by default in every front-end): a drafter
// whose every first draft is wrong makes each block slower than a plain step (more rows, a KDA replay,
// nothing gained), so after a probe the gate keeps steps plain without even asking the drafter; a drafter
// that is always right is still probed and used. The tokens and logits are plain decoding's either way.
TEST(Speculative, CostGateStopsAskingADrafterThatNeverHelpsAndKeepsTheTokens) {
  K3& k = K3::get();
  const int64_t n = 200;
  SpecParams gated;
  gated.gate = {false, 0.0f};
  gated.cost_gate = true;
  auto wrong = replay(",len=6,reject=first", n);
  SpecStats w;
  EXPECT_EQ(0, mismatches(k.ref(n), k.spec(n, fn(*wrong), w, {}, gated)));
  std::printf("[cost gate, always wrong] blocks %lld, drafter calls %lld, plain steps %lld (%lld gated)\n",
              static_cast<long long>(w.blocks), static_cast<long long>(w.calls), static_cast<long long>(w.plain_steps),
              static_cast<long long>(w.cost_gated));
  EXPECT_EQ(w.accepted, 0);
  EXPECT_GT(w.blocks, 0) << "the gate probes before it judges";
  EXPECT_LT(w.blocks, n / 8) << "blocks that never pay are not repeated";
  EXPECT_GT(w.cost_gated, n / 2);
  EXPECT_LT(w.calls, n / 4) << "a gated step does not call the drafter";
  // Without the gate the same drafter is verified at every step.
  SpecParams ungated = gated;
  ungated.cost_gate = false;
  SpecStats u;
  EXPECT_EQ(0, mismatches(k.ref(n), k.spec(n, fn(*wrong), u, {}, ungated)));
  EXPECT_GT(u.blocks, n / 2);
  EXPECT_EQ(u.cost_gated, 0);
  auto right = replay("", n);
  SpecStats r;
  EXPECT_EQ(0, mismatches(k.ref(n), k.spec(n, fn(*right), r, {}, gated)));
  EXPECT_GT(r.accepted, 0) << "a drafter that is always right is probed and its drafts accepted";
  EXPECT_EQ(r.partial + r.zero, 0);
}

TEST(Speculative, NgramDrafterMatchesPlainOver512Tokens) {
  K3& k = K3::get();
  auto d = make_ngram_drafter(4);
  SpecStats st;
  EXPECT_EQ(0, mismatches(k.ref(512), k.spec(512, fn(*d), st)));  // adaptive gate
  std::printf("[ngram, adaptive gate] blocks %lld accepted %lld of %lld drafts, plain steps %lld\n",
              static_cast<long long>(st.blocks), static_cast<long long>(st.accepted),
              static_cast<long long>(st.drafts), static_cast<long long>(st.plain_steps));
  // No gate: every lookup is verified, most are rejected and rolled back.
  SpecStats all;
  EXPECT_EQ(0, mismatches(k.ref(128), k.spec(128, fn(*d), all, {}, SpecParams{4, {false, 0.0f}})));
  EXPECT_GT(all.blocks, 10);
  EXPECT_GT(all.partial + all.zero, 0);
}

TEST(Speculative, SampledDecodingWithSeedMatchesPlain) {
  K3& k = K3::get();
  auto s = k.model->new_state(400);
  GenerateParams gp;
  gp.n_predict = 128;
  gp.sampling = {0.8f, 0.95f, 42};
  GenerateMetrics g;
  const auto want = generate(*k.model, *s, k.prompt, gp, g);
  std::vector<int32_t> seq = k.prompt;
  for (auto& t : want) seq.push_back(t.id);
  auto d = make_replay_drafter(seq, parse_replay_spec("mem,rate=0.8,len=6"));
  auto s2 = k.model->new_state(400);
  SpecStats st;
  const auto got = generate_speculative(*k.model, *s2, k.prompt, gp, SpecParams{}, fn(*d), g, st);
  EXPECT_EQ(0, mismatches(want, got));
}

TEST(Speculative, EndOfTextInsideABlockEndsGenerationThere) {
  K3& k = K3::get();
  const std::vector<GeneratedToken> pl = k.ref(128);
  // A stop id first emitted at plain position j: a replay block covering j must end there.
  size_t j = 40;
  auto first = [&](size_t i) {
    for (size_t q = 0; q < i; ++q)
      if (pl[q].id == pl[i].id) return false;
    return true;
  };
  while (j + 10 < pl.size() && !first(j)) ++j;
  ASSERT_TRUE(first(j)) << "no token first seen between positions 40 and 118";
  const int32_t eot = pl[j].id;
  const auto want = k.plain(512, {eot});
  ASSERT_EQ(want.size(), j + 1);
  auto d = replay("", 128);
  SpecStats st;
  const auto got = k.spec(512, fn(*d), st, {eot});
  EXPECT_EQ(0, mismatches(want, got));
  EXPECT_GT(st.blocks, 0);

  // The same directly on one block: drafts run past the stop, emission stops at it.
  auto s = k.model->new_state(128);
  ForwardOptions pre;
  pre.prefill = true;
  k.model->forward(*s, k.prompt, pre);
  std::vector<int32_t> drafts;
  for (size_t i = 1; i <= 8; ++i) drafts.push_back(pl[i].id);
  Sampler sm({});
  SpecStats bs;
  const std::vector<int32_t> stop{pl[3].id};
  const BlockOutcome b = verify_block(*k.model, *s, pl[0].id, drafts, sm, stop, 100, bs);
  EXPECT_TRUE(b.stopped);
  size_t at = 1;
  while (pl[at].id != stop[0]) ++at;
  EXPECT_EQ(b.emitted.size(), at);
  EXPECT_EQ(s->len, static_cast<int64_t>(k.prompt.size() + at)) << "state rolled back to the stop row";
}

TEST(Speculative, RollbackLeavesExactlyThePlainState) {
  K3& k = K3::get();
  auto d = replay(",reject=middle,len=6", 150);
  const int64_t n = 150;
  auto sp = k.model->new_state(400), pl = k.model->new_state(400);
  GenerateParams gp;
  gp.n_predict = n;
  GenerateMetrics g;
  SpecStats st;
  generate_speculative(*k.model, *sp, k.prompt, gp, SpecParams{}, fn(*d), g, st);
  generate(*k.model, *pl, k.prompt, gp, g);
  ASSERT_EQ(sp->len, pl->len);
  const auto a = k.model->download(k.model->snapshot(*sp)), b = k.model->download(k.model->snapshot(*pl));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 0u);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4)) << "KDA layer " << i;
  // Attention caches: the next steps see the same history.
  const std::vector<int32_t> next{5, 6, 7};
  ForwardOptions all;
  all.all_logits = true;
  const auto la = k.model->forward(*sp, next, all), lb = k.model->forward(*pl, next, all);
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
}

TEST(Speculative, OutOfVocabularyDraftsNeverReachTheModel) {
  K3& k = K3::get();
  ProposeFn bad = [](std::span<const int32_t>, int n, float) {
    DraftProposal p;
    for (int i = 0; i < n; ++i) {
      p.ids.push_back(i % 2 ? 1 << 20 : -3);
      p.conf.push_back(1.0f);
    }
    return std::optional<DraftProposal>(p);
  };
  SpecStats st;
  EXPECT_EQ(0, mismatches(k.ref(64), k.spec(64, bad, st)));
  EXPECT_EQ(st.blocks, 0);
}

TEST(DraftGate, AdaptiveStartsAtNinetyAndFollowsTheLastProposal) {
  DraftGate g({true, 0.0f});
  EXPECT_FLOAT_EQ(g.threshold(), 0.9f);
  g.update(5, 5);
  EXPECT_FLOAT_EQ(g.threshold(), 0.85f);
  g.update(5, 0);
  g.update(5, 0);
  EXPECT_FLOAT_EQ(g.threshold(), 0.95f);
  for (int i = 0; i < 50; ++i) g.update(4, 4);
  EXPECT_FLOAT_EQ(g.threshold(), 0.5f);
  DraftGate fixed({false, 0.7f});
  fixed.update(3, 0);
  EXPECT_FLOAT_EQ(fixed.threshold(), 0.7f);
  EXPECT_EQ(fixed.cut({{1, 2, 3}, {0.9f, 0.6f, 0.95f}}), 1u);
}

}  // namespace
}  // namespace ferry::test
