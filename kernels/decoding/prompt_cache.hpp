// The prompt cache of ferry-server and `ferry chat` (what llama.cpp's cache_prompt does, made exact): the
// sequence state of the last job, and the KDA state as it was at the last multiple of 64 tokens before
// its prompt's end. A job whose prompt begins with those tokens (the next turn of the same chat)
// restores the snapshot and runs its prompt pass from there, so a long conversation is not passed
// through the model again each turn (with streaming, a turn still reads the experts its new tokens need).
//
// The snapshot is taken inside the job's one prompt pass (ForwardOptions::snapshot): no second pass,
// so a streamed layer's experts are not read twice for it.
//
// Exact: a prompt pass continued at a multiple of 64 positions computes the bits one pass over the
// whole prompt computes (Model::forward; tests/kernels/model/prefill_chunk_test.cpp), so a reply is the
// one `ferry run` gives for the same prompt, cached or not. Only rows a prompt pass computed are reused:
// a reply's rows (decode steps) never are. Models without KDA layers (no recurrent state) can also
// reuse a shorter common prefix, cut to a multiple of 64; with KDA, only the snapshot's whole prefix.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/decoding/generate.hpp"
#include "kernels/model/model.hpp"

namespace ferry {

class PromptCache {
 public:
  // enabled = false: every job gets a fresh state and nothing is kept between jobs.
  PromptCache(Model& model, int64_t ctx, bool enabled);

  struct Lease {
    std::unique_ptr<SeqState> state;  // holds the prompt's first `reused` tokens
    int64_t reused = 0;               // tokens the previous job left (GenerateParams::prompt_cached; OpenAI
                                      // usage "cached_tokens")
    int64_t mark = 0;                 // the prompt's last multiple of 64 before its end: snapshot there
    std::vector<int32_t> ids;         // the prompt's first `mark` tokens
  };
  // The state for `prompt`: the kept one restored at the longest prefix it can reuse, or a fresh one
  // (the kept one freed first). Nothing is kept while the job runs.
  Lease begin(std::span<const int32_t> prompt);
  // What the job's prompt pass must do for the cache: GenerateParams::prompt_cached, snapshot_at and
  // snapshot (no snapshot when the kept one is already at the mark, or the cache is off).
  void request_snapshot(const Lease& lease, GenerateParams& p);
  // The job is over: keep its state for the next job (ok: finished or cancelled, its prompt pass ran,
  // so its prompt rows and the snapshot are intact) or drop it (it failed).
  void end(Lease&& lease, bool ok);

 private:
  int64_t reusable(std::span<const int32_t> prompt) const;

  Model& model_;
  const int64_t ctx_;
  const bool enabled_;
  const bool recurrent_;             // the model has KDA layers: reuse needs the snapshot's whole prefix
  std::unique_ptr<SeqState> state_;  // between jobs: rows [0, ids_.size()) computed by a prompt pass
  std::vector<int32_t> ids_;         // the tokens those rows hold (a multiple of 64); empty: nothing kept
  SeqSnapshot snap_;                 // KDA state and conv history after ids_ (allocated once)
};

}  // namespace ferry
