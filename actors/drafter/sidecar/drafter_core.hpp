// Drafters: what ferry-drafter runs to propose the next tokens. Three kinds, chosen by a spec string:
//   ngram[:N]            prompt lookup: continue the most recent earlier occurrence of the longest
//                        suffix (up to N tokens, default 4) of the history; no weights
//   replay:FILE[,opt...] a recorded token sequence (tests, benchmark sweeps), see ReplayOptions
//   qwen3:DIR            a dense Qwen3 checkpoint (HF safetensors) run by ferry's own kernels, greedy;
//                        confidence = softmax probability of the greedy token
// They live in the actors library so tests can run them in-process; ferry-drafter serves them over the
// wire protocol (messages/drafter.proto).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/tokenizers/tokenizer.hpp"
#include "kernels/decoding/verify.hpp"

namespace ferry {

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // The drafter's own vocabulary: null when it proposes raw ids (n-gram, replay, a checkpoint
  // directory without tokenizer files), which then must be the target's ids.
  virtual const Tokenizer* tokenizer() const { return nullptr; }
  virtual int32_t vocab_size() const { return 0; }  // 0 = whatever the history uses
  // At most max_tokens ids following `history` (in the drafter's vocabulary); may stop early at a
  // token whose confidence is under min_conf (the engine's gate would cut it anyway).
  virtual DraftProposal propose(std::span<const int32_t> history, int max_tokens, float min_conf) = 0;
};

// Identity of a vocabulary, compared across the wire: "ids" for drafters without a tokenizer, else
// "<vocab>:<fnv1a64 of every token's bytes>". Equal identities mean ids can be passed through as-is.
std::string tokenizer_identity(const Tokenizer* t);

// Replay options, written after the file name as ",key=value":
//   rate=R     each draft is the recorded token with probability R (deterministic per position and
//              seed), else a wrong one (default 1)
//   reject=W   force a wrong draft at index W of every proposal: first, middle, last or a number
//   at=P       force a wrong draft at sequence position P (repeatable)
//   len=N      at most N drafts per proposal (short proposals)
//   conf=C     confidence of every draft (default 1)
//   lowconf=I  the draft at index I gets confidence 0.05 (the gate cuts the proposal there)
//   seed=S     seed of the rate draw
// FILE: JSON with "ids" (the whole sequence) or "prompt_ids" + "generated_ids" (a fixture's
// reference.json), or whitespace/comma separated ids.
struct ReplayOptions {
  std::string file;
  double rate = 1.0;
  std::string reject;  // "", "first", "middle", "last" or an index
  std::vector<int64_t> at;
  int len = 15;
  float conf = 1.0f;
  int lowconf = -1;
  uint64_t seed = 0;
};
ReplayOptions parse_replay_spec(const std::string& rest);  // after "replay:"

std::unique_ptr<Drafter> make_ngram_drafter(int max_n = 4);
std::unique_ptr<Drafter> make_replay_drafter(const ReplayOptions& o);
std::unique_ptr<Drafter> make_replay_drafter(std::vector<int32_t> sequence, const ReplayOptions& o);
std::unique_ptr<Drafter> make_qwen3_drafter(const std::string& dir, int threads);

// "ngram", "ngram:3", "replay:FILE,...", "qwen3:DIR". Throws ConfigError naming the spec when unknown.
std::unique_ptr<Drafter> make_drafter(const std::string& spec, int threads = 1);

// Reads a token sequence file (see ReplayOptions). Throws FormatError naming the file.
std::vector<int32_t> read_token_file(const std::string& path);

}  // namespace ferry
