// The engine against llama.cpp's kimi-k3 model (F32 on CPU) on tests/fixtures/k3-tiny-a: the real K3
// checkpoint layout (3 shards, language_model. prefix) with KDA + full-rank gate, gated NoPE MLA,
// latent MoE, SiTU and attention residuals. Its README spells out llama.cpp's semantics.
#include "tests/kernels/model/fixture_util.hpp"

namespace ferry::test {
namespace {

// llama.cpp's own batch-vs-tokenwise noise is 4.4e-5 on logits of std 2 (fixture README): allow a
// few times that for a different summation order.
constexpr double kMaxAbsLogit = 2e-4;

class K3Tiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { m_ = new Loaded(load(fixture("k3-tiny-a/hf"))); }
  static void TearDownTestSuite() { delete m_; }
  static Loaded* m_;
  nlohmann::json run_ = read_json(fixture("k3-tiny-a/ref/exact/run.json"));
  std::vector<int32_t> prompt_ = ids_of(run_["prompt_ids"]);
  std::vector<int32_t> gen_ = ids_of(run_["gen_ids"]);
};
Loaded* K3Tiny::m_ = nullptr;

TEST_F(K3Tiny, ConfigIsTheRealK3Layout) {
  EXPECT_EQ(m_->cfg.arch, Arch::kimi_k3);
  EXPECT_EQ(m_->cfg.tensor_prefix, "language_model.");
  EXPECT_EQ(m_->cfg.count(Mixer::kda), 4);
  EXPECT_EQ(m_->cfg.count(Mixer::mla), 2);
}

TEST_F(K3Tiny, PromptLogitsMatchLlamaCpp) {
  const auto want = read_f32(fixture("k3-tiny-a/ref/exact/prompt_logits.f32"));
  auto st = m_->model->new_state(256);
  ForwardOptions o;
  o.prefill = true;
  o.all_logits = true;
  const auto got = m_->model->forward(*st, prompt_, o);
  const auto e = compare_rows(got.data(), want.data(), static_cast<int64_t>(prompt_.size()), m_->cfg.vocab);
  std::printf("[k3-tiny-a] prompt logits: max|d| %.3g (row %lld), rel %.3g\n", e.max_abs,
              static_cast<long long>(e.worst_row), e.max_rel);
  EXPECT_LE(e.max_abs, kMaxAbsLogit);
}

TEST_F(K3Tiny, GreedyContinuationAndDecodeLogitsMatchLlamaCpp) {
  const auto want_logits = read_f32(fixture("k3-tiny-a/ref/exact/gen_logits.f32"));
  auto st = m_->model->new_state(256);
  ForwardOptions pre;
  pre.prefill = true;
  auto logits = m_->model->forward(*st, prompt_, pre);
  std::vector<int32_t> got;
  double worst = 0;
  for (size_t g = 0; g < gen_.size(); ++g) {
    got.push_back(argmax(logits.data(), m_->cfg.vocab));
    // Teacher-force llama.cpp's token so the logits rows stay comparable even after a divergence.
    logits = m_->model->forward(*st, std::vector<int32_t>{gen_[g]});
    worst = std::max(worst, compare_rows(logits.data(), want_logits.data() + g * m_->cfg.vocab, 1, m_->cfg.vocab).max_abs);
  }
  std::printf("[k3-tiny-a] decode logits: max|d| %.3g\n", worst);
  EXPECT_EQ(got, gen_);
  EXPECT_EQ(argmax(logits.data(), m_->cfg.vocab), run_["next_after_gen"].get<int32_t>());
  EXPECT_LE(worst, kMaxAbsLogit);
}

TEST_F(K3Tiny, FullBatchLogitsAndEveryLayerOutputMatchLlamaCpp) {
  std::vector<int32_t> all = prompt_;
  all.insert(all.end(), gen_.begin(), gen_.end());
  const int64_t t = static_cast<int64_t>(all.size()), d = m_->cfg.hidden;
  const auto want_hidden = read_f32(fixture("k3-tiny-a/ref/exact/hidden_l_out.f32"));
  const auto want_logits = read_f32(fixture("k3-tiny-a/ref/exact/full_logits.f32"));
  std::vector<std::vector<float>> hidden(static_cast<size_t>(m_->cfg.n_layers));
  auto st = m_->model->new_state(256);
  ForwardOptions o;
  o.prefill = true;
  o.all_logits = true;
  o.on_layer = [&](int il, const float* out, int64_t n) {
    hidden[static_cast<size_t>(il)].resize(static_cast<size_t>(n * d));
    m_->be->download(hidden[static_cast<size_t>(il)].data(), out, static_cast<size_t>(n * d) * 4);
  };
  const auto logits = m_->model->forward(*st, all, o);
  for (int il = 0; il < m_->cfg.n_layers; ++il) {
    const auto e = compare_rows(hidden[static_cast<size_t>(il)].data(), want_hidden.data() + il * t * d, t, d);
    std::printf("[k3-tiny-a] layer %d output: max|d| %.3g rel %.3g\n", il, e.max_abs, e.max_rel);
    EXPECT_LE(e.max_rel, 1e-4) << "layer " << il << " differs from llama.cpp's l_out-" << il;
  }
  const auto e = compare_rows(logits.data(), want_logits.data(), t, m_->cfg.vocab);
  std::printf("[k3-tiny-a] full logits: max|d| %.3g\n", e.max_abs);
  EXPECT_LE(e.max_abs, kMaxAbsLogit);
}

}  // namespace
}  // namespace ferry::test
