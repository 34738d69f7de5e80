// What the prompt-pass tests share, on the CPU (tests/kernels/model/prefill_chunk_test.cpp) and on CUDA
// (tests/gpu/model_test.cpp): one prompt pass from a fresh state, the KDA snapshot after a pass over a
// prompt's first rows, and the first row whose logits differ.
#pragma once

#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "kernels/model/model.hpp"

namespace ferry::test {

// A prompt pass: every row's logits (logits = true) or none.
inline ForwardOptions prompt_pass(bool logits) {
  ForwardOptions o;
  o.prefill = true;
  o.all_logits = logits;
  o.no_logits = !logits;
  return o;
}

// Every row's logits of a prompt pass over `prompt` from a fresh state, in passes of `chunk` rows
// (Model::set_prefill_chunk; 0 = one pass). The state it leaves goes to *state when given.
inline std::vector<float> prompt_pass_logits(Model& m, std::span<const int32_t> prompt, int64_t chunk,
                                             std::unique_ptr<SeqState>* state = nullptr) {
  m.set_prefill_chunk(chunk);
  auto st = m.new_state(256);
  auto logits = m.forward(*st, prompt, prompt_pass(true));
  if (state) *state = std::move(st);
  return logits;
}

// The KDA state (downloaded) after a prompt pass over the first `rows` of `prompt`.
inline std::vector<std::vector<float>> snapshot_after(Model& m, std::span<const int32_t> prompt, int64_t rows) {
  auto st = m.new_state(256);
  m.forward(*st, prompt.first(static_cast<size_t>(rows)), prompt_pass(false));
  return m.download(m.snapshot(*st));
}

// The first row whose bits differ, or -1.
inline int64_t first_differing_row(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  for (size_t r = 0; r * static_cast<size_t>(vocab) < a.size(); ++r)
    if (std::memcmp(a.data() + r * static_cast<size_t>(vocab), b.data() + r * static_cast<size_t>(vocab),
                    static_cast<size_t>(vocab) * sizeof(float)) != 0)
      return static_cast<int64_t>(r);
  return -1;
}

}  // namespace ferry::test
