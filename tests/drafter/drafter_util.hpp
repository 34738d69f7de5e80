// Shared fixture of the drafter tests: the k3-tiny-a model (KDA + MLA + latent MoE) loaded once, its
// prompt, and the plain-decoding reference (ids and per-position logit hashes) for up to 512 tokens.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/checkpoint.hpp"
#include "kernels/model/verify.hpp"

namespace ferry::test {

inline std::filesystem::path fixture(const std::string& rel) { return std::filesystem::path(FERRY_FIXTURES) / rel; }

struct K3 {
  ModelConfig cfg;
  std::unique_ptr<TensorSource> src;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt;
  std::vector<GeneratedToken> plain512;  // plain greedy decoding, no stop ids

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
      m->plain512 = m->plain(512, {});
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

  // prompt + the first n plain tokens: what a replay drafter should propose.
  std::vector<int32_t> sequence(int64_t n = 512) const {
    std::vector<int32_t> s = prompt;
    for (int64_t i = 0; i < n && i < static_cast<int64_t>(plain512.size()); ++i) s.push_back(plain512[static_cast<size_t>(i)].id);
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

inline std::vector<GeneratedToken> head(const std::vector<GeneratedToken>& v, size_t n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size()))};
}

}  // namespace ferry::test
