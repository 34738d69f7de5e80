// Helpers for tests that compare the engine with reference outputs in tests/fixtures.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/formats/checkpoint.hpp"
#include "io/formats/model_config.hpp"
#include "kernels/decoding/generate.hpp"
#include "kernels/model/model.hpp"

namespace ferry::test {

inline std::filesystem::path fixture(const std::string& rel) { return std::filesystem::path(FERRY_FIXTURES) / rel; }

inline std::vector<float> read_f32(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << p;
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

inline std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

inline int32_t argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

// Per-row error of `got` against `ref` ([rows, cols]): max |d| and max |d| / max |ref|.
struct RowError {
  double max_abs = 0, max_rel = 0;
  int64_t worst_row = -1;
};
inline RowError compare_rows(const float* got, const float* ref, int64_t rows, int64_t cols) {
  RowError e;
  for (int64_t r = 0; r < rows; ++r) {
    double d = 0, m = 0;
    for (int64_t c = 0; c < cols; ++c) {
      d = std::max(d, std::abs(static_cast<double>(got[r * cols + c]) - ref[r * cols + c]));
      m = std::max(m, std::abs(static_cast<double>(ref[r * cols + c])));
    }
    if (d / m > e.max_rel) { e.max_rel = d / m; e.worst_row = r; }
    e.max_abs = std::max(e.max_abs, d);
  }
  return e;
}

// The logits hashes of n_predict greedy tokens generated after `prompt` (generate: a prompt pass, then plain steps)
// in a fresh state of ctx positions: what tests compare when a change must keep every logit's bits.
inline std::vector<uint64_t> greedy_logits_hashes(Model& m, const std::vector<int32_t>& prompt, int n_predict,
                                                  int64_t ctx) {
  auto st = m.new_state(ctx);
  GenerateParams gp;
  gp.n_predict = n_predict;
  GenerateMetrics gm;
  std::vector<uint64_t> h;
  generate(m, *st, prompt, gp, gm, [&](const GeneratedToken& t) {
    h.push_back(t.logits_hash);
    return true;
  });
  return h;
}

// n greedy tokens after `prompt`, as the fixtures' references generated them (reference.json generated_ids, run.json
// gen_ids): a prompt pass, then one plain step per token. deepseek_v32-a's reference re-ran the whole sequence each step and
// with torch's tie order the indexer's choice depends on the call's length, so for it (whole_sequence_each_step)
// every token is a fresh prompt pass over the sequence so far.
inline std::vector<int32_t> greedy_continuation(Model& m, int64_t vocab, const std::vector<int32_t>& prompt, size_t n,
                                                   bool whole_sequence_each_step) {
  ForwardOptions pre;
  pre.prefill = true;
  std::vector<int32_t> got;
  if (whole_sequence_each_step) {
    std::vector<int32_t> ids = prompt;
    for (size_t i = 0; i < n; ++i) {
      auto st = m.new_state(256);
      const auto logits = m.forward(*st, ids, pre);
      got.push_back(argmax(logits.data(), vocab));
      ids.push_back(got.back());
    }
    return got;
  }
  auto st = m.new_state(256);
  auto logits = m.forward(*st, prompt, pre);
  for (size_t i = 0; i < n; ++i) {
    got.push_back(argmax(logits.data(), vocab));
    logits = m.forward(*st, std::vector<int32_t>{got.back()});
  }
  return got;
}

// A model loaded from a fixture directory on the CPU back-end.
struct Loaded {
  ModelConfig cfg;
  std::unique_ptr<TensorSource> src;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> model;
};
inline Loaded load(const std::filesystem::path& dir, SpineType st = SpineType::f32,
                   IndexerTies ties = IndexerTies::by_position) {
  Loaded l;
  l.cfg = load_model_config(dir);
  l.src = open_safetensors_checkpoint(dir);
  l.be = make_cpu_backend();
  LoadOptions o;
  o.spine_type = st;
  o.indexer_ties = ties;
  l.model = std::make_unique<Model>(l.cfg, *l.src, *l.be, o);
  return l;
}

}  // namespace ferry::test
