// The checkpoint drafter: a dense model (Qwen3-0.6B-Base class) loaded from HF safetensors and run by
// ferry's own kernels. Greedy; a draft's confidence is the softmax probability of its greedy token.
// The sequence state is kept between calls: each call rolls back to the longest common prefix of the
// new history and what the state already holds, so a call only runs the tokens it has not seen.
#include <algorithm>
#include <cmath>

#include "actors/drafter/sidecar/drafter_core.hpp"
#include "io/errors.hpp"
#include "io/formats/checkpoint.hpp"
#include "io/formats/model_config.hpp"
#include "io/tokenizers/tokenizer.hpp"
#include "kernels/backend.hpp"
#include "kernels/model/model.hpp"

namespace ferry {
namespace {

class CheckpointDrafter final : public Drafter {
 public:
  CheckpointDrafter(const std::string& dir, int threads) : dir_(dir) {
    // A Hugging Face checkpoint on the CPU back-end, loaded directly: the sidecar links no actor code.
    m_.cfg = load_model_config(dir);
    m_.src = open_safetensors_checkpoint(dir);
    m_.backend = make_cpu_backend(threads);
    if (std::filesystem::exists(std::filesystem::path(dir) / "tiktoken.model") ||
        std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
      m_.tokenizer = load_tokenizer(dir);
    m_.model = std::make_unique<Model>(m_.cfg, *m_.src, *m_.backend, LoadOptions{}, nullptr);
    if (m_.cfg.count(Ffn::moe) > 0)
      throw ConfigError("drafter checkpoint " + dir + " is a mixture-of-experts model; a drafter must be dense");
    max_ctx_ = std::min<int64_t>(m_.cfg.max_positions > 0 ? m_.cfg.max_positions : 4096, 32768);
    state_ = m_.model->new_state(max_ctx_);
  }
  std::string name() const override { return "qwen3:" + dir_; }
  const Tokenizer* tokenizer() const override { return m_.tokenizer.get(); }
  int32_t vocab_size() const override { return static_cast<int32_t>(m_.cfg.vocab); }

  DraftProposal propose(std::span<const int32_t> h, int max_tokens, float min_conf) override {
    DraftProposal p;
    if (h.empty() || static_cast<int64_t>(h.size()) + max_tokens > max_ctx_) return p;
    for (int32_t id : h)
      if (id < 0 || id >= m_.cfg.vocab) return p;  // not this vocabulary: nothing to say
    std::vector<float> logits = sync(h);
    for (int i = 0; i < max_tokens; ++i) {
      const auto [id, prob] = greedy(logits);
      p.ids.push_back(id);
      p.conf.push_back(prob);
      if (prob < min_conf || i + 1 == max_tokens) break;
      fed_.push_back(id);
      logits = m_.model->forward(*state_, std::vector<int32_t>{id});
    }
    return p;
  }

 private:
  // Brings the state to exactly `h` and returns the logits after its last token.
  std::vector<float> sync(std::span<const int32_t> h) {
    size_t lcp = 0;
    while (lcp < fed_.size() && lcp < h.size() && fed_[lcp] == h[lcp]) ++lcp;
    if (lcp == h.size()) --lcp;  // the last token is re-run for its logits
    if (m_.cfg.count(Mixer::kda) > 0 && lcp < fed_.size()) lcp = 0;  // recurrent state: no cheap rollback
    state_->len = static_cast<int64_t>(lcp);
    fed_.resize(lcp);
    const std::span<const int32_t> rest = h.subspan(lcp);
    fed_.insert(fed_.end(), rest.begin(), rest.end());
    ForwardOptions fo;
    fo.prefill = rest.size() > 16;  // long catch-ups take the prompt-pass form
    return m_.model->forward(*state_, rest, fo);
  }

  static std::pair<int32_t, float> greedy(const std::vector<float>& l) {
    const auto it = std::max_element(l.begin(), l.end());
    double s = 0;
    for (float v : l) s += std::exp(static_cast<double>(v) - *it);
    return {static_cast<int32_t>(it - l.begin()), static_cast<float>(1.0 / s)};
  }

  std::string dir_;
  struct {
    ModelConfig cfg;
    std::unique_ptr<TensorSource> src;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Model> model;
  } m_;
  int64_t max_ctx_ = 0;
  std::unique_ptr<SeqState> state_;
  std::vector<int32_t> fed_;  // the tokens state_ holds, in order
};

}  // namespace

std::unique_ptr<Drafter> make_qwen3_drafter(const std::string& dir, int threads) {
  return std::make_unique<CheckpointDrafter>(dir, threads);
}

}  // namespace ferry
