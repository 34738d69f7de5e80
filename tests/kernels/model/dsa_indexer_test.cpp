// The DSA indexer while every visible key fits in its top-k (Model::indexer): the selection is then every
// visible key whatever the scores, so the model skips the query side and the scores. These tests hold the
// skip to the bits of the scored selection, on deepseek_v32-a (index_topk = 8), in both tie modes:
// positions 0..7 skip, a call that reaches position 8 scores.
#include <cstring>

#include "tests/kernels/cpu/counting_backend.hpp"
#include "tests/kernels/cpu/test_util.hpp"
#include "tests/kernels/model/fixture_util.hpp"

namespace ferry::test {
namespace {

struct Counted {
  ModelConfig cfg;
  std::unique_ptr<TensorSource> src;
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<CountingBackend> be;
  std::unique_ptr<Model> model;
};

Counted load_counted(IndexerTies ties) {
  Counted l;
  const auto dir = fixture("deepseek_v32-a");
  l.cfg = load_model_config(dir);
  l.src = open_safetensors_checkpoint(dir);
  l.cpu = make_cpu_backend();
  l.be = std::make_unique<CountingBackend>(*l.cpu);
  LoadOptions o;
  o.indexer_ties = ties;
  l.model = std::make_unique<Model>(l.cfg, *l.src, *l.be, o);
  return l;
}

std::vector<int32_t> first_ids(size_t n) {
  const auto all = ids_of(read_json(fixture("deepseek_v32-a") / "reference.json")["all_ids"]);
  return std::vector<int32_t>(all.begin(), all.begin() + static_cast<long>(n));
}

std::vector<float> pass(Model& m, const std::vector<int32_t>& ids) {
  auto st = m.new_state(64);
  ForwardOptions o;
  o.prefill = true;
  o.all_logits = true;
  return m.forward(*st, ids, o);
}

class DsaIndexerSkip : public ::testing::TestWithParam<IndexerTies> {};

// A prompt pass of 8 rows (every query sees at most 8 = index_topk keys: no scores) gives rows 0..7 the
// bits of the same rows in a pass of 9 (which scores every row).
TEST_P(DsaIndexerSkip, APassWithinTopkHasTheBitsOfTheSameRowsInAScoredPass) {
  auto m = load_counted(GetParam());
  const int64_t topk = m.cfg.index_topk, vocab = m.cfg.vocab;
  ASSERT_EQ(topk, 8) << "the fixture's index_topk";
  const auto ids = first_ids(static_cast<size_t>(topk) + 1);
  const auto scored = pass(*m.model, ids);
  EXPECT_GT(m.be->counts["indexer_topk"], 0) << "a pass of topk + 1 rows scores";
  m.be->counts.clear();
  const auto skipped = pass(*m.model, std::vector<int32_t>(ids.begin(), ids.end() - 1));
  EXPECT_EQ(m.be->counts["indexer_topk"], 0) << "a pass of topk rows does not score";
  ASSERT_EQ(skipped.size(), static_cast<size_t>(topk * vocab));
  EXPECT_EQ(0, std::memcmp(skipped.data(), scored.data(), skipped.size() * sizeof(float)))
      << "first differing logit " << first_bit_diff(skipped.data(), scored.data(), static_cast<int64_t>(skipped.size()));
}

// Plain decode steps at positions 3..7 (skipped) and 8 (scored) have the bits of the same rows as one block
// of 6 (scored: it reaches position 8), after a 3-row prompt.
TEST_P(DsaIndexerSkip, PlainStepsWithinTopkHaveTheBitsOfAScoredBlock) {
  auto m = load_counted(GetParam());
  const int64_t topk = m.cfg.index_topk, vocab = m.cfg.vocab;
  const auto ids = first_ids(static_cast<size_t>(topk) + 1);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 3), rest(ids.begin() + 3, ids.end());
  ForwardOptions pre;
  pre.prefill = true;
  auto a = m.model->new_state(64);
  m.model->forward(*a, prompt, pre);
  std::vector<float> plain;
  std::vector<int64_t> scored_steps;
  for (size_t i = 0; i < rest.size(); ++i) {
    m.be->counts.clear();
    const auto l = m.model->forward(*a, std::vector<int32_t>{rest[i]});
    plain.insert(plain.end(), l.begin(), l.end());
    scored_steps.push_back(m.be->counts["indexer_topk"]);
  }
  // Steps at positions 3..7 skip; the step at position 8 sees 9 keys and scores.
  EXPECT_EQ(scored_steps, (std::vector<int64_t>{0, 0, 0, 0, 0, scored_steps.back()}));
  EXPECT_GT(scored_steps.back(), 0);
  auto b = m.model->new_state(64);
  m.model->forward(*b, prompt, pre);
  ForwardOptions blk;
  blk.all_logits = true;
  const auto block = m.model->forward(*b, rest, blk);
  ASSERT_EQ(block.size(), plain.size());
  ASSERT_EQ(block.size(), rest.size() * static_cast<size_t>(vocab));
  EXPECT_EQ(0, std::memcmp(block.data(), plain.data(), plain.size() * sizeof(float)))
      << "first differing logit " << first_bit_diff(block.data(), plain.data(), static_cast<int64_t>(plain.size()));
}

INSTANTIATE_TEST_SUITE_P(Ties, DsaIndexerSkip, ::testing::Values(IndexerTies::by_position, IndexerTies::torch_cpu),
                         [](const auto& info) {
                           return std::string(info.param == IndexerTies::by_position ? "by_position" : "torch_cpu");
                         });

}  // namespace
}  // namespace ferry::test
