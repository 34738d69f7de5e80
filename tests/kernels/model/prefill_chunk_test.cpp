// A long prompt in passes of a multiple of 64 rows (Model::set_prefill_chunk, which the memory plan
// sets when a one-pass prompt's activations do not fit) gives every logit the bits of one pass over it,
// in every family: bounding the prompt pass's memory costs no exactness. Each family's fixture runs a
// 129-token prompt (passes of 64, 64 and a last one of ONE row, which must still take KDA's chunked
// form) and a 200-token one (64, 64, 64, 8), then a decode step on the state each left.
#include <cstring>
#include <stdexcept>

#include "io/errors.hpp"
#include "tests/kernels/model/fixture_util.hpp"
#include "tests/kernels/model/prompt_pass_util.hpp"

namespace ferry::test {
namespace {

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (auto& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  return ids;
}

class PrefillChunk : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefillChunk, PassesOfSixtyFourRowsGiveEveryLogitAndTheNextStepTheBitsOfOnePass) {
  Loaded m = load(fixture(GetParam()));
  const int64_t v = m.cfg.vocab;
  for (const int64_t n : {129, 200}) {
    SCOPED_TRACE("prompt of " + std::to_string(n) + " tokens");
    const auto prompt = random_prompt(n, v, static_cast<uint32_t>(n));
    std::unique_ptr<SeqState> one, st;
    const auto whole = prompt_pass_logits(*m.model, prompt, 0, &one);
    const auto chunked = prompt_pass_logits(*m.model, prompt, 64, &st);
    ASSERT_EQ(chunked.size(), whole.size());
    EXPECT_EQ(first_differing_row(chunked, whole, v), -1) << "row of the prompt whose logits differ";
    EXPECT_EQ(st->len, n);
    // The state each left: the next decode step gives the same bits.
    const std::vector<int32_t> next{argmax(whole.data() + (n - 1) * v, v)};
    const auto a = m.model->forward(*one, next);
    const auto b = m.model->forward(*st, next);
    EXPECT_EQ(first_differing_row(a, b, v), -1) << "the decode step after the prompt";
    // Only the last row's logits (what generate asks for): the last row of the all-rows pass.
    auto last_st = m.model->new_state(256);
    ForwardOptions last;
    last.prefill = true;
    const auto l = m.model->forward(*last_st, prompt, last);
    ASSERT_EQ(l.size(), static_cast<size_t>(v));
    EXPECT_EQ(std::memcmp(l.data(), whole.data() + (n - 1) * v, static_cast<size_t>(v) * sizeof(float)), 0);
  }
}

// The server's prompt cache: a prompt pass stopped at 128 tokens, its KDA state snapshot, the sequence
// then decoded further (rewriting the rows past 128), restored, and the prompt pass continued: the rows
// it computes have the bits of one pass over the whole prompt, also when only one row is left.
TEST_P(PrefillChunk, APromptContinuedFromASnapshotAtAMultipleOfSixtyFourGivesTheBitsOfOnePass) {
  Loaded m = load(fixture(GetParam()));
  const int64_t v = m.cfg.vocab;
  for (const int64_t n : {129, 200}) {
    SCOPED_TRACE("prompt of " + std::to_string(n) + " tokens");
    const auto prompt = random_prompt(n, v, static_cast<uint32_t>(n) + 7);
    const auto whole = prompt_pass_logits(*m.model, prompt, 0);
    auto st = m.model->new_state(256);
    const std::span<const int32_t> ids(prompt);
    m.model->forward(*st, ids.first(128), prompt_pass(false));
    const SeqSnapshot snap = m.model->snapshot(*st);
    for (int32_t id : random_prompt(6, v, 99)) m.model->forward(*st, std::vector<int32_t>{id});  // another reply
    m.model->restore(*st, snap);
    ASSERT_EQ(st->len, 128);
    const auto rest = m.model->forward(*st, ids.subspan(128), prompt_pass(true));
    const std::vector<float> tail(whole.begin() + 128 * v, whole.end());
    EXPECT_EQ(first_differing_row(rest, tail, v), -1) << "row (from 128) whose logits differ";
  }
}

// ForwardOptions::snapshot: one prompt pass leaves the KDA state as it was after its first 128 rows,
// bit for bit what Model::snapshot gives after a pass over just those rows, and the pass's logits do not
// change; also when the pass runs in chunks (the point inside a chunk, and on a chunk boundary).
TEST_P(PrefillChunk, ASnapshotInsideOnePromptPassEqualsTheSnapshotAfterAPassOverItsRows) {
  Loaded m = load(fixture(GetParam()));
  const int64_t v = m.cfg.vocab, n = 200;
  const auto prompt = random_prompt(n, v, 31);
  const std::span<const int32_t> ids(prompt);
  const ForwardOptions all = prompt_pass(true);
  const auto whole = prompt_pass_logits(*m.model, prompt, 0);
  const auto want = snapshot_after(*m.model, ids, 128);
  for (const int64_t chunk : {0, 64, 192}) {
    SCOPED_TRACE("prefill chunk " + std::to_string(chunk));
    m.model->set_prefill_chunk(chunk);
    auto st = m.model->new_state(256);
    SeqSnapshot snap;
    ForwardOptions o = all;
    o.snapshot = &snap;
    o.snapshot_row = 128;
    const auto got = m.model->forward(*st, prompt, o);
    EXPECT_EQ(first_differing_row(got, whole, v), -1) << "the pass's logits";
    EXPECT_EQ(snap.len, 128);
    const auto have = m.model->download(snap);
    ASSERT_EQ(have.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(have[k] == want[k]) << "KDA layer " << k << " of the snapshot";
    // Continuing from it gives the one-pass bits (the prompt cache's next turn).
    m.model->restore(*st, snap);
    const auto rest = m.model->forward(*st, ids.subspan(128), all);
    const std::vector<float> tail(whole.begin() + 128 * v, whole.end());
    EXPECT_EQ(first_differing_row(rest, tail, v), -1);
  }
  m.model->set_prefill_chunk(0);
  auto st = m.model->new_state(256);
  SeqSnapshot snap;
  ForwardOptions bad = all;
  bad.snapshot = &snap;
  bad.snapshot_row = 100;
  EXPECT_THROW(m.model->forward(*st, prompt, bad), std::invalid_argument) << "not a multiple of 64";
  EXPECT_EQ(st->len, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, PrefillChunk,
                         ::testing::Values("deepseek_v3-a", "deepseek_v32-a", "kimi_linear-a", "qwen3-a", "k3-tiny-a/hf"),
                         [](const auto& info) {
                           std::string s = info.param.substr(0, info.param.find('/'));
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

TEST(PrefillChunkLimits, AChunkNotAMultipleOfSixtyFourIsRefused) {
  Loaded m = load(fixture("k3-tiny-a/hf"));
  EXPECT_THROW(m.model->set_prefill_chunk(100), std::invalid_argument);
  EXPECT_THROW(m.model->set_prefill_chunk(-64), std::invalid_argument);
  EXPECT_NO_THROW(m.model->set_prefill_chunk(128));
  EXPECT_EQ(m.model->prefill_chunk(), 128);
}

TEST(PrefillChunkLimits, APromptOverTheContextOrWithABadIdFailsBeforeAnyPassRuns) {
  Loaded m = load(fixture("k3-tiny-a/hf"));
  m.model->set_prefill_chunk(64);
  ForwardOptions o;
  o.prefill = true;
  auto st = m.model->new_state(150);
  EXPECT_THROW(m.model->forward(*st, random_prompt(200, m.cfg.vocab, 1), o), LimitError);
  EXPECT_EQ(st->len, 0) << "no pass ran";
  auto ids = random_prompt(140, m.cfg.vocab, 2);
  ids.back() = static_cast<int32_t>(m.cfg.vocab);  // outside the vocabulary, in the last pass
  EXPECT_THROW(m.model->forward(*st, ids, o), LimitError);
  EXPECT_EQ(st->len, 0) << "the first passes did not run";
}

}  // namespace
}  // namespace ferry::test
