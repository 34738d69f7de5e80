// The drafter's cost gate on simulated decodes: with the CPU's costs (a block row costs nearly a plain
// step, a rejection pays a replay) and the streaming tier's (rows nearly free), at every acceptance rate
// from 0 to 100 %, gated drafting emits tokens at least 0.97x as fast as plain steps, and faster where
// acceptance allows.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "kernels/decoding/draft_cost.hpp"

using namespace ferry;

namespace {

struct Costs {
  double plain = 1.0;  // one plain step
  double row = 0.9;    // each further row of a block
  double replay = 0.5; // per kept row re-run after a rejection (KDA state rollback)
  double call = 0.0;   // one drafter call
  double offer = 1.0;  // probability that a call offers drafts (an n-gram drafter often has none)
};

// Emits `tokens` tokens with the gate deciding; drafts are accepted with probability `a` each (a chain).
// Returns plain time / gated time: the speed ratio to plain decoding.
double simulate(const Costs& c, double a, int tokens, uint64_t seed) {
  DraftCostModel gate(15);
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution accept(a), offers(c.offer);
  double t = 0;
  int out = 0;
  while (out < tokens) {
    size_t k = gate.choose(std::min<size_t>(15, size_t(tokens - out - 1 > 0 ? tokens - out - 1 : 0)));
    if (k > 0) {
      const bool offered = offers(rng);
      gate.asked(c.call, offered);
      t += c.call;
      if (!offered) k = 0;
    }
    if (k == 0) {
      gate.plain_step(c.plain);
      t += c.plain;
      ++out;
      continue;
    }
    size_t acc = 0;
    while (acc < k && accept(rng)) ++acc;
    const double bt = c.plain + c.row * double(k) + (acc < k ? c.replay * double(acc + 1) : 0.0);
    gate.block(k, acc, bt);
    t += bt;
    out += int(acc) + 1;
  }
  return double(out) * c.plain / t;
}

}  // namespace

TEST(DraftCostModel, NeverCostsMoreThanThreePercentAtAnyAcceptanceOnCpuCosts) {
  for (double a : {0.0, 0.25, 0.5, 0.75, 0.9, 1.0}) {
    const double r = simulate(Costs{}, a, 512, 7);
    std::printf("cpu costs, acceptance %.2f: %.3fx plain\n", a, r);
    EXPECT_GE(r, 0.97) << "acceptance " << a;
    // Rows at 0.9 of a step: only all-accepted blocks pay ((k + 1) / (1 + 0.9 k) = 1.10 at k = 15).
    if (a == 1.0) {
      EXPECT_GT(r, 1.05) << "every draft accepted: blocks pay, the gate must use them";
    }
  }
}

TEST(DraftCostModel, StreamingCostsDraftAtModestAcceptance) {
  const Costs streaming{1.0, 0.02, 0.05};  // expert bytes dominate: a row is almost free
  for (double a : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const double r = simulate(streaming, a, 512, 11);
    std::printf("streaming costs, acceptance %.2f: %.3fx plain\n", a, r);
    EXPECT_GE(r, 0.97) << "acceptance " << a;
    if (a >= 0.25) {
      EXPECT_GT(r, 1.1) << "acceptance " << a;
    }
  }
}

// A drafter that is slow to ask and rarely offers (the n-gram drafter on the CPU: a call ~0.3 of a step,
// a match 10 % of the time) is asked only at the probes; one that is cheap to ask (the streaming tier:
// a call ~1 % of a step) is asked every step and pays whenever it offers.
TEST(DraftCostModel, TheCostOfAskingIsWeighedAgainstHowOftenTheDrafterOffers) {
  Costs cpu_ngram;
  cpu_ngram.call = 0.3;
  cpu_ngram.offer = 0.1;
  Costs streaming_ngram{1.0, 0.02, 0.05, 0.01, 0.1};
  for (double a : {0.0, 0.5, 1.0}) {
    const double r = simulate(cpu_ngram, a, 512, 13);
    std::printf("cpu, slow drafter offering 10 %%, acceptance %.2f: %.3fx plain\n", a, r);
    EXPECT_GE(r, 0.97) << "acceptance " << a;
    const double s = simulate(streaming_ngram, a, 512, 17);
    std::printf("streaming, cheap drafter offering 10 %%, acceptance %.2f: %.3fx plain\n", a, s);
    EXPECT_GE(s, 0.97) << "acceptance " << a;
    if (a >= 0.5) {
      EXPECT_GT(s, 1.03) << "acceptance " << a << ": the 10 % of steps with drafts pay";
    }
  }
}

TEST(DraftCostModel, ProbesBackOffWhenDraftingNeverPays) {
  DraftCostModel g(15);
  g.plain_step(1.0);
  size_t probes = 0;
  for (int i = 0; i < 4000; ++i) {
    const size_t k = g.choose(15);
    if (k == 0) {
      g.plain_step(1.0);
      continue;
    }
    ++probes;
    g.block(k, 0, 1.0 + 0.9 * double(k) + 0.5);
  }
  EXPECT_LE(probes, 8u) << "the first probe, then spacing 32, 64, ... 1024";
  EXPECT_GE(probes, 2u) << "a drafter that starts paying later must still be noticed";
}

TEST(DraftCostModel, EstimatesUnmeasuredBlockCostsFromALineThroughMeasuredOnes) {
  DraftCostModel g(15);
  EXPECT_EQ(g.choose(4), 0u) << "no plain step measured yet";
  g.plain_step(1.0);
  EXPECT_EQ(g.choose(4), 1u) << "first a 2-row probe";
  g.block(1, 1, 1.2);
  EXPECT_NEAR(g.block_seconds(5), 2.0, 1e-9);
  EXPECT_NEAR(g.expected_tokens(0), 1.0, 1e-9);
  EXPECT_NEAR(g.acceptance(), 0.75, 1e-9);
  EXPECT_EQ(g.choose(15), 3u) << "rows at 0.2 of a step, p = 0.75: E(k) / (1 + 0.2 k) peaks at k = 3";
  for (int i = 0; i < 3; ++i) g.block(1, 0, 2.0);  // rejected, with a replay: slower
  EXPECT_EQ(g.choose(15), 0u) << "p = 1.5 / 5 = 0.3, T(1) ~1.6: E(k) / T(k) stays under a plain step's 1";
}

// A plain step measured while the machine was busy (here 3x its real cost) makes a losing drafter look
// worth it; blocks win, so no plain step would ever correct it. While drafting, every kPlainRefresh-th
// choice is a plain step: T0 is measured again and the gate stops drafting (before this, a CI machine
// running other tests kept a drafter whose every first draft was wrong at 163 blocks of 200 tokens).
TEST(DraftCostModel, AStalePlainTimeIsMeasuredAgainWhileDraftingAndALosingDrafterStops) {
  DraftCostModel g(15);
  g.plain_step(3.0);  // busy machine
  size_t blocks = 0, late_blocks = 0;
  for (int i = 0; i < 400; ++i) {
    const size_t k = g.choose(1);
    if (k == 0) {
      g.plain_step(1.0);  // what a plain step costs now
      continue;
    }
    ++blocks;
    if (i >= 100) ++late_blocks;
    g.block(k, 0, 2.0);  // 2 rows, the draft rejected, a replay: twice a plain step, one token
  }
  EXPECT_LE(late_blocks, 4u) << "after the refresh only rare probes remain (blocks in all: " << blocks << ")";
  EXPECT_NEAR(g.plain_seconds(), 1.0, 0.05) << "T0 is today's";
}

// A block that costs what a plain step costs and whose draft is always wrong gains nothing, but the
// acceptance estimate's prior keeps E(1) a little over 1, and plain steps timed on a busy machine make
// it look like a win. Drafting must promise kMinGain (3 %) over plain: such a drafter stops after its
// estimate falls, instead of being verified at most steps (what ctest -j2 under load showed: 33 blocks
// of 200 tokens from an always-wrong drafter).
TEST(DraftCostModel, ABlockThatOnlyBreaksEvenIsNotRepeated) {
  DraftCostModel g(15);
  g.plain_step(1.0);
  std::mt19937_64 rng(5);
  std::bernoulli_distribution busy(0.2);
  size_t blocks = 0;
  for (int i = 0; i < 400; ++i) {
    const size_t k = g.choose(1);
    if (k == 0) {
      g.plain_step(busy(rng) ? 2.0 : 1.0);  // now and then the machine is busy
      continue;
    }
    ++blocks;
    g.block(k, 0, 1.0);  // as fast as a plain step, one token
  }
  EXPECT_LE(blocks, 20u) << "a break-even block is not worth repeating";
  EXPECT_LT(g.block_gain(1), 1.03);
}
