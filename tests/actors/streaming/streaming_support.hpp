// Shared by the streaming tests: the k3-tiny-a fixture prepared (once per test binary) into expert
// layouts under the build directory, and a generation helper that records per-position logit hashes.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/runtime/model_loader.hpp"
#include "actors/runtime/runtime.hpp"
#include "kernels/decoding/generate.hpp"

namespace ferry::test {

namespace fs = std::filesystem;

inline const fs::path kHf = fs::path(FERRY_FIXTURES) / "k3-tiny-a/hf";
inline const fs::path kRoot = fs::path(FERRY_BINARY_DIR) / "test-data/streaming";

// The prompt of the fixture (hf/prompt.json), 24 ids.
inline const std::vector<int32_t> kPrompt = {768, 84, 257, 653, 384, 526, 659, 648, 259, 650, 414, 44,
                                             277, 258, 525, 351, 286, 105, 99,  107, 115, 259, 473, 467};
constexpr int64_t kGenerate = 12;

// Prepares the fixture into kRoot/<name> with `n_primary` primary expert directories and, when
// `replica_dir` is set, one more directory holding a copy of every expert; returns the model directory.
// Cached per process. Defined in prepare_fixture_test.cpp.
fs::path prepared(const std::string& name, int n_primary, bool replica_dir);

struct RunResult {
  std::vector<int32_t> ids;
  std::vector<uint64_t> hashes;  // FNV-1a 64 of each generated position's logits
  StreamingMetrics metrics;      // streaming runs only
};

// Loads `o`, calls `before` (e.g. to inject faults), generates kGenerate tokens greedily after kPrompt.
inline RunResult generate_run(const ModelOptions& o, const std::function<void(LoadedModel&)>& before = {}) {
  Runtime rt;  // the process's runtime root; outlives the model
  LoadedModel m = load_model(o, &rt);
  if (before) before(m);
  auto state = m.model->new_state(128);
  GenerateParams gp;
  gp.n_predict = kGenerate;
  GenerateMetrics gm;
  RunResult r;
  generate(*m.model, *state, kPrompt, gp, gm, [&](const GeneratedToken& t) {
    r.ids.push_back(t.id);
    r.hashes.push_back(t.logits_hash);
    return true;
  });
  if (m.streaming) r.metrics = m.streaming->metrics();
  return r;
}

// Streaming over a shared layout. Learning usage is off: a run would otherwise add its counts to the layout's
// usage.json, which the next test's caches start from (usage_test.cpp tests learning on a file of its own).
inline ModelOptions streaming_options(const fs::path& dir, uint64_t cache_experts) {
  ModelOptions o;
  o.dir = dir.string();
  o.threads = 2;
  o.ssd_streaming = true;
  o.streaming.learn_usage = false;
  o.streaming.cache_experts = cache_experts;
  o.streaming.read_timeout = std::chrono::milliseconds(10000);
  o.streaming.layer_timeout = std::chrono::milliseconds(30000);
  return o;
}

// The all-in-RAM engine on the single-directory layout: what every streaming run must equal.
inline const RunResult& reference() {
  static const RunResult r = [] {
    ModelOptions o;
    o.dir = prepared("one", 1, false).string();
    o.threads = 2;
    return generate_run(o);
  }();
  return r;
}

inline void expect_same_output(const RunResult& got, const RunResult& want) {
  ASSERT_EQ(got.hashes.size(), want.hashes.size());
  for (size_t i = 0; i < want.hashes.size(); ++i)
    ASSERT_EQ(got.hashes[i], want.hashes[i]) << "logits differ at generated position " << i;
  EXPECT_EQ(got.ids, want.ids);
}

}  // namespace ferry::test
