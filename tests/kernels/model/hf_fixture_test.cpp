// The engine against Hugging Face transformers (float64) on tiny random checkpoints of each family:
// tests/fixtures/<family>-a (see tests/fixtures/README.md).
#include "tests/kernels/model/fixture_util.hpp"

namespace ferry::test {
namespace {

// F32 arithmetic against a float64 reference over a few layers: the README's suggested bound.
constexpr double kMaxRelError = 1e-4;

class HfFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fixture(GetParam());
    ref_ = read_json(dir_ / "reference.json");
    // The reference broke exact indexer-score ties as torch.topk does on the CPU (see IndexerTies).
    m_ = load(dir_, SpineType::f32, IndexerTies::torch_cpu);
  }
  std::filesystem::path dir_;
  nlohmann::json ref_;
  Loaded m_;
};

TEST_P(HfFixture, TeacherForcedLogitsMatchTransformers) {
  const auto all = ids_of(ref_["all_ids"]);
  const auto want = read_f32(dir_ / "logits.f32");
  auto st = m_.model->new_state(256);
  ForwardOptions o;
  o.prefill = true;
  o.all_logits = true;
  const auto got = m_.model->forward(*st, all, o);
  ASSERT_EQ(got.size(), want.size());
  const auto e = compare_rows(got.data(), want.data(), static_cast<int64_t>(all.size()), m_.cfg.vocab);
  std::printf("[%s] teacher-forced logits: max|d| %.3g, max|d|/max|ref| %.3g (row %lld)\n", GetParam().c_str(),
              e.max_abs, e.max_rel, static_cast<long long>(e.worst_row));
  EXPECT_LE(e.max_rel, kMaxRelError);
}

TEST_P(HfFixture, GreedyContinuationEqualsTransformers) {
  const auto prompt = ids_of(ref_["prompt_ids"]);
  const auto want = ids_of(ref_["generated_ids"]);
  const auto got = greedy_continuation(*m_.model, m_.cfg.vocab, prompt, want.size(), GetParam() == "deepseek_v32-a");
  EXPECT_EQ(got, want);
}

TEST_P(HfFixture, PrefillThenDecodeMatchesFullForward) {
  m_.model.reset();  // the model holds back-end memory: free it before its back-end goes
  m_ = load(dir_);  // engine tie order: the indexer's choice must not depend on the call's length
  const auto all = ids_of(ref_["all_ids"]);
  const auto prompt = ids_of(ref_["prompt_ids"]);
  auto full_st = m_.model->new_state(256);
  ForwardOptions o;
  o.prefill = true;
  o.all_logits = true;
  const auto full = m_.model->forward(*full_st, all, o);
  auto st = m_.model->new_state(256);
  ForwardOptions pre;
  pre.prefill = true;
  auto last = m_.model->forward(*st, prompt, pre);
  const int64_t v = m_.cfg.vocab;
  double worst = 0;
  for (size_t i = prompt.size(); i <= all.size(); ++i) {
    const float* ref = full.data() + (i - 1) * v;
    worst = std::max(worst, compare_rows(last.data(), ref, 1, v).max_rel);
    if (i == all.size()) break;
    last = m_.model->forward(*st, std::vector<int32_t>{all[i]});
  }
  std::printf("[%s] prefill+decode vs full forward: max rel %.3g\n", GetParam().c_str(), worst);
  EXPECT_LE(worst, 1e-5);
}

// DESIGN.md exactness: a verification block of 16 rows gives each row the bits a plain step gives it.
TEST_P(HfFixture, BlockOfSixteenRowsIsBitIdenticalToPlainSteps) {
  m_.model.reset();  // the model holds back-end memory: free it before its back-end goes
  m_ = load(dir_);  // the engine's own tie order: independent of how many rows share a call
  const auto all = ids_of(ref_["all_ids"]);
  const auto prompt = ids_of(ref_["prompt_ids"]);
  const std::vector<int32_t> rest(all.begin() + static_cast<long>(prompt.size()), all.end());
  ForwardOptions pre;
  pre.prefill = true;
  auto a = m_.model->new_state(256);
  m_.model->forward(*a, prompt, pre);
  std::vector<float> plain;
  for (int32_t id : rest) {
    auto l = m_.model->forward(*a, std::vector<int32_t>{id});
    plain.insert(plain.end(), l.begin(), l.end());
  }
  auto b = m_.model->new_state(256);
  m_.model->forward(*b, prompt, pre);
  ForwardOptions blk;
  blk.all_logits = true;
  const auto block = m_.model->forward(*b, rest, blk);
  ASSERT_EQ(block.size(), plain.size());
  EXPECT_EQ(0, std::memcmp(block.data(), plain.data(), plain.size() * 4));
}

INSTANTIATE_TEST_SUITE_P(Families, HfFixture,
                         ::testing::Values("kimi_linear-a", "deepseek_v3-a", "deepseek_v32-a", "qwen3-a"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace ferry::test
