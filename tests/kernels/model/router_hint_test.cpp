// Router prefetch, the model's side (--prefetch-router): an ExpertSource that wants hints is told,
// before each MoE layer's fetch of a decode step or of a block of up to 16 rows, the next MoE layer and
// a predictor of its experts (that layer's router on this layer's input). A prompt pass and the last MoE
// layer get none, and hints change no bit of the logits. On k3-tiny-a (5 MoE layers of 32 experts,
// top-4) over the fixture's own continuation.
#include "kernels/model/weights.hpp"
#include "tests/kernels/model/fixture_util.hpp"

namespace ferry::test {
namespace {

// Passes fetches to the resident experts; records each hint with the layer whose fetch follows it.
class HintRecorder final : public ExpertSource {
 public:
  struct Hint {
    int before_layer = -1, next_layer = -1;
    std::vector<int32_t> predicted;
  };
  explicit HintRecorder(ExpertSource& inner) : inner_(inner) {}
  bool wants_hints() const override { return true; }
  void hint_next(int next_layer, ExpertPredictor predict) override {
    pending_next_ = next_layer;
    pending_ = std::move(predict);
  }
  void fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) override {
    if (pending_) hints.push_back({layer, pending_next_, pending_()});
    pending_ = nullptr;
    std::vector<int32_t> used;
    for (const auto& u : uses) used.push_back(u.expert);
    fetched.push_back({layer, used});
    inner_.fetch(layer, uses, compute);
  }
  std::vector<Hint> hints;
  std::vector<std::pair<int, std::vector<int32_t>>> fetched;  // (layer, experts used) per fetch

 private:
  ExpertSource& inner_;
  int pending_next_ = -1;
  ExpertPredictor pending_;
};

struct HintedModel {
  HintedModel() : l(load(fixture("k3-tiny-a/hf"))), resident(l.cfg, *l.src, *l.be), rec(resident) {
    model = std::make_unique<Model>(l.cfg, *l.src, *l.be, LoadOptions{}, &rec);
  }
  Loaded l;
  ResidentExperts resident;
  HintRecorder rec;
  std::unique_ptr<Model> model;
};

std::vector<int> moe_layers(const ModelConfig& cfg) {
  std::vector<int> v;
  for (int l = 0; l < cfg.n_layers; ++l)
    if (cfg.ffn[size_t(l)] == Ffn::moe) v.push_back(l);
  return v;
}

}  // namespace

TEST(RouterHint, DecodeStepsHintEveryMoeLayerButTheLastAndPromptPassesNone) {
  HintedModel h;
  const auto run = read_json(fixture("k3-tiny-a/ref/exact/run.json"));
  const auto prompt = ids_of(run["prompt_ids"]), gen = ids_of(run["gen_ids"]);
  ASSERT_GT(prompt.size(), size_t(ExpertSource::kMaxHintRows));
  auto st = h.model->new_state(256);
  ForwardOptions pre;
  pre.prefill = true;
  h.model->forward(*st, prompt, pre);
  EXPECT_TRUE(h.rec.hints.empty()) << "a " << prompt.size() << "-row prompt pass is not hinted";

  const auto moe = moe_layers(h.l.cfg);
  ASSERT_GE(moe.size(), 2u);
  const int k = int(h.l.cfg.moe.top_k), experts = int(h.l.cfg.moe.n_experts);
  size_t predicted = 0, right = 0;
  for (int32_t id : gen) {
    h.rec.hints.clear();
    h.rec.fetched.clear();
    h.model->forward(*st, std::vector<int32_t>{id});
    ASSERT_EQ(h.rec.hints.size(), moe.size() - 1);
    for (size_t i = 0; i + 1 < moe.size(); ++i) {
      const auto& hint = h.rec.hints[i];
      EXPECT_EQ(hint.before_layer, moe[i]);
      EXPECT_EQ(hint.next_layer, moe[i + 1]);
      ASSERT_EQ(int(hint.predicted.size()), k) << "one row: the next router's top-k";
      for (int32_t e : hint.predicted) {
        EXPECT_GE(e, 0);
        EXPECT_LT(e, experts);
      }
      const auto& used = h.rec.fetched[i + 1].second;  // what the next MoE layer then used
      for (int32_t e : hint.predicted) right += std::count(used.begin(), used.end(), e);
      predicted += hint.predicted.size();
    }
  }
  const double hit = double(right) / double(predicted);
  std::printf("[k3-tiny-a] router hints: %zu of %zu predicted experts used (chance %.1f%%)\n", right, predicted,
              100.0 * k / experts);
  EXPECT_GT(hit, 1.5 * k / experts) << "the next layer's router on this layer's input predicts better than chance";
}

TEST(RouterHint, BlockOfSixteenRowsIsHintedWithEachExpertOnceAndLogitsAreUnchanged) {
  HintedModel h;
  Loaded plain = load(fixture("k3-tiny-a/hf"));
  const auto run = read_json(fixture("k3-tiny-a/ref/exact/run.json"));
  auto ids = ids_of(run["prompt_ids"]);
  ids.resize(size_t(ExpertSource::kMaxHintRows));
  ForwardOptions o;
  o.all_logits = true;
  auto a = h.model->new_state(256), b = plain.model->new_state(256);
  const auto hinted = h.model->forward(*a, ids, o), reference = plain.model->forward(*b, ids, o);
  EXPECT_EQ(hinted, reference) << "hints change no bit of the logits";
  const auto moe = moe_layers(h.l.cfg);
  ASSERT_EQ(h.rec.hints.size(), moe.size() - 1) << "16 rows are a verify block: hinted";
  const size_t k = size_t(h.l.cfg.moe.top_k);
  for (const auto& hint : h.rec.hints) {
    EXPECT_GE(hint.predicted.size(), k);
    EXPECT_LE(hint.predicted.size(), size_t(h.l.cfg.moe.n_experts));
    std::vector<int32_t> sorted = hint.predicted;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "each expert once";
  }
}

}  // namespace ferry::test
