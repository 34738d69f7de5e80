// Bad input to the model builder and the forward pass: each is a clear error naming the tensor or
// limit, never a crash or a silently wrong model.
#include <functional>
#include <map>
#include <set>

#include "io/errors.hpp"
#include "tests/kernels/model/fixture_util.hpp"

namespace ferry::test {
namespace {

// A checkpoint with some tensors hidden or given another shape/dtype.
class PatchedSource : public TensorSource {
 public:
  explicit PatchedSource(std::unique_ptr<TensorSource> base) : base_(std::move(base)) {}
  bool has(const std::string& n) const override { return !hidden_.count(n) && base_->has(n); }
  TensorView get(const std::string& n) const override {
    if (hidden_.count(n)) throw TensorError("tensor '" + n + "' is missing from " + describe());
    TensorView v = base_->get(n);
    if (auto it = shapes_.find(n); it != shapes_.end()) v.shape = it->second;
    if (auto it = dtypes_.find(n); it != dtypes_.end()) v.dtype = it->second;
    return v;
  }
  std::vector<std::string> names() const override { return base_->names(); }
  std::string describe() const override { return base_->describe(); }

  std::set<std::string> hidden_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, DType> dtypes_;

 private:
  std::unique_ptr<TensorSource> base_;
};

std::string load_error(const std::filesystem::path& dir, const std::function<void(PatchedSource&)>& patch) {
  const ModelConfig cfg = load_model_config(dir);
  PatchedSource src(open_safetensors_checkpoint(dir));
  patch(src);
  auto be = make_cpu_backend(1);
  try {
    Model m(cfg, src, *be, LoadOptions{});
  } catch (const TensorError& e) {
    return e.what();
  }
  return "";
}

const std::filesystem::path kK3 = fixture("k3-tiny-a/hf");
const std::string kQ = "language_model.model.layers.3.self_attn.q_b_proj.weight";

TEST(ModelBadInput, MissingTensorIsNamed) {
  const auto msg = load_error(kK3, [](PatchedSource& s) { s.hidden_.insert(kQ); });
  EXPECT_NE(msg.find("q_b_proj"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

TEST(ModelBadInput, WrongShapeIsNamedWithBothShapes) {
  const auto msg = load_error(kK3, [](PatchedSource& s) { s.shapes_[kQ] = {96, 256}; });
  EXPECT_NE(msg.find("q_b_proj"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[96, 256]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [192, 128]"), std::string::npos) << msg;
}

TEST(ModelBadInput, WrongDtypeIsNamed) {
  const std::string norm = "language_model.model.norm.weight";
  const auto msg = load_error(kK3, [&](PatchedSource& s) { s.dtypes_[norm] = DType::i32; });
  EXPECT_NE(msg.find("model.norm.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("I32"), std::string::npos) << msg;
}

TEST(ModelBadInput, ExpertWithWrongPackedShapeIsNamed) {
  const std::string e = "language_model.model.layers.2.block_sparse_moe.experts.7.w2.weight_packed";
  const auto msg = load_error(kK3, [&](PatchedSource& s) { s.shapes_[e] = {128, 16}; });
  EXPECT_NE(msg.find("experts.7.w2.weight_packed"), std::string::npos) << msg;
}

TEST(ModelBadInput, PromptLongerThanTheContextIsALimitError) {
  auto m = load(kK3);
  auto st = m.model->new_state(8);
  std::vector<int32_t> ids(9, 5);
  try {
    m.model->forward(*st, ids);
    FAIL() << "no error";
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("context size of 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(st->len, 0) << "a refused call must leave the state untouched";
}

TEST(ModelBadInput, TokenOutsideTheVocabularyIsALimitError) {
  auto m = load(kK3);
  auto st = m.model->new_state(8);
  EXPECT_THROW(m.model->forward(*st, std::vector<int32_t>{1024}), LimitError);
  EXPECT_THROW(m.model->forward(*st, std::vector<int32_t>{-1}), LimitError);
}

// With the spine in Q8_0 (ggml's 8-bit blocks) the model computes a slightly different function; this
// measures how far it is from the reference (printed; recorded in docs/BENCHMARKS.md).
TEST(ModelQ8Spine, AgreementWithTheReferenceIsMeasuredAndLoose) {
  for (const std::string name : {"kimi_linear-a", "deepseek_v3-a", "qwen3-a"}) {
    const auto dir = fixture(name);
    auto ref = read_json(dir / "reference.json");
    auto m = load(dir, SpineType::q8_0);
    const auto all = ids_of(ref["all_ids"]);
    const auto want = read_f32(dir / "logits.f32");
    auto st = m.model->new_state(256);
    ForwardOptions o;
    o.prefill = true;
    o.all_logits = true;
    const auto got = m.model->forward(*st, all, o);
    const auto e = compare_rows(got.data(), want.data(), static_cast<int64_t>(all.size()), m.cfg.vocab);
    int agree = 0;
    for (size_t r = 0; r < all.size(); ++r)
      agree += argmax(got.data() + r * m.cfg.vocab, m.cfg.vocab) == argmax(want.data() + r * m.cfg.vocab, m.cfg.vocab);
    std::printf("[%s] Q8_0 spine: max|d|/max|ref| %.3g, argmax agrees at %d/%zu positions\n", name.c_str(),
                e.max_rel, agree, all.size());
    // Dense models stay close; with MoE, 8-bit spine rounding flips some routing decisions (as the
    // fixtures' README warns), so only the greedy choices are held to a bound there.
    if (m.cfg.count(Ffn::moe) == 0) {
      EXPECT_LT(e.max_rel, 0.1);
    }
    EXPECT_GT(agree, static_cast<int>(all.size() * 3 / 4));
  }
}

}  // namespace
}  // namespace ferry::test
