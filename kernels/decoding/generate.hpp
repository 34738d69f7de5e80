// Plain (non-speculative) generation on a Model: prompt pass, then one decode step per token.
// Metrics follow DESIGN.md "Metrics".
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <span>
#include <vector>

#include "kernels/model/model.hpp"
#include "kernels/decoding/sampler.hpp"

namespace ferry {

struct GenerateParams {
  int64_t n_predict = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  // Leading prompt tokens the state already holds, computed by a prompt pass (the server's prompt
  // cache, at a multiple of 64 tokens): the prompt pass runs the rest. Less than the prompt's length.
  int64_t prompt_cached = 0;
  // With `snapshot`: the prompt pass also leaves there the KDA state as it was after the prompt's first
  // `snapshot_at` tokens (prompt_cached < snapshot_at < the prompt's length, both multiples of 64 apart):
  // ForwardOptions::snapshot, for the server's prompt cache.
  int64_t snapshot_at = 0;
  SeqSnapshot* snapshot = nullptr;
  // >= 0: each generated token's log-probability under the model (log-softmax of the raw logits, not
  // of the sampling distribution) and that many most likely tokens beside it (OpenAI `logprobs`).
  int logprobs = -1;
};

// The prompt pass of generate / generate_speculative: the prompt's tokens past p.prompt_cached (the
// state must hold exactly those), logits of the last row. Throws std::invalid_argument otherwise.
std::vector<float> prompt_pass(Model& model, SeqState& state, std::span<const int32_t> prompt, const GenerateParams& p);

struct TopLogprob {
  int32_t id = 0;
  float logprob = 0;
};

struct GeneratedToken {
  int64_t pos = 0;         // position the token takes in the sequence
  int32_t id = 0;
  uint64_t logits_hash = 0;  // FNV-1a 64 of the float32 logits that chose it
  float logprob = 0;         // with GenerateParams::logprobs >= 0: log p(id)
  std::vector<TopLogprob> top;  // ... and the GenerateParams::logprobs most likely ids, most likely first
};

// The token the sampler picks from one row of logits, with its hash and (logprobs >= 0) its
// log-probability and the `logprobs` most likely alternatives (ties: the lower id first). Every path
// that emits a token (a plain step, a verification block's row) makes it here.
GeneratedToken choose_token(int64_t pos, std::span<const float> logits, Sampler& sampler, int logprobs);

// One line of a `--trace-hash` file ("position id logits-hash", the hash in hex): what `ferry run` and
// `ferry-server` write and `ferry trace diff` / `ferry bench` read.
void write_trace_hash(std::ostream& out, const GeneratedToken& t);

struct GenerateMetrics {
  int64_t prompt_tokens = 0;  // the whole prompt, cached tokens included
  int64_t prompt_cached = 0;  // of which the state held (GenerateParams::prompt_cached)
  int64_t generated = 0;
  double prompt_s = 0;       // prompt pass (prefill) duration
  double first_token_s = 0;  // time of the first generated token, from the start of generate()
  double last_token_s = 0;   // time of the last generated token
  double decode_s = 0;       // from the end of the prompt pass to the last token
  // (generated - 1) / (last - first): excludes load, prompt pass and the first step.
  double steady_tok_s() const {
    return generated > 1 && last_token_s > first_token_s ? (generated - 1) / (last_token_s - first_token_s) : 0.0;
  }
  double generation_tok_s() const { return decode_s > 0 ? generated / decode_s : 0.0; }
};

// on_token returns false to stop early (e.g. a client disconnected).
std::vector<GeneratedToken> generate(Model& model, SeqState& state, std::span<const int32_t> prompt,
                                     const GenerateParams& p, GenerateMetrics& m,
                                     const std::function<bool(const GeneratedToken&)>& on_token = {});

}  // namespace ferry
