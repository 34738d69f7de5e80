// Shared fixture of the drafter tests: the k3-tiny-a model (KDA + MLA + latent MoE) loaded once, its
// prompt, and the plain-decoding reference (ids and per-position logit hashes).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/formats/checkpoint.hpp"
#include "kernels/decoding/verify.hpp"

namespace ferry::test {

inline std::filesystem::path fixture(const std::string& rel) { return std::filesystem::path(FERRY_FIXTURES) / rel; }

struct K3 {
  ModelConfig cfg;
  std::unique_ptr<TensorSource> src;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt;
  std::vector<GeneratedToken> cached;  // plain greedy decoding, no stop ids (grown on demand)

  static K3& get() {
    static K3* k = [] {
      auto* m = new K3;
      const auto dir = fixture("k3-tiny-a/hf");
      m->cfg = load_model_config(dir);
      m->src = open_safetensors_checkpoint(dir);
      m->be = make_cpu_backend(2);
      m->model = std::make_unique<Model>(m->cfg, *m->src, *m->be, LoadOptions{});
      std::ifstream f(dir / "prompt.json");
      m->prompt = nlohmann::json::parse(f).at("ids").get<std::vector<int32_t>>();
      return m;
    }();
    return *k;
  }

  std::vector<GeneratedToken> plain(int64_t n, std::vector<int32_t> stop) {
    auto st = model->new_state(static_cast<int64_t>(prompt.size()) + n + 1);
    GenerateParams gp;
    gp.n_predict = n;
    gp.stop_ids = std::move(stop);
    GenerateMetrics g;
    return generate(*model, *st, prompt, gp, g);
  }

  std::vector<GeneratedToken> spec(int64_t n, const ProposeFn& propose, SpecStats& st, std::vector<int32_t> stop = {},
                                   SpecParams sp = {}) {
    auto s = model->new_state(static_cast<int64_t>(prompt.size()) + n + 1);
    GenerateParams gp;
    gp.n_predict = n;
    gp.stop_ids = std::move(stop);
    GenerateMetrics g;
    return generate_speculative(*model, *s, prompt, gp, sp, propose, g, st);
  }

  // The first n tokens of plain greedy decoding (each test process computes only what it needs).
  std::vector<GeneratedToken> ref(int64_t n) {
    if (static_cast<int64_t>(cached.size()) < n) cached = plain(n, {});
    return {cached.begin(), cached.begin() + n};
  }

  // prompt + the first n plain tokens: what a replay drafter should propose.
  std::vector<int32_t> sequence(int64_t n) {
    std::vector<int32_t> s = prompt;
    for (const GeneratedToken& t : ref(n)) s.push_back(t.id);
    return s;
  }
};

// Positions whose token, position or logits hash differ (plus any length difference).
inline int64_t mismatches(const std::vector<GeneratedToken>& want, const std::vector<GeneratedToken>& got) {
  int64_t bad = static_cast<int64_t>(std::max(want.size(), got.size()) - std::min(want.size(), got.size()));
  for (size_t i = 0; i < std::min(want.size(), got.size()); ++i)
    bad += want[i].id != got[i].id || want[i].pos != got[i].pos || want[i].logits_hash != got[i].logits_hash;
  return bad;
}


}  // namespace ferry::test
