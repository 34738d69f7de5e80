// The client side of one ferry-drafter process: spawns it on one end of a socketpair (the sidecar gets
// the other end as --fd 3), does the handshake, and makes proposal calls with a deadline. Every
// failure is a SidecarError whose kind the bridge counts and whose message names what happened. Not
// an actor: the bridge's worker actor (drafter_bridge.cpp) owns one and calls it from a detached thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/tokenizers/tokenizer.hpp"
#include "kernels/decoding/verify.hpp"

namespace ferry {

enum class SidecarFailure : uint8_t { start, version, crash, timeout, garbage };
const char* to_string(SidecarFailure f);

struct SidecarError : std::runtime_error {
  SidecarError(SidecarFailure k, const std::string& what) : std::runtime_error(what), kind(k) {}
  SidecarFailure kind;
};

struct SidecarOptions {
  std::string exe;                // the ferry-drafter binary
  std::vector<std::string> args;  // e.g. {"--drafter", "ngram"}; "--fd 3" is added
  int start_timeout_ms = 30000;   // spawn to hello (a checkpoint drafter loads its weights first)
};

// The target model's vocabulary, which every proposal must end up in.
struct SidecarTarget {
  const Tokenizer* tokenizer = nullptr;  // may be null (ids only)
  int32_t vocab = 0;
};

class Sidecar {
 public:
  // Spawns and handshakes; throws SidecarError(start|version|crash|timeout).
  Sidecar(const SidecarOptions& o, const SidecarTarget& t);
  ~Sidecar();  // SIGKILL and reap
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

  pid_t pid() const { return pid_; }
  bool text_mode() const { return text_mode_; }
  const std::string& name() const { return name_; }

  // One proposal in the target vocabulary, checked: at most max_tokens tokens, every id inside the
  // target vocabulary, confidences in [0, 1]. Throws SidecarError(crash|timeout|garbage).
  DraftProposal propose(std::span<const int32_t> history, int max_tokens, float gate,
                        std::chrono::steady_clock::time_point deadline);

 private:
  void spawn(const SidecarOptions& o);
  void handshake(std::chrono::steady_clock::time_point deadline);
  DraftProposal from_text(const std::vector<std::string>& pieces, const std::vector<float>& conf) const;
  std::string exit_status();  // "exited with status N" / "killed by signal N" / "still running"

  SidecarTarget target_;
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  bool text_mode_ = false;
  std::string name_;
  uint64_t seq_ = 0;
};

}  // namespace ferry
