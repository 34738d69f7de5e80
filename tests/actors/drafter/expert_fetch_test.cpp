// The block path reads each needed expert once per block: counted through an ExpertSource wrapper
// around the resident experts (the MoE layer groups a block's rows by expert before fetching).
#include <set>

#include "kernels/model/weights.hpp"
#include "tests/actors/drafter/drafter_util.hpp"

namespace ferry::test {
namespace {

class CountingExperts final : public ExpertSource {
 public:
  explicit CountingExperts(ExpertSource& inner) : inner_(inner) {}
  void fetch(int layer, std::span<const ExpertUse> uses, const ExpertCompute& compute) override {
    std::set<int32_t> distinct;
    for (const ExpertUse& u : uses) distinct.insert(u.expert);
    if (distinct.size() != uses.size()) ++duplicate_calls;
    fetches += static_cast<int64_t>(uses.size());
    (void)layer;
    inner_.fetch(layer, uses, compute);
  }
  int64_t fetches = 0;
  int64_t duplicate_calls = 0;  // layer calls that asked for one expert twice

 private:
  ExpertSource& inner_;
};

TEST(ExpertFetch, SixteenRowBlockReadsEachExpertOnceAndLessThanSixteenSteps) {
  K3& k = K3::get();
  ResidentExperts resident(k.cfg, *k.src, *k.be);
  CountingExperts counting(resident);
  Model model(k.cfg, *k.src, *k.be, LoadOptions{}, &counting);
  std::vector<int32_t> rows;
  for (const GeneratedToken& t : k.ref(16)) rows.push_back(t.id);
  ForwardOptions pre;
  pre.prefill = true;

  auto a = model.new_state(128);
  model.forward(*a, k.prompt, pre);
  counting.fetches = 0;
  for (int32_t id : rows) model.forward(*a, std::vector<int32_t>{id});
  const int64_t plain = counting.fetches;

  auto b = model.new_state(128);
  model.forward(*b, k.prompt, pre);
  counting.fetches = 0;
  counting.duplicate_calls = 0;
  ForwardOptions all;
  all.all_logits = true;
  model.forward(*b, rows, all);
  const int64_t block = counting.fetches;
  std::printf("[experts] 16 plain steps: %lld expert fetches; one 16-row block: %lld\n", static_cast<long long>(plain),
              static_cast<long long>(block));
  EXPECT_EQ(counting.duplicate_calls, 0);
  EXPECT_LT(block, plain);
  // Upper bound: every MoE layer fetches at most all of its experts once.
  EXPECT_LE(block, k.cfg.count(Ffn::moe) * k.cfg.moe.n_experts);
}

}  // namespace
}  // namespace ferry::test
